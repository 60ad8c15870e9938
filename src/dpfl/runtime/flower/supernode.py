"""A SuperNode that asks its SuperLink for work more often than Flower's: ``flower-supernode`` with a
shorter wait after an empty pull.

Flower 1.42's SuperNode (``flwr.supernode.start_client_internal``) loops: pull a message from the
SuperLink; when there is none, ``time.sleep(3)``; else store it, wait for the ClientApp's reply
(checking every 0.5 s) and push it. A round of dpfl's secure DP-FedAvg sends each node four
messages one after another (three SecAgg+ stages and the training message, each after the server
has every node's previous reply), and each node has just pulled and found nothing when the next
one is sent: every message waits up to 3 s in the SuperLink, about 12 s a round per node, more than
training and encoding take together (``./dev bench flower``).

This module runs Flower's own ``flower-supernode`` command unchanged except for the waits of that
loop: in ``flwr.supernode.start_client_internal`` (and only there; its only uses of ``time`` are
three sleeps: 3 s after an empty pull, 0.5 s while a reply or its contents are not ready)
``time.sleep(s)`` becomes ``time.sleep(min(s, interval))``, with ``--pull-interval`` seconds
(default 0.25, at least 0.05). The cost is pull requests: each SuperNode asks its SuperLink
``1 / interval`` times a second while it waits (Flower's: once every 3 s), so a federation of
many nodes should use a longer interval (``dpfl federate local`` scales it with the node count,
:func:`dpfl.runtime.flower.local.supernode_pull_seconds`).

If the installed Flower no longer has that module or its ``time`` name, the SuperNode runs as
Flower's and says so on standard error: slower, same results. On other machines::

    python -m dpfl.runtime.flower.supernode --pull-interval 0.25 --insecure --superlink HOST:9092 ...

(every other option is ``flower-supernode``'s).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["DEFAULT_PULL_SECONDS", "MIN_PULL_SECONDS", "ShortSleeps", "install", "main"]

DEFAULT_PULL_SECONDS = 0.25
MIN_PULL_SECONDS = 0.05  # 20 pulls a second per node, the most a SuperLink is asked to serve


class ShortSleeps:
    """Stands in for the ``time`` module in one Flower module: ``sleep`` waits at most ``cap``
    seconds, every other name is the ``time`` module's."""

    def __init__(self, cap: float) -> None:
        if not MIN_PULL_SECONDS <= cap <= 3.0:
            raise ValueError(f"pull interval = {cap!r}: must be between {MIN_PULL_SECONDS:g} and 3 seconds "
                             "(3 s is Flower's own wait after an empty pull)")
        self.cap = float(cap)

    def sleep(self, seconds: float) -> None:
        time.sleep(min(float(seconds), self.cap))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def install(cap: float, module: ModuleType | None = None) -> bool:
    """Shorten the SuperNode loop's waits to at most ``cap`` seconds (module docstring). Returns
    whether it could: ``False`` (and a line on standard error) when Flower's loop is not where this
    Flower version is expected to keep it."""
    shim = ShortSleeps(cap)
    if module is None:
        try:
            from flwr.supernode import start_client_internal

            module = start_client_internal
        except ImportError as err:
            print(f"dpfl supernode: Flower's SuperNode loop not found ({err}); running with Flower's "
                  "own waits (3 s after an empty pull)", file=sys.stderr)
            return False
    current = getattr(module, "time", None)
    if current is not time and not isinstance(current, ShortSleeps):
        print(f"dpfl supernode: {module.__name__} has no `time` module to shorten the waits of; running "
              "with Flower's own waits (3 s after an empty pull)", file=sys.stderr)
        return False
    setattr(module, "time", shim)  # noqa: B010 - a module attribute, set by name on purpose
    return True


def _split_args(argv: Sequence[str]) -> tuple[float, list[str]]:
    """``--pull-interval S`` (or ``--pull-interval=S``) out of ``argv``; the rest is Flower's."""
    rest: list[str] = []
    interval = DEFAULT_PULL_SECONDS
    it = iter(argv)
    for arg in it:
        if arg == "--pull-interval" or arg.startswith("--pull-interval="):
            value = arg.split("=", 1)[1] if "=" in arg else next(it, None)
            if value is None:
                raise SystemExit("dpfl supernode: --pull-interval needs a value in seconds")
            try:
                interval = float(value)
            except ValueError:
                raise SystemExit(f"dpfl supernode: --pull-interval {value!r} is not a number of seconds") from None
        else:
            rest.append(arg)
    return interval, rest


def main(argv: Sequence[str] | None = None) -> None:
    interval, rest = _split_args(sys.argv[1:] if argv is None else argv)
    try:
        install(interval)
    except ValueError as err:
        raise SystemExit(f"dpfl supernode: {err}") from None
    from flwr.supernode.cli import flower_supernode

    if "-h" in rest or "--help" in rest:
        print(f"python -m dpfl.runtime.flower.supernode [--pull-interval SECONDS] FLOWER-SUPERNODE-OPTIONS\n\n"
              f"  --pull-interval SECONDS  the longest wait after an empty pull or while a reply is not ready "
              f"(default {DEFAULT_PULL_SECONDS:g}; Flower's: 3 and 0.5)\n\nflower-supernode's options:")
    sys.argv = ["flower-supernode", *rest]
    flower_supernode()


if __name__ == "__main__":
    main()

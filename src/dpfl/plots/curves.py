"""Per-round curves of a stored run (loss and accuracy), written as PNG. Reads only the store."""

from __future__ import annotations

from pathlib import Path

from dpfl.errors import ConfigError
from dpfl.store import RunStore


def plot_run(store: RunStore, run_id: str, out: str | Path | None = None) -> Path:
    """Write ``runs/plots/<run_id>.png`` (or ``out``) with loss and accuracy per round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = store.get(run_id)
    rows = store.rounds(record.run_id)
    if not rows:
        raise ConfigError(f"run {record.run_id} has no recorded rounds to plot")
    path = Path(out) if out else store.path.parent / "plots" / f"{record.run_id}.png"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot write the plot {path}: {err.strerror or err} ({err.filename or path.parent})") from None
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("train_loss", "train loss (local objective)"), ("test_loss", "test loss")):
        pts = [(r["round"] + 1, r[key]) for r in rows if key in r]
        if pts:
            ax_loss.plot(*zip(*pts, strict=True), marker=".", label=label)
    ax_loss.set_xlabel("round")
    ax_loss.set_ylabel("loss")
    ax_loss.legend()
    pts = [(r["round"] + 1, r["test_accuracy"]) for r in rows if "test_accuracy" in r]
    if pts:
        ax_acc.plot(*zip(*pts, strict=True), marker=".", color="tab:green")
    ax_acc.set_xlabel("round")
    ax_acc.set_ylabel("test accuracy")
    fig.suptitle(f"{record.name} ({record.algorithm}, {record.dataset}, {record.model}) — run {record.run_id}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise ConfigError(f"cannot write the plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return path

"""The canary audits' plot: empirical ε against the certified and the claimed ε, one point per run
(``dpfl audit --plot`` and the audit reports of :mod:`dpfl.experiments.audit_report`)."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_audits"]


def plot_audits(rows: list[tuple[str, dict[str, Any]]], out: str, title: str) -> None:
    """Empirical ε (with interval) against certified public and claimed ε, one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    xs = [a["certified_epsilon_public"] for _, a in rows]
    ys = [a["empirical_epsilon"] for _, a in rows]
    lo = [a["empirical_epsilon"] - a["empirical_epsilon_interval"][0] for _, a in rows]
    hi = [a["empirical_epsilon_interval"][1] - a["empirical_epsilon"] for _, a in rows]
    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label="empirical (canaries), 95% interval")
    reach = [float(a["reach"]) for _, a in rows if a.get("reach") is not None]
    if len(reach) == len(rows):
        ax.scatter(xs, reach, marker="v", color="C2", label="reach (same audit, noise removed)")
    claimed = [a["claimed_epsilon"] for _, a in rows]
    if all(c is not None for c in claimed):
        ax.scatter(xs, claimed, marker="x", color="C3", label="claimed (paper)")
    top = max([*xs, *[a["empirical_epsilon_interval"][1] for _, a in rows],
               *reach]) * 1.1
    ax.plot([0, top], [0, top], "k--", lw=0.8, label="empirical = certified")
    for (label, a), x in zip(rows, xs, strict=True):
        ax.annotate(label, (x, a["empirical_epsilon"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("certified epsilon (public observer)")
    ax.set_ylabel("epsilon")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)

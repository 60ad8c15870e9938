"""Reference values from Google's jax-privacy ``matrix_factorization`` package.

Writes ``tests/reference/jax_privacy_mf.json`` next to this file: sensitivities and prefix-sum
errors of fixed banded-Toeplitz and BLT (buffered linear Toeplitz) strategies, and of the strategies
jax-privacy's own optimizers find, at two (n, min_sep b, max participations k) settings, so that
dpfl's implementations can be tested against them without installing jax in CI.

NOT part of the test suite (pytest does not collect it, and CI has no jax). Run it with a separate
virtualenv that has jax-privacy, outside the repository::

    python3 -m venv ../jaxp-venv && ../jaxp-venv/bin/pip install jax-privacy
    OMP_NUM_THREADS=1 XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        ../jaxp-venv/bin/python tests/reference/jax_privacy_mf.py

See ``tests/reference/README.md`` for every key of the JSON and its exact definition.
Everything is float64 (``jax_enable_x64``) and deterministic on CPU, except the ``wall_time_s``
fields.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax_privacy.matrix_factorization import buffered_toeplitz, optimization, sensitivity, toeplitz

jax.config.update("jax_enable_x64", True)

OUT = Path(__file__).with_suffix(".json")

SETTINGS = [
    {"n": 2000, "min_sep": 100, "max_participations": 20},
    {"n": 2052, "min_sep": 342, "max_participations": 6},
]

# The fixed BLT: C = Toeplitz(1, s.1, s.theta, s.theta^2, ...); both lists exactly representable
# as given (decimal literals parsed to float64).
FIXED_BLT_BUF_DECAY = [0.9, 0.99, 0.999]
FIXED_BLT_OUTPUT_SCALE = [0.2, 0.15, 0.1]

# (num_buffers, max_optimizer_steps or None for optimize_loss's default of 600). The 2000-step reruns
# check convergence; d = 3 is not rerun (its 2000-step loss matched the 600-step one to ~1e-12).
BLT_RUNS = [(3, None), (4, None), (4, 2000), (5, None), (5, 2000)]

CALLED: list[str] = []  # every jax-privacy function called, in first-call order


def called(name: str) -> None:
    if name not in CALLED:
        CALLED.append(name)


def f(x: Any) -> float:
    return float(np.asarray(x))


def flist(x: Any) -> list[float]:
    return [float(v) for v in np.asarray(x).ravel()]


def sample_indices(n: int, b: int) -> list[int]:
    return sorted({0, 1, 2, 9, b - 1, b, 2 * b - 1, n // 2 - 1, n - 1})


def error_block(pqe: Any, sens2_single: float, sens2_minsep: float, n: int, b: int) -> dict[str, Any]:
    """The error measures derived from jax-privacy's per-query error vector (see README)."""
    pqe = np.asarray(pqe, dtype=np.float64)
    assert pqe.shape == (n,)
    total = float(pqe.sum())
    mean = float(pqe.mean())
    idx = sample_indices(n, b)
    return {
        "per_query_error_at": {str(i): float(pqe[i]) for i in idx},
        "total_squared_error_unit_noise": total,
        "mean_squared_error_unit_noise": mean,
        "max_squared_error_unit_noise": float(pqe.max()),
        "loss_single_participation": mean * sens2_single,
        "loss_min_sep": mean * sens2_minsep,
        "rmse_min_sep": math.sqrt(total * sens2_minsep / n),
        "rmse_single_participation": math.sqrt(total * sens2_single / n),
    }


def toeplitz_strategy(coef: Any, n: int, b: int, k: int) -> dict[str, Any]:
    """Sensitivities and prefix-sum error of the lower-triangular Toeplitz C with C[:, 0] = coef."""
    coef = jnp.asarray(coef, dtype=jnp.float64)
    called("toeplitz.sensitivity_squared")
    s2_single = f(toeplitz.sensitivity_squared(coef, n=n))
    called("toeplitz.minsep_sensitivity_squared")
    s2_minsep = f(toeplitz.minsep_sensitivity_squared(coef, min_sep=b, max_participations=k, n=n))
    called("toeplitz.per_query_error")
    pqe = toeplitz.per_query_error(strategy_coef=coef, n=n)
    called("toeplitz.loss")
    jp_loss = f(toeplitz.loss(coef, n))  # reduction_fn=jnp.mean (default)
    out: dict[str, Any] = {
        "sensitivity_squared_single": s2_single,
        "minsep_sensitivity_squared": s2_minsep,
        "minsep_sensitivity": math.sqrt(s2_minsep),
        "jax_privacy_toeplitz_loss": jp_loss,
    }
    out.update(error_block(pqe, s2_single, s2_minsep, n, b))
    return out


def blt_strategy(blt: Any, n: int, b: int, k: int) -> dict[str, Any]:
    """Sensitivities and prefix-sum error of a BLT strategy C (float64 BufferedToeplitz)."""
    called("buffered_toeplitz.BufferedToeplitz.toeplitz_coefs")
    c = blt.toeplitz_coefs(n)
    called("buffered_toeplitz.BufferedToeplitz.inverse")
    inv = blt.inverse()
    called("buffered_toeplitz.BufferedToeplitz.pillutla_score")
    pillutla = f(blt.pillutla_score())
    called("buffered_toeplitz.sensitivity_squared")
    s2_single = f(buffered_toeplitz.sensitivity_squared(blt, n))
    called("toeplitz.minsep_sensitivity_squared")
    s2_minsep = f(toeplitz.minsep_sensitivity_squared(c, min_sep=b, max_participations=k, n=n))
    # Error via the inverse BLT's Toeplitz coefficients (what LossFn uses) ...
    called("toeplitz.per_query_error")
    pqe_inv = toeplitz.per_query_error(noising_coef=inv.toeplitz_coefs(n), n=n)
    # ... and, as a cross-check, by solving with C's own coefficients.
    pqe_direct = np.asarray(toeplitz.per_query_error(strategy_coef=c, n=n))
    called("buffered_toeplitz.LossFn.build_min_sep")
    loss_fn = buffered_toeplitz.LossFn.build_min_sep(n=n, error="mean", min_sep=b, max_participations=k)
    called("buffered_toeplitz.LossFn.loss")
    lf_loss = f(loss_fn.loss(blt))
    called("buffered_toeplitz.min_buf_decay_gap")
    out: dict[str, Any] = {
        "buf_decay": flist(blt.buf_decay),
        "output_scale": flist(blt.output_scale),
        "inverse_buf_decay": flist(inv.buf_decay),
        "inverse_output_scale": flist(inv.output_scale),
        "min_buf_decay_gap": f(buffered_toeplitz.min_buf_decay_gap(blt.buf_decay)) if blt.buf_decay.size > 1 else None,
        "pillutla_score": pillutla,
        "toeplitz_coefs_first_10": flist(c[:10]),
        "toeplitz_coefs_last": f(c[-1]),
        "sensitivity_squared_single": s2_single,
        "minsep_sensitivity_squared": s2_minsep,
        "minsep_sensitivity": math.sqrt(s2_minsep),
        "jax_privacy_lossfn_min_sep_mean_loss": lf_loss,
    }
    out.update(error_block(pqe_inv, s2_single, s2_minsep, n, b))
    total_direct = float(pqe_direct.sum())
    out["total_squared_error_unit_noise_direct_solve"] = total_direct
    out["loss_min_sep_direct_solve"] = total_direct / n * s2_minsep
    out["rmse_min_sep_direct_solve"] = math.sqrt(total_direct * s2_minsep / n)
    return out


def optimized_banded(n: int, b: int, k: int) -> dict[str, Any]:
    history: list[float] = []

    def cb(args: Any) -> None:
        history.append(float(args.loss))

    called("toeplitz.optimize_banded_toeplitz")
    t0 = time.perf_counter()
    # Defaults: max_optimizer_steps=250, reduction_fn=jnp.mean, init = optimal_max_error_strategy_coefs(b),
    # optimizer = optimization.DEFAULT_OPTIMIZER (optax.lbfgs, memory 1, backtracking line search).
    coef = toeplitz.optimize_banded_toeplitz(n=n, bands=b)
    wall = time.perf_counter() - t0
    # Same optimisation with a callback, only to record the objective history (identical steps).
    called("optimization.optimize")
    called("toeplitz.optimal_max_error_strategy_coefs")
    init = toeplitz.optimal_max_error_strategy_coefs(b)
    params = optimization.optimize(lambda c: toeplitz.loss(c, n), init, max_optimizer_steps=250, callback=cb)
    same = bool(np.array_equal(np.asarray(params / jnp.linalg.norm(params)), np.asarray(coef)))
    out = {
        "call": f"toeplitz.optimize_banded_toeplitz(n={n}, bands={b})",
        "optimizer_settings": "defaults: max_optimizer_steps=250, reduction_fn=jnp.mean, "
        "init=toeplitz.optimal_max_error_strategy_coefs(bands), optax.lbfgs(memory_size=1, "
        "linesearch=scale_by_backtracking_linesearch(128)); result normalised to unit L2 norm",
        "objective": "toeplitz.loss(coef, n) = mean(per_query_error) * sum(coef**2) (single participation)",
        "objective_history": {str(i): history[i] for i in (0, 24, 49, 99, 149, 199, 249)},
        "history_run_reproduces_result_bitwise": same,
        "wall_time_s": wall,
        "coef": flist(coef),
    }
    out.update(toeplitz_strategy(coef, n, b, k))
    return out


def optimized_blt(n: int, b: int, k: int, num_buffers: int, steps: int | None) -> dict[str, Any]:
    history: list[float] = []

    def cb(args: Any) -> None:
        history.append(float(args.loss))

    called("buffered_toeplitz.LossFn.build_min_sep")
    loss_fn = buffered_toeplitz.LossFn.build_min_sep(n=n, error="mean", min_sep=b, max_participations=k)
    kwargs: dict[str, Any] = {"callback": cb}
    if steps is not None:
        kwargs["max_optimizer_steps"] = steps
    called("buffered_toeplitz.optimize_loss")
    call = (
        f"buffered_toeplitz.optimize_loss(LossFn.build_min_sep(n={n}, error='mean', min_sep={b}, "
        f"max_participations={k}), num_buffers={num_buffers}"
        + (f", max_optimizer_steps={steps}" if steps is not None else "")
        + ")"
    )
    t0 = time.perf_counter()
    try:
        blt, loss = buffered_toeplitz.optimize_loss(loss_fn, num_buffers=num_buffers, **kwargs)
    except RuntimeError as err:  # e.g. blt.inverse() fails when two buf_decay values coalesce
        return {
            "call": call,
            "failed": True,
            "error": " ".join(line.strip() for line in str(err).splitlines()[:4]),
            "steps_run": len(history),
            "wall_time_s": time.perf_counter() - t0,
        }
    wall = time.perf_counter() - t0
    marks = sorted({0, 99, 299, len(history) // 2 - 1, len(history) - 1})
    out: dict[str, Any] = {
        "call": call,
        "failed": False,
        "num_buffers": num_buffers,
        "max_optimizer_steps": steps if steps is not None else 600,
        "steps_run": len(history),
        "optimize_loss_returned_loss": f(loss),
        "penalized_objective_history": {str(i): history[i] for i in marks},
        "wall_time_s": wall,
    }
    out.update(blt_strategy(blt, n, b, k))
    return out


def identity(n: int, b: int, k: int) -> dict[str, Any]:
    out = toeplitz_strategy(jnp.ones(1), n, b, k)
    out["closed_form"] = {
        "minsep_sensitivity_squared": float(min(k, -(-n // b))),
        "total_squared_error_unit_noise": n * (n + 1) / 2,
        "rmse_min_sep": math.sqrt(min(k, -(-n // b)) * (n + 1) / 2),
    }
    return out


def dense_crosschecks(coef_banded: Any, blt: Any, n: int, b: int, k: int) -> dict[str, Any]:
    """jax-privacy's dense-matrix sensitivity routines on the materialised C (independent code path)."""
    called("toeplitz.materialize_lower_triangular")
    C_band = toeplitz.materialize_lower_triangular(coef_banded, n)
    called("sensitivity.get_sensitivity_banded")
    s_band = sensitivity.get_sensitivity_banded(C_band, min_sep=b, max_participations=k)
    called("buffered_toeplitz.BufferedToeplitz.materialize")
    C_blt = blt.materialize(n)
    called("sensitivity.get_min_sep_sensitivity_upper_bound")
    s_blt_ub = sensitivity.get_min_sep_sensitivity_upper_bound(C_blt, min_sep=b, max_participations=k)
    return {
        "fixed_banded_get_sensitivity_banded": float(s_band),
        "fixed_blt_get_min_sep_sensitivity_upper_bound": float(s_blt_ub),
    }


def run_setting(n: int, b: int, k: int) -> dict[str, Any]:
    t_setting = time.perf_counter()
    called("sensitivity.minsep_true_max_participations")
    k_eff = sensitivity.minsep_true_max_participations(n, b, k)
    res: dict[str, Any] = {"n": n, "min_sep": b, "max_participations": k, "effective_max_participations": k_eff}

    print(f"[n={n} b={b} k={k}] identity / fixed strategies", flush=True)
    res["identity"] = identity(n, b, k)

    called("toeplitz.optimal_max_error_strategy_coefs")
    coef = toeplitz.optimal_max_error_strategy_coefs(b)
    fixed_banded = {
        "definition": "c_j = binom(2j, j) / 4**j for j = 0..bands-1 (c_0 = 1, not normalised); "
        "= toeplitz.optimal_max_error_strategy_coefs(bands) = cumprod((2j-1)/(2j)), c_0 = 1",
        "bands": b,
        "coef": flist(coef),
    }
    fixed_banded.update(toeplitz_strategy(coef, n, b, k))
    res["fixed_banded_toeplitz"] = fixed_banded

    full = toeplitz.optimal_max_error_strategy_coefs(n)
    sqrt_full = {
        "definition": "c_j = binom(2j, j) / 4**j for all j = 0..n-1 (C = A^(1/2), not banded)",
    }
    sqrt_full.update(toeplitz_strategy(full, n, b, k))
    res["toeplitz_sqrt_full"] = sqrt_full

    called("buffered_toeplitz.BufferedToeplitz.build")
    blt = buffered_toeplitz.BufferedToeplitz.build(buf_decay=FIXED_BLT_BUF_DECAY, output_scale=FIXED_BLT_OUTPUT_SCALE)
    fixed_blt = {
        "definition": "BufferedToeplitz.build(buf_decay, output_scale): C Toeplitz lower-triangular with "
        "c_0 = 1, c_j = sum_i output_scale[i] * buf_decay[i]**(j-1) for j >= 1 (buffers sorted by decreasing decay)",
        "constructor_buf_decay": FIXED_BLT_BUF_DECAY,
        "constructor_output_scale": FIXED_BLT_OUTPUT_SCALE,
    }
    fixed_blt.update(blt_strategy(blt, n, b, k))
    res["fixed_blt"] = fixed_blt

    res["fixed_strategies_wall_time_s"] = time.perf_counter() - t_setting

    print(f"[n={n} b={b} k={k}] dense cross-checks", flush=True)
    t0 = time.perf_counter()
    res["dense_crosschecks"] = dense_crosschecks(coef, blt, n, b, k)
    res["dense_crosschecks"]["wall_time_s"] = time.perf_counter() - t0

    print(f"[n={n} b={b} k={k}] optimize_banded_toeplitz", flush=True)
    res["optimized_banded_toeplitz"] = optimized_banded(n, b, k)

    res["optimized_blt"] = {}
    for d, steps in BLT_RUNS:
        label = f"d{d}_default_steps" if steps is None else f"d{d}_steps_{steps}"
        print(f"[n={n} b={b} k={k}] optimize_loss {label}", flush=True)
        res["optimized_blt"][label] = optimized_blt(n, b, k, d, steps)
    res["wall_time_s"] = time.perf_counter() - t_setting
    return res


def main() -> None:
    t0 = time.perf_counter()
    doc: dict[str, Any] = {
        "generator": "tests/reference/jax_privacy_mf.py",
        "versions": {
            "jax_privacy": md.version("jax-privacy"),
            "jax": jax.__version__,
            "jaxlib": md.version("jaxlib"),
            "optax": md.version("optax"),
            "numpy": np.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "jax_backend": jax.default_backend(),
            "jax_enable_x64": bool(jax.config.read("jax_enable_x64")),
        },
        "tree_aggregation": "not provided by jax_privacy.matrix_factorization "
        f"{md.version('jax-privacy')} (modules: banded, buffered_toeplitz, dense, optimization, "
        "sensitivity, streaming_matrix, toeplitz)",
        "settings": [],
    }
    for s in SETTINGS:
        doc["settings"].append(run_setting(s["n"], s["min_sep"], s["max_participations"]))
    doc["functions_called"] = ["jax_privacy.matrix_factorization." + name for name in CALLED]
    doc["total_wall_time_s"] = time.perf_counter() - t0
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} in {doc['total_wall_time_s']:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

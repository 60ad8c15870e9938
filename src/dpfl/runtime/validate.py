"""Checks on what a client sends, before it can touch the aggregate.

An upload is rejected — logged with the client's id, and the round goes on without it, as if
the client had dropped out — when its vector has the wrong shape or dtype, holds NaN or Inf,
comes from a client that was not scheduled (or twice), states a sample count other than the
one the run was planned with, or declares a noise std (or any other value in
:meth:`dpfl.algorithms.base.Algorithm.declared_plan`) that differs from the server's plan.

A declared value is a statement, not a proof: the check catches misconfigured or outdated
clients (another config, another dpfl version), not a malicious client that lies.

**Norm check.** For algorithms whose uploads are clipped (privacy unit = client, Gaussian
noise), the server also rejects an upload whose L2 norm exceeds :func:`upload_norm_limit`: the
enforced sensitivity the algorithm declares for the server observer (a bound on the clipped
vector's norm: it is C under add/remove and 2C under replace-one for a vector clipped to C, so
up to 2× loose) plus what the declared Gaussian noise can add with overwhelming probability. It
catches a scaled or unclipped upload (e.g. a finite vector ×10⁶) and a client that adds far too
much noise; it cannot catch a vector inside the limit that was not computed from the client's
data, nor missing noise (an un-noised upload is shorter, not longer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from dpfl.privacy.calibration.gaussian import NORM_TAIL, upload_norm_limit

__all__ = ["NORM_TAIL", "RejectedUpload", "check_upload", "upload_norm_limit"]

REL_TOL = 1e-9



@dataclass(frozen=True)
class RejectedUpload:
    client: int
    reason: str

    def message(self, round_idx: int) -> str:
        return f"round {round_idx + 1}: rejected the upload of client {self.client}: {self.reason}"


def check_upload(
    client: int,
    vector: torch.Tensor,
    num_samples: int,
    declared: Mapping[str, float],
    *,
    num_params: int,
    expected_samples: int,
    plan: Mapping[str, float],
    norm_limit: float | None = None,
) -> RejectedUpload | None:
    """None if the upload of ``client`` is acceptable, else why not.

    ``norm_limit``: the largest acceptable L2 norm of the vector (:func:`upload_norm_limit`);
    None: no norm check (e.g. unclipped or two-point uploads).
    """
    if vector.dim() != 1 or int(vector.numel()) != num_params:
        return RejectedUpload(client, f"vector of shape {tuple(vector.shape)}, expected ({num_params},)")
    if not vector.is_floating_point():
        return RejectedUpload(client, f"vector of dtype {vector.dtype}, expected a floating dtype")
    bad = int((~torch.isfinite(vector)).sum())
    if bad:
        return RejectedUpload(client, f"{bad} non-finite entries (NaN or Inf)")
    if int(num_samples) != int(expected_samples):
        return RejectedUpload(client, f"declares {num_samples} samples, the run was planned with {expected_samples}")
    for key, want in plan.items():
        if key not in declared:
            return RejectedUpload(client, f"does not declare `{key}` (planned {want:.6g})")
        got = float(declared[key])
        if not math.isfinite(got) or not math.isclose(got, float(want), rel_tol=REL_TOL, abs_tol=1e-300):
            return RejectedUpload(client, f"declares {key} = {got:.6g}, the plan is {float(want):.6g}")
    for key, value in declared.items():
        if not math.isfinite(float(value)):
            return RejectedUpload(client, f"declares a non-finite {key} = {value}")
    if norm_limit is not None:
        norm = float(torch.linalg.vector_norm(vector.double()))
        if norm > norm_limit:
            return RejectedUpload(client, f"L2 norm {norm:.6g} exceeds {norm_limit:.6g}, the most its clipping and "
                                          "declared noise allow")
    return None

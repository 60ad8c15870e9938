"""Exact modular sums through Flower's SecAgg+ protocol (``SecAggPlusWorkflow``, flwr 1.42).

Clients hold integer vectors whose entries are residues modulo ``2**bits``; the server must learn
only their modular sum, bit for bit equal to ``sum(vectors) % 2**bits``. Flower's SecAgg+ is a
*fit workflow* of the legacy Strategy API (``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(...))``)
built for averaging float models, so the integers have to survive its float pipeline:

* client (``secaggplus_mod``, stage "collect masked vectors"): reads the ClientApp's FitRes,
  multiplies the parameters by ``round(num_examples / max_weight * Q) / Q``, clips them to
  ``[-c, c]``, maps them to ``(x + c) * Q / (2c)``, rounds stochastically (``np.ceil``, cast to
  **int32**, minus 1 where ``np.random.rand() < ceil - x``: numpy's global RNG), prepends the
  weight ``round(num_examples / max_weight * Q)`` and adds masks modulo ``M`` (int64);
* server (``unmask_stage``): the unmasked sum ``T`` of the survivors' quantized vectors and the sum
  ``W`` of their weights, both modulo ``M``, become ``(T * 2c/Q - c - (n - 1) c) * (Q / W)``, with
  ``n`` the number of clients whose masked vector arrived; every result of ``aggregate_fit``
  carries this same average as its parameters.

With ``c = 2**(bits-1)``, ``Q = 2**bits`` (so ``Q / 2c = 1``), ``max_weight = 1`` and every client
reporting ``num_examples = 1``, a residue ``r`` sent as ``r - 2**(bits-1)`` (:func:`encode`) is
quantized to ``r`` itself: no clipping (``-c <= r - c <= c - 1``), no rounding (the value is already
an integer, so ``ceil - x == 0`` and no random draw can lower it), weight factor exactly 1. The server
then holds ``T = sum(r)`` (below ``M``: nothing wraps) and ``W = n * Q``, and hands the strategy
``(T - n c) * fl(1/n)``; :func:`decode` multiplies back by ``n``, rounds, adds ``n c`` and reduces
modulo ``2**bits``. Every float step before the final multiplication is exact (integers below
``2**53``); the two roundings of ``fl(1/n)`` and of the product, plus the one of ``n * avg`` in
:func:`decode`, leave ``|n * avg - (T - n c)| <= 3.01 * 2**-53 * |T - n c|``, below 0.1 as long as
``n * 2**(bits-1) <= 2**48`` (:data:`EXACT_BITS`), so rounding recovers the integer exactly.

Limits of the installed implementation:

* ``bits <= 31`` (:data:`MAX_BITS`): quantized values are cast to **int32**, and they are never
  negative (``clip(x, -c, c) + c >= 0``), so at most ``2**31`` distinct values survive; residues
  up to ``2**31 - 1`` are quantized to themselves, ``2**32 - 1`` would overflow.
* ``modulus_range`` must be a power of two above ``n * Q`` for the weight column ``W = n * Q`` (and
  ``T``) not to wrap (a wrapped ``W`` makes the average meaningless, or ``inf`` when ``W % M == 0``).
  Flower's docstring says ``modulus_range`` "must be less than 4294967296", but nothing enforces it
  (the default is ``2**32``) and the arithmetic is int64 throughout (masks drawn as int64, masked
  vectors sent as int64 arrays); ``bits = 31`` needs ``M >= 2**33`` with two clients already. Sums
  of int64 arrays wrap modulo ``2**64`` in numpy, a multiple of ``M``, so even an overflow could not
  change a residue modulo ``M``. :func:`secagg_settings` takes ``M = 2**(bits + g)`` with ``g`` the
  bit length of ``max_clients`` and requires ``bits + g <= 49`` so that :func:`decode` is exact for
  every cohort the settings allow.

Deployment caveats (flwr 1.42, not fixed here): masks come from ``np.random.RandomState`` (MT19937,
not a cryptographic generator) seeded with a 32-bit XOR fold of the 32-byte seed, and are drawn
from ``[0, M - 2]`` (``randint``'s upper bound is exclusive); a client's FitRes ``num_examples`` and
``metrics`` reach the server in the clear; ``secaggplus_mod`` claims every message of type exactly
``"train"``; the quantizer draws from numpy's global RNG on the client even when no rounding is
needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow

__all__ = [
    "EXACT_BITS",
    "MAX_BITS",
    "SECURE_SUM_KEY",
    "WEIGHT",
    "SecAggSettings",
    "SecureSum",
    "SecureSumStrategy",
    "decode",
    "encode",
    "secagg_settings",
    "secagg_shares",
]

MAX_BITS = 31
"""Largest modulus exponent: Flower's quantizer casts to int32 and residues quantize to themselves."""

EXACT_BITS = 48
"""``decode`` is exact while ``num_clients * 2**(bits-1) <= 2**EXACT_BITS`` (float64 averaging)."""

WEIGHT = 1
"""The ``num_examples`` every client must report in its FitRes (the workflow's weight)."""

SECURE_SUM_KEY = "secure-sum-bits"
"""FitIns config key of dpfl's secure rounds: the modulus exponent b of the client's residues."""


def _check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
        raise ValueError(
            f"bits={bits!r} is not supported: residues modulo 2**bits pass SecAggPlusWorkflow "
            f"unchanged only for integer bits in [1, {MAX_BITS}] (its quantizer casts to int32)"
        )


def _max_clients_for(bits: int) -> int:
    """Largest ``max_clients`` with ``bits + max_clients.bit_length() <= EXACT_BITS + 1``."""
    return int(2 ** (EXACT_BITS + 1 - bits) - 1)


@dataclass(frozen=True)
class SecAggSettings:
    """``SecAggPlusWorkflow`` settings under which residues modulo ``2**bits`` sum exactly.

    Attributes:
        bits: Modulus exponent: entries are residues in ``[0, 2**bits)``.
        max_clients: Largest number of clients a round may aggregate.
        clipping_range: ``2**(bits-1)`` (a float: ``secaggplus_mod`` rejects an int).
        quantization_range: ``2**bits``, so that the quantizer's scale ``Q / 2c`` is exactly 1.
        modulus_range: ``2**(bits + max_clients.bit_length())``, above ``max_clients * 2**bits``.
        max_weight: 1.0, so that a client reporting ``num_examples == 1`` has weight factor 1.
    """

    bits: int
    max_clients: int
    clipping_range: float
    quantization_range: int
    modulus_range: int
    max_weight: float

    def workflow(
        self,
        num_shares: int | float,
        reconstruction_threshold: int | float,
        *,
        timeout: float | None = None,
    ) -> SecAggPlusWorkflow:
        """A ``SecAggPlusWorkflow`` with these settings.

        Args:
            num_shares: Shares of each client's secrets (its neighbourhood size, itself included);
                passed through to Flower.
            reconstruction_threshold: Shares needed to reconstruct a secret; passed through.
            timeout: Seconds to wait for replies at each of the four stages; ``None`` waits for
                every reply (a deployment should set it, or one silent node stalls the round).

        Returns:
            The workflow, to be used as ``DefaultWorkflow(fit_workflow=...)``.
        """
        return SecAggPlusWorkflow(
            num_shares,
            reconstruction_threshold,
            max_weight=self.max_weight,
            clipping_range=self.clipping_range,
            quantization_range=self.quantization_range,
            modulus_range=self.modulus_range,
            timeout=timeout,
        )


def secagg_settings(bits: int, *, max_clients: int = 1023) -> SecAggSettings:
    """The settings under which residues modulo ``2**bits`` pass SecAgg+ unchanged.

    Residues quantize to themselves deterministically (no clipping, no rounding), the weight
    factor is 1, and neither the sum nor the weight column can wrap modulo ``modulus_range`` for up
    to ``max_clients`` clients, so :func:`decode` recovers ``sum % 2**bits`` exactly.

    Args:
        bits: Modulus exponent, at most :data:`MAX_BITS` (31): Flower's quantizer casts quantized
            values (here: the residues themselves) to int32.
        max_clients: Largest number of clients whose vectors one round aggregates.

    Returns:
        The settings.

    Raises:
        ValueError: If ``bits`` is not an integer in ``[1, 31]``, or ``max_clients`` is not a
            positive integer with ``bits + max_clients.bit_length() <= 49`` (the bound that keeps
            the workflow's float averaging invertible).
    """
    _check_bits(bits)
    if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
        raise ValueError(f"max_clients={max_clients!r} must be a positive integer")
    if max_clients > _max_clients_for(bits):
        raise ValueError(
            f"max_clients={max_clients} is too large for bits={bits}: the workflow's float64 "
            f"average of that many clients is exactly invertible only up to "
            f"{_max_clients_for(bits)} clients"
        )
    return SecAggSettings(
        bits=bits,
        max_clients=max_clients,
        clipping_range=float(2 ** (bits - 1)),
        quantization_range=2**bits,
        modulus_range=2 ** (bits + max_clients.bit_length()),
        max_weight=1.0,
    )


COMPLETE_GRAPH_MAX = 15
"""Cohorts up to this size share every client's secrets with all others (:func:`secagg_shares`)."""


def secagg_shares(num_clients: int) -> tuple[int | float, int]:
    """``(num_shares, reconstruction_threshold)`` for a SecAgg+ round among ``num_clients`` clients.

    * ``num_shares``: all ``n`` clients (a complete graph: plain SecAgg) up to
      :data:`COMPLETE_GRAPH_MAX`; above, SecAgg+'s sparse graph of ``2 * ceil(log2 n) + 1``
      neighbours (odd, as the protocol wants; Bell et al. 2020 take O(log n)). For ``n == 2``
      Flower rejects the integer 2, so the float ``1.0`` ("all") is returned.
    * ``reconstruction_threshold``: ``floor(shares / 2) + 1``, at least 2 — more than half of the
      shares, so the replies of one unmask stage can never reconstruct both a client's private mask
      seed and its pairwise secret key (which would unmask its vector), while up to
      ``shares - threshold`` neighbours of each client may drop out (1 of 3, 2 of 5, 7 of 15).

    Raises:
        ValueError: If ``num_clients < 2`` (SecAgg+ cannot run: the caller must handle it).
    """
    n = int(num_clients)
    if n < 2:
        raise ValueError(f"SecAgg+ needs at least 2 clients, got {n}")
    shares = n if n <= COMPLETE_GRAPH_MAX else min(n, 2 * math.ceil(math.log2(n)) + 1)
    threshold = max(2, shares // 2 + 1)
    return (1.0 if shares == 2 else shares), threshold


def encode(residues: np.ndarray, bits: int) -> list[np.ndarray]:
    """The FitRes parameters that carry ``residues`` through SecAgg+ unchanged.

    Each residue ``r`` is sent as the float64 ``r - 2**(bits-1)``, which the workflow's quantizer
    (clipping range ``2**(bits-1)``, scale 1) maps back to ``r``. The client must report
    ``num_examples == WEIGHT`` (1) with these parameters.

    Args:
        residues: Integer array (at least one dimension) with entries in ``[0, 2**bits)``.
        bits: Modulus exponent, as given to :func:`secagg_settings`.

    Returns:
        A one-element list: the float64 array to return as the FitRes parameters.

    Raises:
        TypeError: If ``residues`` is not an integer array.
        ValueError: If ``bits`` is unsupported, ``residues`` is a scalar, or an entry is outside
            ``[0, 2**bits)``.
    """
    _check_bits(bits)
    arr = np.asarray(residues)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"residues must be an integer array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError("residues must have at least one dimension")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 2**bits):
        raise ValueError(
            f"residues must lie in [0, 2**{bits}), got values in [{int(arr.min())}, {int(arr.max())}]"
        )
    centred = arr.astype(np.int64) - np.int64(2 ** (bits - 1))
    return [centred.astype(np.float64)]


def decode(arrays: Sequence[np.ndarray], num_clients: int, bits: int) -> np.ndarray:
    """The modular sum hidden in the average that ``SecAggPlusWorkflow`` hands the strategy.

    The workflow's average of ``n = num_clients`` encoded vectors is ``avg = fl(D * fl(1/n))`` with
    ``D = sum(r) - n * 2**(bits-1)``; this returns ``(rint(n * avg) + n * 2**(bits-1)) % 2**bits``,
    which is ``sum(r) % 2**bits`` exactly while ``n * 2**(bits-1) <= 2**48``.

    Args:
        arrays: The aggregated parameters (``parameters_to_ndarrays`` of any result's
            ``FitRes.parameters`` in ``aggregate_fit``): one float array.
        num_clients: The number of clients the workflow averaged over: those whose masked vector
            arrived, i.e. ``len(results)`` in ``aggregate_fit``.
        bits: Modulus exponent of the residues.

    Returns:
        The int64 array of ``sum(residues) % 2**bits``.

    Raises:
        ValueError: If ``bits`` or ``num_clients`` is out of range, or ``arrays`` is not such an
            average (not one finite float array, not within 0.1 of a multiple of
            ``1/num_clients`` after scaling, or outside the range ``num_clients`` encoded vectors
            can reach): the wrong ``num_clients``, other settings, or a wrapped weight column.
    """
    _check_bits(bits)
    half = 2 ** (bits - 1)
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        raise ValueError(f"num_clients={num_clients!r} must be a positive integer")
    if num_clients * half > 2**EXACT_BITS:
        raise ValueError(
            f"num_clients={num_clients} is too large for bits={bits}: the workflow's float64 "
            f"average is exactly invertible only up to {2 ** (EXACT_BITS + 1 - bits)} clients"
        )
    if len(arrays) != 1:
        raise ValueError(f"expected the one aggregated array encode() produces, got {len(arrays)}")
    avg = np.asarray(arrays[0])
    if avg.dtype.kind != "f":
        raise ValueError(f"expected a float array (the workflow's average), got dtype {avg.dtype}")
    avg = avg.astype(np.float64, copy=False)
    if not np.all(np.isfinite(avg)):
        raise ValueError("the aggregate has non-finite entries: the weight column wrapped")
    scaled = avg * num_clients
    centred = np.rint(scaled)
    if avg.size:
        if float(np.max(np.abs(scaled - centred))) > 0.1:
            raise ValueError(
                f"the aggregate is not an average of {num_clients} encoded vectors "
                "(wrong num_clients or settings)"
            )
        if float(centred.min()) < -num_clients * half or float(centred.max()) > num_clients * (half - 1):
            raise ValueError(
                f"the aggregate is out of the range of {num_clients} encoded vectors "
                "(wrong num_clients or settings)"
            )
    total = centred.astype(np.int64) + np.int64(num_clients * half)
    return np.asarray(total & np.int64(2**bits - 1), dtype=np.int64)


@dataclass(frozen=True)
class SecureSum:
    """One round's modular sum, as :class:`SecureSumStrategy` hands it to its callback.

    Attributes:
        server_round: The round (``DefaultWorkflow``'s counter, from 1).
        total: int64 array, ``sum(residues of the covered clients) % 2**bits``.
        node_ids: Sorted Flower node ids of the clients the sum covers (those whose masked vector
            reached the server).
        sampled_node_ids: Sorted node ids the strategy sampled for the round; the difference to
            ``node_ids`` dropped out before uploading their masked vector.
    """

    server_round: int
    total: np.ndarray
    node_ids: tuple[int, ...]
    sampled_node_ids: tuple[int, ...]

    @property
    def num_clients(self) -> int:
        """The number of clients the sum covers."""
        return len(self.node_ids)


class SecureSumStrategy(Strategy):
    """Legacy Strategy for ``SecAggPlusWorkflow``: each round's modular sum goes to a callback.

    ``configure_fit`` samples ``num_clients`` clients and sends them empty parameters and the
    config ``{"server_round": r, **fit_config(r)}``; each ClientApp returns
    ``encode(residues, bits)`` with ``num_examples == WEIGHT``. ``aggregate_fit`` decodes the
    unmasked average into the modular sum and calls ``on_sum``; it returns no parameters, so the
    workflow's global parameters stay empty. No evaluation.

    Args:
        settings: The settings the workflow was built with (:func:`secagg_settings`).
        num_clients: Clients to sample each round (waits until that many are connected).
        on_sum: Called once per round whose secure aggregation completed, with the round's sum.
        fit_config: Extra per-round config for the clients (must not set ``"server_round"``).

    Raises:
        ValueError: If ``num_clients`` is below 2 (SecAgg+ needs two) or above
            ``settings.max_clients``.
    """

    def __init__(
        self,
        settings: SecAggSettings,
        num_clients: int,
        on_sum: Callable[[SecureSum], None],
        fit_config: Callable[[int], dict[str, Scalar]] | None = None,
    ) -> None:
        if not 2 <= num_clients <= settings.max_clients:
            raise ValueError(
                f"num_clients={num_clients} must be in [2, {settings.max_clients}] "
                "(SecAgg+ needs two clients; the settings allow max_clients)"
            )
        self.settings = settings
        self.num_clients = num_clients
        self._on_sum = on_sum
        self._fit_config = fit_config
        self._sampled: dict[int, tuple[int, ...]] = {}

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """Empty global parameters (so no client is asked for initial ones)."""
        return Parameters(tensors=[], tensor_type="numpy.ndarray")

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Sample ``num_clients`` clients and send each the round's config."""
        config: dict[str, Scalar] = dict(self._fit_config(server_round)) if self._fit_config else {}
        config["server_round"] = server_round
        clients = client_manager.sample(num_clients=self.num_clients, min_num_clients=self.num_clients)
        self._sampled[server_round] = tuple(sorted(int(c.node_id) for c in clients))
        return [(client, FitIns(parameters, dict(config))) for client in clients]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Decode the unmasked average of the ``results`` into their modular sum; call ``on_sum``.

        ``results`` holds one entry per client whose masked vector arrived, every one carrying
        the same aggregate as its parameters; ``failures`` holds the error replies of all stages
        (not used).

        Raises:
            ValueError: If a client reported ``num_examples != WEIGHT`` (the aggregate would be
                a differently weighted average) or the aggregate does not decode.
        """
        if not results:
            return None, {}
        weights = sorted({res.num_examples for _, res in results})
        if weights != [WEIGHT]:
            raise ValueError(
                f"round {server_round}: clients reported num_examples {weights}; "
                f"secure sums need num_examples == {WEIGHT} from every client"
            )
        total = decode(parameters_to_ndarrays(results[0][1].parameters), len(results), self.settings.bits)
        covered = tuple(sorted(int(proxy.node_id) for proxy, _ in results))
        self._on_sum(
            SecureSum(
                server_round=server_round,
                total=total,
                node_ids=covered,
                sampled_node_ids=self._sampled.pop(server_round, ()),
            )
        )
        return None, {"num_clients": len(results)}

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """No federated evaluation."""
        return []

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        """No federated evaluation."""
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """No centralized evaluation."""
        return None

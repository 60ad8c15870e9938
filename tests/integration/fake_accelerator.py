"""A fake accelerator: the code path of a GPU run, on a CPU-only machine, with CUDA's device rules.

dpfl resolves ``device: cuda`` to a ``torch.device`` and hands it to the engines, which place the
model, the data, the batches and the stacked parameters on it. Without a GPU that path never
runs, so a tensor left on the CPU by mistake would only show on someone's GPU. Here the resolved
device is :data:`FAKE` (``meta``: a device type that every torch build knows and that needs no
driver) and, inside :class:`FakeAccelerator`, a tensor on it is an :class:`OnAccelerator` — a
wrapper reporting ``device == meta`` whose numbers live in a CPU tensor (``.elem``), so every
operation really computes. Each operation checks what CUDA would check and raises what CUDA
would raise:

* all tensor operands on one device, except 0-dim CPU tensors (CUDA takes them as scalars) and
  CPU index tensors of an indexed accelerator tensor (``x[idx]``, ``x[idx] = v``);
* a random draw uses a generator of its output's device (``torch.randn(..., generator=g,
  device=d)``, ``out=`` and in-place draws alike);
* ``.numpy()`` of an accelerator tensor fails; ``.to()``, ``.cpu()``, ``.item()``, ``float()``,
  ``.tolist()`` and ``copy_`` across devices work.

Generators: a CUDA run's ``SeedSequence.generator(..., device=cuda)`` is a CUDA generator. Here
:func:`install` makes it a :class:`FakeGenerator`: a CPU generator seeded the same whose
``.device`` says :data:`FAKE`. So a fake-accelerator run draws the numbers of a CPU run and must
end with the same parameters, bit for bit (a real GPU's streams differ from the CPU's).

Factories without ``device=`` make CPU tensors, as torch's default device is the CPU.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

FAKE = torch.device("meta")
"""The stand-in for the accelerator (``cuda`` resolves to it in the tests)."""

aten = torch.ops.aten

# the indexed tensor may be on the accelerator while its index tensors are on the CPU
_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}


class DeviceMismatch(RuntimeError):
    """What CUDA raises for operands on two devices (a RuntimeError, as torch's)."""


class OnAccelerator(torch.Tensor):
    """A tensor on :data:`FAKE` whose values are the CPU tensor ``elem``."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> OnAccelerator:
        assert type(elem) is torch.Tensor and elem.device.type == "cpu", type(elem)
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            layout=elem.layout, device=FAKE, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # noqa: D105
        return f"OnAccelerator({self.elem!r})"

    def tolist(self) -> Any:  # CUDA copies to the host
        return self.elem.tolist()

    def numpy(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"can't convert {FAKE} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs or {}, None)


def _device_of(t: torch.Tensor) -> str:
    return "acc" if isinstance(t, OnAccelerator) else "cpu"


def _is_fake(device: Any) -> bool:
    return device is not None and torch.device(device) == FAKE


def _run(func: Any, args: Any, kwargs: dict[str, Any], mode: FakeAccelerator | None) -> Any:
    leaves, _ = tree_flatten((args, kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    for t in tensors:
        if not isinstance(t, OnAccelerator) and t.device.type != "cpu":
            raise AssertionError(f"a {t.device} tensor that is not the harness's reached {func}: something built "
                                 "it without dispatching (see install)")
    name = str(func)
    device = kwargs.get("device")
    if func is aten._to_copy.default:
        target = ("acc" if _is_fake(device) else "cpu") if device is not None else _device_of(args[0])
    elif func is aten.copy_.default:
        target = _device_of(args[0])  # a copy may cross devices
    elif device is not None:
        target = "acc" if _is_fake(device) else "cpu"
    else:
        checked = tensors
        if func in _INDEX_OPS:
            indices = [t for t in tree_flatten(args[1])[0] if isinstance(t, torch.Tensor)]
            if _device_of(args[0]) == "cpu" and any(_device_of(t) == "acc" for t in indices):
                raise DeviceMismatch(f"indices should be either on cpu or on the same device as the indexed "
                                     f"tensor (cpu) [fake accelerator: {name}]")
            checked = [t for t in tensors if not any(t is i for i in indices)]
        on_acc = any(_device_of(t) == "acc" for t in checked)
        host = [t for t in checked if _device_of(t) == "cpu" and t.dim() > 0]
        if on_acc and host:
            raise DeviceMismatch(f"Expected all tensors to be on the same device, but found at least two "
                                 f"devices, {FAKE} and cpu! [fake accelerator: {name}, a CPU operand of shape "
                                 f"{tuple(host[0].shape)}]")
        target = "acc" if on_acc else "cpu"
    gen = kwargs.get("generator")
    if gen is not None:
        gen_device = "acc" if mode is not None and mode.is_fake_generator(gen) else "cpu"
        if gen_device != target:
            want = FAKE.type if target == "acc" else "cpu"
            have = FAKE.type if gen_device == "acc" else "cpu"
            raise DeviceMismatch(f"Expected a '{want}' device type for generator but found '{have}' "
                                 f"[fake accelerator: {name}]")
    if mode is not None:
        mode.ops[target] += 1

    def unwrap(x: Any) -> Any:
        if isinstance(x, OnAccelerator):
            return x.elem
        if isinstance(x, torch.device) and x == FAKE:
            return torch.device("cpu")
        return x

    plain_kwargs = {k: (torch.device("cpu") if k == "device" and _is_fake(v) else unwrap(v)) for k, v in kwargs.items()}
    out = func(*tree_map(unwrap, args), **tree_map(unwrap, plain_kwargs))
    originals = {id(t.elem): t for t in tensors if isinstance(t, OnAccelerator)}

    def wrap(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or isinstance(x, OnAccelerator):
            return x
        if id(x) in originals:  # an in-place or out= operation returns its operand
            kept = originals[id(x)]
            if kept.shape != x.shape or kept.stride() != x.stride():
                # an in-place view op (matmul's squeeze_): the same op on the wrapper's metadata
                # alone, by the meta kernel that the wrapper's device selects
                with torch._C._DisableTorchDispatch():
                    func(*tree_map(lambda a: kept if a is kept else a, args), **kwargs)
                if kept.shape != x.shape or kept.stride() != x.stride():
                    raise AssertionError(f"{name} changed its operand's shape in place ({tuple(kept.shape)} -> "
                                         f"{tuple(x.shape)}): the harness cannot follow it")
            return kept
        return OnAccelerator(x) if target == "acc" else x

    result = tree_map(wrap, out)
    if mode is not None and target == "cpu":
        big = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor) and t.numel() >= mode.large]
        if big:
            mode.host_work[name] += 1
    return result


class FakeGenerator(torch.Generator):
    """A CPU generator that says it is on :data:`FAKE` (``.device``), as a CUDA generator says
    ``cuda``; operations know it by its seed (:meth:`FakeAccelerator.is_fake_generator`)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return FAKE


class FakeAccelerator(TorchDispatchMode):
    """Every operation inside checks CUDA's device rules (see the module docstring).

    Attributes:
        ops: operations run on each device, ``{"acc": n, "cpu": m}``.
        host_work: CPU operations with an output of at least ``large`` elements, by name (work
            a GPU run would do on the host).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.host_work: collections.Counter[str] = collections.Counter()
        self.large = 4096
        self._seeds: dict[str, set[int]] = {"acc": set(), "cpu": set()}

    def __enter__(self) -> FakeAccelerator:
        self._seeds = {"acc": set(), "cpu": set()}  # the streams of what runs inside
        self.ops.clear()
        self.host_work.clear()
        return super().__enter__()  # type: ignore[no-any-return]

    def is_fake_generator(self, gen: torch.Generator) -> bool:
        """Whether ``gen`` was registered as an accelerator generator. A generator is known by its
        seed (torch hands a dispatched operation a new Python object for the same generator); dpfl's
        seeds are 64-bit hashes of (seed, round, client, purpose), distinct for distinct streams."""
        seed = gen.initial_seed()
        if seed in self._seeds["acc"] and seed in self._seeds["cpu"]:
            raise AssertionError(f"stream seed {seed} was asked for on both devices: "
                                 "the harness cannot tell them apart")
        return seed in self._seeds["acc"]

    def register_generator(self, gen: torch.Generator, device: str) -> torch.Generator:
        """Record that ``gen`` (a CPU generator) stands for a generator on ``device`` ("acc" or "cpu")."""
        self._seeds[device].add(gen.initial_seed())
        return gen

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs or {}, self)


def install(monkeypatch: Any, mode: FakeAccelerator) -> None:
    """What the mode cannot see by itself, patched for the test:

    * ``SeedSequence.generator(..., device=FAKE)``: a CPU generator of the same seed, registered
      with ``mode`` as an accelerator generator (CPU ones are registered too, so that a stream
      asked for on both devices is caught);
    * ``torch.tensor`` and ``torch.as_tensor`` with ``device=FAKE``: torch builds these in C++
      without dispatching, which would give a real (empty) meta tensor; they are built on the CPU
      and moved, as a CUDA build copies them to the GPU.
    """
    from dpfl.rng import SeedSequence

    real = SeedSequence.generator

    def generator(self: SeedSequence, round_idx: int, client: int, purpose: str,
                  device: str | torch.device = "cpu") -> torch.Generator:
        if _is_fake(device):
            gen = FakeGenerator()
            gen.manual_seed(real(self, round_idx, client, purpose).initial_seed())
            return mode.register_generator(gen, "acc")
        return mode.register_generator(real(self, round_idx, client, purpose, device), "cpu")

    monkeypatch.setattr(SeedSequence, "generator", generator)
    for name in ("tensor", "as_tensor"):
        make = getattr(torch, name)

        def build(data: Any, *args: Any, _make: Any = make, device: Any = None, **kwargs: Any) -> torch.Tensor:
            if _is_fake(device):
                return _make(data, *args, **kwargs).to(FAKE)
            return _make(data, *args, device=device, **kwargs)

        monkeypatch.setattr(torch, name, build)


def accelerator_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The :class:`OnAccelerator` tensors in a nested structure."""
    for leaf in tree_flatten(obj)[0]:
        if isinstance(leaf, OnAccelerator):
            yield leaf

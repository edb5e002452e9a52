"""What a device call really ran: the dispatcher's call tree from ``torch.profiler``.

A registration says which kernel the dispatcher *would* pick; only the call tree says what that
kernel did. Many real kernels fall back to the host from inside (for a dtype, a rank, an
argument): they copy their inputs to the host, compute there and copy the result back. Those
copies appear in the profiler's tree *nested inside the op*, as a ``copy_`` (or ``_copy_from``,
``_copy_from_and_resize``, ``_to_cpu``) between a host tensor and a device tensor::

    with CallTrace(device_type="refaccel") as trace:
        out = torch.add(a, b)                # a, b already on the device: staging is outside
    trace.observed.state                     # FallbackState.observed
    trace.observed.host_ops, trace.observed.copies, trace.observed.bytes
    # ['aten::add'], 3, 1536

The probe stages inputs before the block and reads outputs after it, so its own copies never
count. A host scalar read (``_local_scalar_dense``, ``item``) is not a compute fallback, nor are
copies one way only: a kernel that reads indices, sizes or a mask to the host to check or plan,
then computes on the device, copies nothing back, and one that uploads a table computed nothing
on the host. A fallback is a round trip: to the host, then back to the device (a 0-dim result
counts on the way back); a call whose result holds no device tensor (``equal``) needs no way
back, which the caller decides (:meth:`Observed.one_way`). A
``TorchDispatchMode`` cannot do this: it sees only what enters the dispatcher from Python, never
the calls a kernel makes. When the profiler cannot run, the state is ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch

from opmatrix.schema import FallbackState

if TYPE_CHECKING:
    from torch._C._profiler import _ProfilerEvent, _TensorMetadata

__all__ = ["CallTrace", "Observed", "children_of_root"]

#: ops that copy between tensors (a copy between a host and a device tensor is a transfer)
_COPIES = frozenset({"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})
#: ops that always move device data to the host
_TO_HOST = frozenset({"aten::_to_cpu"})
#: host scalar reads: a value read for control flow is not a compute fallback
_SCALAR_READS = frozenset({"aten::_local_scalar_dense", "aten::item"})
#: ops that allocate, view or copy: never "host computation" in themselves
_PLUMBING = frozenset(
    {
        "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::as_strided",
        "aten::as_strided_", "aten::slice", "aten::select", "aten::set_", "aten::resize_", "aten::copy_",
        "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy", "aten::to", "aten::_to_cpu",
        "aten::contiguous", "aten::clone", "aten::detach", "aten::alias", "aten::expand", "aten::reshape",
        "aten::_reshape_alias", "aten::_unsafe_view", "aten::t", "aten::transpose", "aten::permute",
        "aten::unsqueeze", "aten::squeeze", "aten::lift_fresh", "aten::cpu", "aten::zeros", "aten::zero_",
        "aten::fill_", "aten::result_type", "aten::is_nonzero", "aten::empty_permuted", "aten::new_empty",
        "aten::new_empty_strided", "aten::resolve_conj", "aten::resolve_neg",
    }
)


@dataclass
class Observed:
    """Host fallback as the call tree shows it: state, host ops, transfers (count and bytes)."""

    state: FallbackState = FallbackState.unknown
    host_ops: list[str] = field(default_factory=list)
    copies: int = 0
    bytes: int = 0
    #: transfers by direction (a 0-dim host scalar staged onto the device counts in ``to_device``
    #: only, never in ``copies``: alone it is argument passing, after a copy to the host a result)
    to_host: int = 0
    to_device: int = 0
    #: names of the ops at the top of the call (the op itself) and their direct children
    roots: list[_ProfilerEvent] = field(default_factory=list)
    #: every op name in the call tree, first occurrence order
    names: list[str] = field(default_factory=list)
    why: str | None = None  # why the state is unknown

    def one_way(self) -> bool:
        """Copies to the host and nothing back (or uploads only): a host read, no fallback
        unless the call's result holds no device tensor."""
        return self.copies > 0 and not (self.to_host and self.to_device)


def _tensors(event: _ProfilerEvent) -> list[_TensorMetadata]:
    out: list[_TensorMetadata] = []
    for value in getattr(event.extra_fields, "inputs", None) or []:
        if hasattr(value, "device") and hasattr(value, "sizes"):
            out.append(cast("_TensorMetadata", value))
        elif isinstance(value, list):
            out += [cast("_TensorMetadata", v) for v in value if hasattr(v, "device") and hasattr(v, "sizes")]
    return out


def _nbytes(meta: _TensorMetadata) -> int:
    n = 1
    for s in meta.sizes:
        n *= int(s)
    try:
        return n * torch.empty((), dtype=meta.dtype).element_size()
    except (TypeError, RuntimeError):
        return n


def _is_host(meta: _TensorMetadata) -> bool:
    return str(meta.device).split(":")[0] == "cpu"


def _transfer(event: _ProfilerEvent) -> tuple[bool, int] | None:
    """(to the host?, bytes moved) when ``event`` copies between the host and a device, else None;
    bytes -1 for a 0-dim host scalar staged onto the device (``x + torch.tensor(2.)``: argument
    passing, unless the call copied to the host first)."""
    name = event.name
    tensors = _tensors(event)
    if name in _TO_HOST and tensors:
        return True, sum(_nbytes(t) for t in tensors)
    if name not in _COPIES or len(tensors) < 2:
        return None
    a, b = tensors[0], tensors[1]
    if _is_host(a) == _is_host(b):
        return None
    src = b if name == "aten::copy_" else a
    if _is_host(src):
        return False, -1 if not list(src.sizes) else _nbytes(src)
    return True, _nbytes(src)


class CallTrace:
    """Profile one device call; :attr:`observed` says whether it fell back to the host."""

    def __init__(self) -> None:
        self._prof: torch.profiler.profile | None = None
        self.observed = Observed()

    def __enter__(self) -> CallTrace:
        try:
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
            self._prof.__enter__()
        except Exception as exc:  # noqa: BLE001 - no profiler here: the evidence is unknown, not absent
            self._prof = None
            self.observed = Observed(why=f"profiler unavailable: {type(exc).__name__}: {str(exc)[:160]}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._prof is None:
            return
        try:
            self._prof.__exit__(None, None, None)
            results = self._prof.profiler.kineto_results if self._prof.profiler is not None else None
            if results is None:
                raise RuntimeError("the profiler kept no results")
            roots = results.experimental_event_tree()
        except Exception as err:  # noqa: BLE001
            self.observed = Observed(why=f"profiler failed: {type(err).__name__}: {str(err)[:160]}")
            return
        self.observed = observe_tree(list(roots))


def observe_tree(roots: list[_ProfilerEvent]) -> Observed:
    """Fallback evidence from the events under ``roots`` (the call's own events)."""
    # operator and record_function events (the autograd engine nests backward ops under its own)
    ops = [r for r in roots if hasattr(getattr(r, "extra_fields", None), "inputs")]
    if not any(_is_op(e) for e in _walk(ops)):
        return Observed(why="the profiler recorded no operator event (an opaque executable)")
    seen = Observed(FallbackState.not_observed, roots=ops)
    host: dict[str, None] = {}
    stack = list(ops)
    while stack:
        event = stack.pop()
        name = event.name
        seen.names.append(name)
        if name in _SCALAR_READS:
            continue
        moved = _transfer(event)
        if moved is not None:
            to_host, size = moved
            seen.to_host += to_host
            seen.to_device += not to_host
            if size >= 0:
                seen.copies += 1
                seen.bytes += size
            continue
        tensors = _tensors(event)
        if tensors and name not in _PLUMBING and all(_is_host(t) for t in tensors):
            host[name] = None
        stack += list(event.children)
    if seen.copies:
        seen.host_ops = sorted(host)
        seen.state = FallbackState.not_observed if seen.one_way() else FallbackState.observed
    return seen


def _is_op(event: _ProfilerEvent) -> bool:
    return str(event.name).startswith(("aten::", "prims::"))


def _walk(events: list[_ProfilerEvent]) -> list[_ProfilerEvent]:
    out, stack = [], list(events)
    while stack:
        event = stack.pop()
        out.append(event)
        stack += list(event.children)
    return out


def children_of_root(observed: Observed, name: str) -> list[str]:
    """Names of the non-plumbing ops directly under the top event ``name`` (a composite's parts)."""
    out: list[str] = []
    for root in observed.roots:
        if root.name != name:
            continue
        out += [c.name for c in root.children if c.name not in _PLUMBING and c.name.startswith("aten::")]
    return out


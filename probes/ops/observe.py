"""Observation: which overload a sample calls, what ran on the device, what is registered.

Three signals, never one guess (docs/levels.md#execution-paths):

- the **top-level overload** a sample calls, recorded on the ``PreDispatch`` key on the CPU
  (the ops ``make_fx(pre_dispatch=True)`` would trace), cached per (OpInfo, argument
  signature) since it depends on argument kinds, not values;
- the **leaf ops** that reached the device, from a ``TorchDispatchMode`` around the device call
  (after composite decomposition, so a composite's components are visible);
- **registrations**: whether the backend's dispatch key, ``CompositeImplicitAutograd`` or a
  ``CompositeExplicitAutograd*`` key has a kernel for an overload, and whether the backend has a
  boxed fallback.

Allocation, view and metadata ops never make a call composite; a host scalar read is not a
fallback.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opmatrix.schema import OpName

from .layouts import Values, map_values
from .overloadcache import OverloadCache  # noqa: F401 - where the engine's state finds it

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from torch._ops import OpOverload

__all__ = [
    "LeafRecorder",
    "Registration",
    "TRIVIAL_OPS",
    "event_names",
    "overload_name",
    "registration",
    "signature_of",
    "top_level_overloads",
]

#: ops that allocate, view, copy or read metadata: they never make a call composite
TRIVIAL_OPS = frozenset(
    {
        "aten.empty.memory_format", "aten.empty_strided.default", "aten.empty_like.default",
        "aten.new_empty.default", "aten.new_empty_strided.default", "aten.zeros.default",
        "aten.zeros_like.default", "aten.ones_like.default", "aten.full.default", "aten.full_like.default",
        "aten.view.default", "aten._unsafe_view.default", "aten._reshape_alias.default", "aten.reshape.default",
        "aten.as_strided.default", "aten.as_strided_.default", "aten.expand.default", "aten.t.default",
        "aten.transpose.int", "aten.permute.default", "aten.squeeze.dim", "aten.squeeze.dims",
        "aten.squeeze.default", "aten.unsqueeze.default", "aten.slice.Tensor", "aten.select.int",
        "aten.alias.default", "aten.detach.default", "aten.lift_fresh.default", "aten.clone.default",
        "aten.contiguous.default", "aten.copy_.default", "aten._copy_from.default",
        "aten._copy_from_and_resize.default", "aten._to_copy.default", "aten.resize_.default",
        "aten.set_.source_Storage_storage_offset", "aten.set_.source_Storage", "aten.set_.source_Tensor",
        "aten.fill_.Scalar", "aten.zero_.default", "aten._local_scalar_dense.default", "aten.item.default",
        "aten.is_nonzero.default", "aten.sym_size.int", "aten.sym_stride.int", "aten.sym_numel.default",
        "aten.sym_storage_offset.default", "aten.result_type.Tensor", "aten.result_type.Scalar",
        "aten.scalar_tensor.default", "aten.lift_fresh_copy.default", "aten.empty_permuted.default",
        "aten.unfold.default", "aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int",
        "aten.narrow.default", "aten.diagonal.default", "aten.view_as_real.default", "aten.view_as_complex.default",
        "aten._conj.default", "aten._neg_view.default", "aten.resolve_conj.default", "aten.resolve_neg.default",
        "aten.to.dtype", "aten.to.device", "aten.to.dtype_layout", "aten.type_as.default", "aten.expand_as.default",
        "aten.view_as.default", "aten.reshape_as.default", "aten.flatten.using_ints", "aten.movedim.int",
        "aten.numpy_T.default", "aten.mT.default", "aten.unsafe_split.Tensor",
    }
)
#: under functionalization (torch_xla, lazy backends) view ops reach the backend as their ``*_copy``
#: variants and ``copy_`` as ``copy``; torch_xla adds a metadata no-op, ``_propagate_xla_data``
TRIVIAL_OPS = TRIVIAL_OPS | frozenset(
    {f"{ns}.{name}_copy.{ov}" for ns, name, ov in (o.split(".", 2) for o in TRIVIAL_OPS) if not name.endswith("_")}
    | {"aten.copy.default", "aten._propagate_xla_data.default"}
)
#: trivial ops that still move or write data: never a reason to call a call composite, but a
#: host fallback through them is a fallback
DATA_MOVEMENT = frozenset(
    {
        "aten.clone.default", "aten.contiguous.default", "aten.copy_.default", "aten._copy_from.default",
        "aten._copy_from_and_resize.default", "aten._to_copy.default", "aten.fill_.Scalar", "aten.zero_.default",
        "aten.empty.memory_format", "aten.empty_strided.default", "aten.zeros.default", "aten.full.default",
    }
)
#: a host scalar read: copying a scalar to the host is not a compute fallback
SCALAR_READS = frozenset({"aten._local_scalar_dense.default", "aten.item.default"})

_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def overload_name(op: OpOverload) -> str:
    """``aten.softmax.int`` for an OpOverload: :class:`OpName`'s matrix spelling, ``.default`` included."""
    return str(OpName.of_schema(op._schema.name, op._schema.overload_name))


class Registration:
    """What the dispatcher has registered for one overload, for one backend key.

    ``shim`` is set for structured ops whose only generic kernel is the
    ``CompositeExplicitAutogradNonFunctional`` wrapper around their ``out=`` overload: then
    ``out_backend`` tells whether the backend has a kernel for that ``out=`` overload.
    """

    __slots__ = ("backend", "implicit", "explicit", "name", "shim", "out_backend")

    def __init__(self, name: OpName, backend: bool, implicit: bool, explicit: bool,
                 shim: OpName | None = None, out_backend: bool = False):
        self.name, self.backend, self.implicit, self.explicit = name, backend, implicit, explicit
        self.shim, self.out_backend = shim, out_backend

    @property
    def composite(self) -> bool:
        return self.implicit or self.explicit


@functools.lru_cache(maxsize=8192)
def registration(op: OpName, dispatch_key: str) -> Registration:
    """Registrations for ``op`` under ``dispatch_key`` (none for an OpInfo's cell name)."""
    if op.is_opinfo:
        return Registration(op, False, False, False)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    qualified = op.qualified
    try:
        backend = has(qualified, dispatch_key)
        implicit = has(qualified, "CompositeImplicitAutograd")
        explicit = any(has(qualified, k) for k in _COMPOSITE_KEYS)
        nonfunctional = has(qualified, "CompositeExplicitAutogradNonFunctional")
    except RuntimeError:  # not an operator the dispatcher knows (e.g. a Python-only op)
        return Registration(op, False, False, False)
    shim = out_variant(op) if nonfunctional and not backend and not implicit else None
    out_backend = shim is not None and bool(has(shim.qualified, dispatch_key))
    return Registration(op, backend, implicit, explicit, shim, out_backend)


def _packet(op: OpName) -> object | None:
    return None if op.is_opinfo else getattr(getattr(torch.ops, op.namespace, None), op.name, None)


@functools.lru_cache(maxsize=4096)
def overloads_of(event_name: str) -> tuple[OpName, ...]:
    """Every overload of a profiler event name (``aten::add`` -> ``aten.add.Tensor``, ...)."""
    try:  # a profiler range or a Python op is no operator's event: none
        op = OpName.parse(event_name)
    except ValueError:
        return ()
    packet = _packet(op)
    return tuple(op.with_overload(ov) for ov in packet.overloads()) if hasattr(packet, "overloads") else ()


@functools.lru_cache(maxsize=4096)
def out_variant(op: OpName) -> OpName | None:
    """The ``out=`` overload a structured functional overload delegates to (same inputs)."""
    try:
        schema = getattr(packet := _packet(op), op.overload)._schema
    except AttributeError:  # no such operator, or no such overload
        return None
    inputs = [(a.name, str(a.type)) for a in schema.arguments]
    for ov in packet.overloads():  # type: ignore[attr-defined]
        cand = getattr(packet, ov)._schema
        outs = [a for a in cand.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
        rest = [(a.name, str(a.type)) for a in cand.arguments if a not in outs]
        if outs and rest == inputs:
            return op.with_overload(ov)
    return None


@functools.lru_cache(maxsize=8)
def event_names(ops: frozenset[str]) -> frozenset[str]:
    """The profiler's names (no overload) of a set of overloads: ``aten.add.Tensor`` -> ``aten::add``."""
    return frozenset(OpName.parse(name).event_name for name in ops)


def has_backend_fallback(dispatch_key: str) -> bool:
    """Whether the backend registered a boxed fallback for every op without a kernel."""
    try:
        key = getattr(torch._C.DispatchKey, dispatch_key)
    except AttributeError:
        return False
    return bool(torch._C._dispatch_has_backend_fallback(key))


class LeafRecorder(TorchDispatchMode):
    """Records the overloads that reach the device (post-composite), in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[object, ...] = (),
                          kwargs: dict[str, object] | None = None) -> object:
        self.ops.append(overload_name(func))
        return func(*args, **(kwargs or {}))


def _kind(value: object) -> Hashable:
    if isinstance(value, torch.Tensor):
        # rank and dtype select overloads too (interpolate: rank 4 -> upsample_*2d, rank 3 -> *1d)
        return ("T", value.dim(), str(value.dtype).removeprefix("torch."))
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    if isinstance(value, complex):
        return "c"
    if value is None:
        return "N"
    if isinstance(value, (list, tuple)):
        return ("L", tuple(_kind(v) for v in value[:8]), len(value) > 8)
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout, str)):
        return ("V", str(value))
    return ("O", type(value).__name__)


def signature_of(values: Values) -> Hashable:
    """A hashable signature of argument kinds, tensor ranks and dtypes: samples with equal
    signatures call one overload."""
    inp, args, kwargs = values
    return (_kind(inp), tuple(_kind(a) for a in args), tuple(sorted((k, _kind(v)) for k, v in kwargs.items())))


def top_level_overloads(fn: Callable[..., object], values: Values) -> list[str]:
    """Overloads ``fn(*values)`` calls at the top level (before composite decomposition).

    Recorded by a dispatch mode on the ``PreDispatch`` key (:class:`_PreDispatchRecorder`, about
    0.3 ms a call); where that mode cannot be set, by a ``make_fx(pre_dispatch=True)`` trace,
    which sees the same ops through the same key at ~20 times the cost.
    """
    return _pre_dispatch_overloads(fn, values)


@functools.lru_cache(maxsize=1)
def _pre_dispatch_recorder_class() -> type:
    # PyTorch admits three kinds of mode on the PreDispatch key (proxy, functional, schema check);
    # the schema-check slot is the one meant for eager checks on concrete inputs, so the recorder
    # takes it, and replaces the check with a plain record-and-run
    from torch._subclasses.schema_check_mode import SchemaCheckMode

    class _PreDispatchRecorder(SchemaCheckMode):
        def __init__(self) -> None:
            TorchDispatchMode.__init__(self, torch._C.DispatchKey.PreDispatch)
            self.calls: list[str] = []

        def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[object, ...] = (),
                          kwargs: dict[str, object] | None = None) -> object:
            self.calls.append(overload_name(func))
            return func(*args, **(kwargs or {}))  # the mode is off inside: nested calls are not top level

    return _PreDispatchRecorder


def _pre_dispatch_overloads(fn: Callable[..., object], values: Values) -> list[str]:
    """The recorded top-level calls. A sample the op rejects (an unsupported dtype) still names
    the overload it called before its kernel raised; a call that raised before any op is
    re-raised. Where the mode cannot be set at all, a ``make_fx`` trace answers instead."""
    from torch._dispatch.python import enable_python_dispatcher

    # on copies: an in-place op must not change the sample it is traced on
    inp, args, kwargs = map_values(values, lambda t: t.clone())
    recorder = _pre_dispatch_recorder_class()()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(enable_python_dispatcher())
            stack.enter_context(recorder)
        except Exception:  # noqa: BLE001 - the PreDispatch slot is taken (e.g. inside a trace)
            stack.close()
            return _make_fx_overloads(fn, values)
        try:
            fn(inp, *args, **kwargs)
        except Exception:
            if not recorder.calls:
                raise
    return list(recorder.calls)


def _make_fx_overloads(fn: Callable[..., object], values: Values) -> list[str]:
    from torch.fx.experimental.proxy_tensor import make_fx

    inp, args, kwargs = values
    tensors: list[torch.Tensor] = []

    def collect(v: object) -> object:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return ("__t__", len(tensors) - 1)
        if isinstance(v, tuple):
            return tuple(collect(x) for x in v)
        if isinstance(v, list):
            return [collect(x) for x in v]
        if isinstance(v, dict):
            return {k: collect(x) for k, x in v.items()}
        return v

    skeleton = collect((inp, args, kwargs))

    def rebuild(v: object, ts: tuple[torch.Tensor, ...]) -> object:
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "__t__":
            return ts[v[1]]
        if isinstance(v, tuple):
            return tuple(rebuild(x, ts) for x in v)
        if isinstance(v, list):
            return [rebuild(x, ts) for x in v]
        if isinstance(v, dict):
            return {k: rebuild(x, ts) for k, x in v.items()}
        return v

    def traced(*ts: torch.Tensor) -> object:
        i, a, k = cast("Values", rebuild(skeleton, ts))  # the skeleton of (inp, args, kwargs)
        return fn(i, *a, **k)

    gm = make_fx(traced, pre_dispatch=True)(*[t.clone() for t in tensors])
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            out.append(overload_name(node.target))
    return out


def primary_overload(calls: list[str]) -> str | None:
    """The overload that names a sample's cell, or None when the sample calls several ops.

    A sample whose function is composed in Python (``nn.functional.normalize`` calls
    ``linalg_vector_norm``, ``clamp_min`` and ``div``) is not evidence about any one of them.
    """
    real = list(dict.fromkeys(name for name in calls if name not in TRIVIAL_OPS))
    if len(real) > 1:
        return None
    if real:
        return real[0]
    return calls[0] if calls else None

"""The execution path of one device call: observed first, registrations second.

Three signals, never one guess:

- the **call tree** (:mod:`.trace`): host<->device copies nested inside the call are host
  fallback, whatever is registered;
- the adapter's own **counter** (refaccel, xla), cross-checked with the call tree;
- **registrations**: which kernel the dispatcher picks (backend key, composite keys, the
  backend's boxed fallback), and for composites the leaf ops that reached the device.

When the signals disagree the observation wins and the note says which signal said what::

    call = run_device(st, fn, values, record=True)
    path, comps, note = classify(st, "aten.add.Tensor", call)    # fallback, [], "registration says native; ..."
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from opmatrix.backend.base import FallbackSeen
from opmatrix.schema import ExecPath, FallbackState, OpName

from . import observe
from .cells import SampleResult
from .layouts import Values
from .state import EngineState
from .trace import CallTrace, Observed, children_of_root
from .values import call, readable, to_cpu

__all__ = ["DeviceCall", "apply_evidence", "classify", "evidence_state", "fault_path", "registered_path", "run_device"]


@dataclass
class DeviceCall:
    """One call on the device: its outputs (on the host) or the exception, and what was observed."""

    out: object = None
    error: BaseException | None = None
    leaf: list[str] = field(default_factory=list)
    seen: FallbackSeen = field(default_factory=FallbackSeen)
    observed: Observed = field(default_factory=Observed)
    #: device types of the output tensors, before they were copied to the host
    devices: list[str] = field(default_factory=list)

    @property
    def fell_back(self) -> bool:
        """Whether any signal saw host fallback during the call."""
        return FallbackState.observed in (self.seen.state, self.observed.state)

    @property
    def read_to_host(self) -> bool:
        """The call raised after copies to the host only (and the adapter's counter saw none): a
        fallback on its way, or a kernel that read an argument to check it (then refused)."""
        return (self.error is not None and self.seen.state is not FallbackState.observed
                and self.observed.state is FallbackState.observed and self.observed.one_way())


def run_device(st: EngineState, fn: Callable[..., object], values: Values, record: bool = True,
               profile: bool = True) -> DeviceCall:
    """Run ``fn(values)`` on the device under the profiler (and, for composites, the leaf recorder).

    Exceptions are kept on the result, with whatever the profiler saw before them. ``profile``
    False (a warm-up run, e.g. the compiling one) leaves the call-tree evidence ``unknown``.
    """
    result = DeviceCall()
    rec = observe.LeafRecorder() if record else None
    trace = CallTrace()
    try:
        with st.adapter.observe_fallback() as seen, trace if profile else contextlib.nullcontext():
            result.seen = seen
            if rec is not None:
                with rec:
                    out = call(fn, values)
            else:
                out = call(fn, values)
            st.adapter.synchronize()
        result.devices = _devices(out)
        result.out = to_cpu(out)
    except Exception as exc:  # noqa: BLE001 - the caller classifies it
        result.error = readable(exc)
    result.observed = trace.observed
    if result.observed.one_way() and result.observed.to_host and (
            result.error is not None or st.adapter.device_type not in result.devices):
        # copied to the host, and what it returns is not on the device (``equal``'s bool): the
        # host computed it, with no way back to make; or it raised before any way back
        # (:attr:`DeviceCall.read_to_host` tells a refusal after reading an argument apart)
        result.observed.state = FallbackState.observed
    result.leaf = rec.ops if rec is not None else []
    return result


def _devices(out: object) -> list[str]:
    """The device types of the tensors in a call's outputs, in order."""
    if isinstance(out, torch.Tensor):
        return [out.device.type]
    if isinstance(out, (tuple, list)):
        return [d for o in out for d in _devices(o)]
    return []


def _same_family(a: OpName, b: OpName) -> bool:
    """``aten.abs.default`` and ``aten.abs.out``; ``aten.softmax.int`` and ``aten._softmax.default``."""
    na, nb = a.name.lstrip("_"), b.name.lstrip("_")
    return na == nb or na.startswith(nb) or nb.startswith(na)


def _thin(st: EngineState, op: OpName, comps: list[str], observed: Observed) -> tuple[str, str] | None:
    """The one native kernel a composite overload only wraps (component, note), or None."""
    key = st.adapter.dispatch_key
    if len(comps) == 1:
        comp = OpName.parse(comps[0])
        if _same_family(op, comp) and observe.registration(comp, key).backend:
            return comps[0], f"served by the {comps[0]} kernel"
    out = observe.out_variant(op)
    if not comps and out is not None and observe.registration(out, key).backend:
        # an explicit composite (abs -> abs.out): the call tree shows only its own out= kernel
        under = children_of_root(observed, op.event_name)
        if all(name == op.event_name for name in under):
            return str(out), f"served by the {out} kernel"
    return None


def registered_path(st: EngineState, op: OpName, leaf_ops: list[str], observed: Observed
                    ) -> tuple[ExecPath, list[str], str | None]:
    """Path of a call that completed, from registrations and leaf ops (matrix spellings) only."""
    key = st.adapter.dispatch_key
    comps = [name for name in dict.fromkeys(leaf_ops) if name not in observe.TRIVIAL_OPS and name != str(op)]
    moved = [name for name in dict.fromkeys(leaf_ops) if name in observe.DATA_MOVEMENT]
    for c in [*comps, *moved]:
        creg = observe.registration(OpName.parse(c), key)
        if not creg.backend and not creg.composite and creg.shim is None and st.backend_fallback:
            return ExecPath.fallback, comps, f"component {c} has no {key} kernel (served by the backend fallback)"
    if op.is_opinfo:
        return ExecPath.composite, comps, "composed in Python from several ATen ops"
    reg = observe.registration(op, key)
    if reg.backend:
        return ExecPath.native, [], None
    if reg.shim is not None:
        # a structured op: its generic wrapper only calls the out= overload on the backend
        shim = reg.shim.qualified
        if reg.out_backend:
            return ExecPath.native, [], f"served by the {shim} kernel"
        if st.backend_fallback:
            return ExecPath.fallback, [shim], f"{shim} has no {key} kernel; served by the backend fallback"
    if reg.implicit or reg.explicit:
        thin = _thin(st, op, comps, observed)
        if thin is not None:
            return ExecPath.native, [thin[0]], thin[1]
        return ExecPath.composite, comps, None if reg.implicit else "CompositeExplicitAutograd kernel"
    if st.backend_fallback:
        return ExecPath.fallback, comps, f"no {key} kernel; served by the backend's boxed fallback"
    return ExecPath.native, [], f"no kernel registered under {key} or a composite key; it ran, so another key served it"


def _disagreement(path: ExecPath, dc: DeviceCall) -> str | None:
    """The note that says which signal said what, when they disagree."""
    obs, seen = dc.observed, dc.seen
    parts = []
    if obs.state is FallbackState.observed:
        ops = ", ".join(obs.host_ops[:6]) or "no compute op named"
        parts.append(f"host<->device copies inside the call (profiler); on the host: {ops}")
        if path is not ExecPath.fallback:
            parts.append(f"registrations say {path.value}")
        if seen.state is FallbackState.not_observed:
            parts.append(f"{seen.source or 'the adapter counter'} saw no fallback")
    elif seen.state is FallbackState.observed and obs.state is FallbackState.not_observed:
        parts.append(f"{seen.source or 'the adapter counter'} saw fallback; the call tree shows no host copy")
    return "; ".join(parts) or None


def classify(st: EngineState, op: OpName, dc: DeviceCall) -> tuple[ExecPath, list[str], str | None]:
    """Path, components and note of a call: any observed fallback wins over registrations."""
    path, comps, note = registered_path(st, op, dc.leaf, dc.observed)
    if dc.fell_back:
        note = "; ".join(filter(None, [note if path is ExecPath.fallback else None, _disagreement(path, dc)]))
        return ExecPath.fallback, comps, note or None
    if path is ExecPath.fallback and FallbackState.not_observed in (dc.observed.state, dc.seen.state):
        # the dispatcher had no backend kernel, so the boxed fallback served the call, yet no signal saw
        # a host copy: a fallback that computes on memory the host reads directly. Both are said.
        note = "; ".join(filter(None, [note, "no host<->device copy was seen inside the call (profiler call tree"
                                       + (f", {dc.seen.source}" if dc.seen.state is FallbackState.not_observed
                                          and dc.seen.source else "") + ")"]))
    return path, comps, note


def evidence_state(dc: DeviceCall) -> tuple[FallbackState, str | None]:
    """The combined three-state fallback evidence and the signals it came from."""
    obs, seen = dc.observed, dc.seen
    sources = [s for s in (seen.source if seen.state is not FallbackState.unknown else None,
                           "profiler call tree" if obs.state is not FallbackState.unknown else None) if s]
    if dc.fell_back:
        return FallbackState.observed, "; ".join(sources) or None
    if FallbackState.not_observed in (obs.state, seen.state):
        return FallbackState.not_observed, "; ".join(sources) or None
    return FallbackState.unknown, obs.why or seen.source


def apply_evidence(result: SampleResult, dc: DeviceCall) -> None:
    """Record the call's fallback evidence on ``result``: state, host ops, copies and bytes."""
    state, source = evidence_state(dc)
    if result.path is ExecPath.rejected and dc.read_to_host:  # read an argument to check it, then refused
        state = FallbackState.not_observed
    result.fallback, result.fallback_source = state, source
    result.fallback_ops = sorted(set(dc.seen.ops) | set(dc.observed.host_ops))
    if dc.observed.state is FallbackState.observed and state is FallbackState.observed:
        result.copies, result.moved = dc.observed.copies, dc.observed.bytes


def fault_path(st: EngineState, op: OpName) -> ExecPath:
    """Path of a call that crashed or hung: the kernel the dispatcher chose, else ``unknown``."""
    if op.is_opinfo:
        return ExecPath.unknown
    reg = observe.registration(op, st.adapter.dispatch_key)
    if reg.backend or (reg.shim is not None and reg.out_backend):
        return ExecPath.native
    if reg.implicit or reg.explicit:
        return ExecPath.composite
    if st.backend_fallback:
        return ExecPath.fallback
    return ExecPath.unknown

"""One unit in eager mode: a plain call for the verdict, a recording pass for the evidence.

The outcome and numerics come from a plain device call (only the adapter's own fallback counter
on); the recording pass (a ``TorchDispatchMode`` for a composite's leaf ops, the profiler's call
tree) is a second call that adds evidence of the path and never changes the verdict. Where it
changes the result (complex ``linalg.pinv`` drops a conjugation under any dispatch mode), the
cell keeps the plain verdict and its note says so::

    result = probe_eager(st, entry, unit, torch.float32, opts, ref)   # SampleResult, mode eager
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from opmatrix.schema import ExecPath, FallbackState, Mode, Outcome, UnitId

from . import observe
from .cells import SampleResult
from .classify import DeviceCall, apply_evidence, classify, run_device
from .defined import canonical
from .faults import failed_call, fault_from_exception, scoped
from .judging import Reference, check_values, defined_only, judge, post
from .layouts import Values
from .numerics import compare, tolerance_for, values_comparable
from .source import OpEntry
from .state import EngineState, ProbeOptions
from .units import Unit, asks_device, device_values, unit_dtypes, unit_id
from .values import error_info, readable

__all__ = ["probe_eager", "refusal_text"]


def _failed(st: EngineState, unit: Unit, uid: UnitId, dc: DeviceCall, result: SampleResult, dname: str,
            host_computes: Callable[[], bool]) -> None:
    """A device call that raised: rejected, or a fault; fallback seen before the error is kept
    (:func:`.faults.failed_call` decides, the same way as for a compiled call)."""
    assert dc.error is not None
    result.error = error_info(dc.error, unit.overload, st.adapter.device_type, dname)
    result.path, result.outcome, note = failed_call(st, unit.overload, uid, dc.error, dc.fell_back, host_computes,
                                                   unit_dtypes(unit), dc.read_to_host)
    if result.outcome.is_fault:
        result.error = scoped(st, result.error, dc.error)
    apply_evidence(result, dc)
    result.note = "; ".join(filter(None, [result.note, note]))


def _staged(st: EngineState, unit: Unit) -> tuple[Values | None, BaseException | None]:
    """The unit's values on the device, or what the device raised while staging them."""
    try:
        return device_values(unit, st.adapter.device()), None
    except Exception as exc:  # noqa: BLE001 - classified by the caller (a device that cannot hold a dtype)
        return None, readable(exc)


def _staging_failed(st: EngineState, unit: Unit, uid: UnitId, exc: BaseException, result: SampleResult,
                    dname: str) -> None:
    """Staging the inputs raised before the op ran: a clean refusal (the device cannot hold this
    dtype) is ``rejected`` for the cell's dtype; anything else is an error of the cell."""
    result.error = error_info(exc, unit.overload, st.adapter.device_type, dname)
    result.unstaged = True
    fault = fault_from_exception(st, uid, exc, unit_dtypes(unit) or (dname,))
    if fault is None:
        result.path, result.outcome = ExecPath.rejected, Outcome.ok
        result.note = "the device refused the inputs while staging them (before the op ran)"
        claims = st.adapter.claimed_dtypes()
        if claims is not None and dname in claims:  # the refusal and the runtime's claim disagree: both are said
            result.note += f"; yet the runtime claims device memory holds {dname}"
    else:
        result.path, result.outcome = ExecPath.unknown, fault
        result.error = scoped(st, result.error, exc)
        result.note = "staging the inputs on the device failed (before the op ran)"


def _instrument_note(plain: DeviceCall, recorded: DeviceCall, unit: Unit, dtype: torch.dtype) -> str | None:
    """What the recording pass changed about the call's result, if anything (the plain call's
    verdict stands)."""
    if plain.error is None and recorded.error is not None:
        return (f"the instrumented call raised ({type(recorded.error).__name__}: {str(recorded.error)[:120]}); "
                "the plain call's result stands")
    if plain.error is not None and recorded.error is None:
        return "the instrumented call returned a value; the plain call's error stands"
    if plain.error is not None or not values_comparable(str(unit.overload)) or unit.undefined is not None:
        return None
    rtol, atol = tolerance_for(str(unit.overload), dtype)
    try:  # two right answers (another tie order) are the same result
        both = canonical(str(unit.overload), unit.cpu_values, recorded.out, plain.out)
        same = compare(both.out, both.ref, rtol, atol)
    except Exception:  # noqa: BLE001 - the two results cannot be compared: nothing to say
        return None
    if same.ok:
        return None
    return f"the instrument changed the result ({same.detail} under the recording pass); the plain call's verdict stands"


def _merged(plain: DeviceCall, recorded: DeviceCall | None) -> DeviceCall:
    """The plain call's outputs or error, with the recording pass's evidence (leaf ops, call tree;
    the adapter's counter from whichever call saw fallback)."""
    if recorded is None:
        return plain
    seen = recorded.seen if recorded.seen.state is FallbackState.observed else plain.seen
    if seen.state is FallbackState.unknown:
        seen = recorded.seen
    return DeviceCall(out=plain.out, error=plain.error, leaf=recorded.leaf, seen=seen, observed=recorded.observed,
                      devices=plain.devices)


def refusal_text(exc: BaseException) -> str:
    """An exception as the CPU's and the device's refusals are compared: type and message start."""
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def _host_computes(ref: Reference | None, own: Callable[[], Reference] | None) -> bool:
    """Whether the CPU computes this very unit: ``ref`` may be the sample's reference from another
    layout (``own`` then computes this layout's), and a layout can be what the CPU refuses (an
    in-place write into an expanded tensor)."""
    if ref is None or ref.widened:  # the CPU computes it only in a wider dtype
        return False
    if own is None:
        return True
    try:
        own()
    except Exception:  # noqa: BLE001 - the CPU refuses this layout: the host's refusal came through
        return False
    return True


def _judged(st: EngineState, fn: Callable[..., object], unit: Unit, dtype: torch.dtype, opts: ProbeOptions,
            ref: Reference, out: object, result: SampleResult, own: Callable[[], Reference] | None = None) -> None:
    """Compare the outputs with the reference (retrying once when wrong: flaky or wrong).

    ``own``: the reference is the sample's, computed on another layout; when the outputs do not
    match it, this layout's own CPU reference is computed and judges instead (an op whose values
    depend on memory layout is never called wrong for it)."""
    check = check_values(st, unit, ref, out, dtype, result)
    if not check.ok and own is not None:
        with contextlib.suppress(Exception):  # the CPU rejects this layout: the sample's reference stands
            ref = own()
            check = check_values(st, unit, ref, out, dtype, result)
    if not check.ok and opts.retry_wrong and check.broken is None:
        again = run_device(st, fn, device_values(unit, st.adapter.device()), False, profile=False)
        if again.error is None:
            ref2, out2, problem = defined_only(unit, ref, post(unit, again.out)[0])
            if problem is None and judge(ref2, out2, str(unit.overload), dtype, check.compared).ok:
                result.flaky = True
    result.outcome = Outcome.ok if check.ok else Outcome.wrong
    if not check.ok:
        result.note = "; ".join(filter(None, [result.note, check.comparison.detail]))


def probe_eager(st: EngineState, entry: OpEntry, unit: Unit, dtype: torch.dtype, opts: ProbeOptions,
                ref: Reference | None, no_ref: str | None = None, own: Callable[[], Reference] | None = None
                ) -> SampleResult:
    """One unit in eager mode: run, observe, classify, judge (its backward is its own unit).

    The outcome and numerics come from a plain call (only the adapter's own counter on): the
    recording pass (a dispatch mode for a composite's leaf ops, the profiler's call tree) is a
    second call that adds evidence of the path, and never changes the verdict."""
    fn = entry.info.op
    dname = unit.dtype or str(dtype).removeprefix("torch.")
    result = SampleResult(op=str(unit.overload), rank=unit.rank, layout=unit.layout, mode=Mode.eager,
                          path=ExecPath.rejected, outcome=Outcome.ok, features=unit.features, dtype=unit.dtype)
    uid = unit_id(unit, "eager")
    # the leaf ops (a dispatch mode) only matter for composites; the call tree is always recorded
    record = not observe.registration(unit.overload, st.adapter.dispatch_key).backend
    key = (unit.overload, dtype, unit.rank, unit.layout, tuple(sorted(unit.features.items())))
    known = st.host_paths.get(key) if record else None
    record = record and known is None
    values, staging = _staged(st, unit)
    if staging is not None or values is None:
        _staging_failed(st, unit, uid, staging or RuntimeError("staging gave no values"), result, dname)
        return result
    plain = run_device(st, fn, values, False, profile=False)
    st.counter = st.counter or plain.seen.state is not FallbackState.unknown
    recorded = None
    trace = st.wants_trace(key)
    if record or trace:
        again, _ = _staged(st, unit)
        if again is not None:
            recorded = run_device(st, fn, again, record, profile=trace)
    dc = _merged(plain, recorded)
    if dc.observed.state is FallbackState.observed:
        st.traced[key] = -10**6  # fallback seen here: keep measuring its transfers
    changed = _instrument_note(plain, recorded, unit, dtype) if recorded is not None else None
    if dc.error is not None:
        _failed(st, unit, uid, dc, result, dname, lambda: _host_computes(ref, own))
        result.note = "; ".join(filter(None, [result.note, changed]))
        if ref is None:
            _no_reference(result, dc.error, no_ref)
        return result
    if known is not None:
        result.path, result.components, result.note = known
    else:
        result.path, result.components, result.note = classify(st, unit.overload, dc)
        if record and recorded is not None and recorded.error is None:
            st.learn_host_path(key, result.path, result.components, result.note)
    result.note = "; ".join(filter(None, [result.note, changed]))
    apply_evidence(result, dc)
    if ref is None:  # the CPU rejects this input: the device's behaviour is the evidence
        result.note = "; ".join(filter(None, [result.note, f"no reference: {no_ref}; the device returned a value"]))
        return result
    if ref.widened:
        result.note = "; ".join(filter(None, [result.note, f"the CPU has no {dname} kernel for this sample: "
                                              f"referenced in {ref.widened}, cast back"]))
    _judged(st, fn, unit, dtype, opts, ref, dc.out, result, own)
    if asks_device(unit):
        _on_the_device(st, dc, result)
    return result


def _no_reference(result: SampleResult, error: BaseException, no_ref: str | None) -> None:
    """A device call that raised on an input the CPU rejects: the very refusal the CPU gave (an
    op's own argument check, jiterator off CUDA) means the input is invalid everywhere, a clean
    rejection, not a device error (also when the message itself read as a refusal)."""
    result.note = "; ".join(filter(None, [result.note, f"no reference: {no_ref}"]))
    refused = result.outcome is Outcome.error or result.path is ExecPath.rejected
    if refused and no_ref is not None and no_ref.endswith(f"({refusal_text(error)})"):
        result.path, result.outcome = ExecPath.rejected, Outcome.ok
        result.note += "; the device refuses it exactly as the CPU does"


def _on_the_device(st: EngineState, dc: DeviceCall, result: SampleResult) -> None:
    """A factory's outputs (a sample's that names the device) must be made on the device it was
    asked for (``device=``)."""
    elsewhere = sorted({d for d in dc.devices if d != st.adapter.device_type})
    if elsewhere:
        result.outcome = Outcome.wrong
        result.note = "; ".join(filter(None, [result.note, f"asked for device={st.adapter.device_type}, the output "
                                              f"is on {', '.join(elsewhere)}"]))



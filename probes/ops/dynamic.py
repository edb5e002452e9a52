"""The dynamic-shape compile check of an operator: ``torch.compile(dynamic=True)`` at two sizes.

The static compile check (:mod:`.compiled`) compiles with ``dynamic=False``: a graph specialised
to one shape. A model compiled with dynamic shapes needs the op to trace and run with symbolic
sizes, so this check compiles once with ``dynamic=True``, runs the unit's own input, then the
same input with its first dimension doubled (a second size), and judges both against the CPU.
Recompiles come from dynamo's counters (``unique_graphs``): a backend or op that specialised the
shape shows a second graph, said in the note. To stay cheap it runs once per op and dtype, on the
sample that the static check compiled (contiguous)::

    result = probe_dynamic(st, entry, unit, torch.float32, ref, eager)   # SampleResult, shapes dynamic

The second size: every tensor shaped like the input grows (``add``'s two operands), else the input
alone (``mm``'s left operand); the first the CPU accepts is used. None of them: not probed, said.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from opmatrix.schema import ErrorInfo, Layout, Outcome, Shapes

from .cells import SampleResult
from .classify import DeviceCall, apply_evidence, run_device
from .compiled import _compiled_path, _result, _skip_funcname_scan, _traceable_seeding
from .faults import failed_call
from .judging import Reference, check_values, reference
from .layouts import make_variant, map_values, primary_tensor
from .units import Unit, device_values, unit_dtypes, unit_id
from .values import error_info, readable, root_cause

if TYPE_CHECKING:
    from .layouts import Values
    from .source import OpEntry
    from .state import EngineState

__all__ = ["grows", "probe_dynamic", "second_size"]


def _doubled(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t.reshape(-1).roll(1).reshape(t.shape)])


def grows(unit: Unit) -> bool:
    """Whether the unit's input has a first dimension to grow (a second size to run)."""
    primary = primary_tensor(unit.cpu_values)
    return primary is not None and primary.dim() > 0 and primary.shape[0] > 0


def second_size(entry: OpEntry, unit: Unit, dtype: torch.dtype) -> tuple[Unit, Reference] | str:
    """The unit at a second size with its CPU reference, or why there is none."""
    primary = primary_tensor(unit.cpu_values)
    if primary is None or primary.dim() == 0 or primary.shape[0] == 0:
        return "no second size: the input has no first dimension to grow"
    shape = tuple(primary.shape)
    tried: list[str] = []
    for name, grows in (("operands shaped like the input", lambda t: tuple(t.shape) == shape),
                        ("the input alone", lambda t: t is primary)):
        values: Values = map_values(unit.cpu_values, lambda t, g=grows: _doubled(t) if g(t) else t.clone())
        try:
            ref = reference(entry.info.op, values, dtype, unit.post)
        except Exception as exc:  # noqa: BLE001 - the CPU refuses this growth: try the next
            tried.append(f"{name}: {type(exc).__name__}")
            continue
        variants = map_values(values, lambda t: make_variant(t.contiguous(), Layout.contiguous))
        return dataclasses.replace(unit, cpu_values=values, variants=variants), ref
    return f"no second size the CPU accepts ({'; '.join(tried)})"


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def probe_dynamic(st: EngineState, entry: OpEntry, unit: Unit, dtype: torch.dtype, ref: Reference,
                  eager: SampleResult, backend: str | None = None) -> SampleResult | str:
    """The unit compiled with ``dynamic=True`` and run at two sizes, judged; or why not probed."""
    grown = second_size(entry, unit, dtype)
    if isinstance(grown, str):
        return grown
    with _traceable_seeding():
        return _probe(st, entry, unit, dtype, ref, eager, grown, backend or st.adapter.compile_backend())


def _probe(st: EngineState, entry: OpEntry, unit: Unit, dtype: torch.dtype, ref: Reference, eager: SampleResult,
           grown: tuple[Unit, Reference], backend: str | None) -> SampleResult:
    import torch._dynamo

    result = _result(unit)
    result.shapes = Shapes.dynamic
    if backend is None:
        result.note = "backend has no torch.compile backend"
        result.error = ErrorInfo(type="NoCompileBackend", message=result.note, actionable=False)
        return result
    big, big_ref = grown
    _skip_funcname_scan(fn := entry.info.op)
    torch._dynamo.reset()
    compiled = torch.compile(lambda i, *a, **k: fn(i, *a, **k), backend=backend, dynamic=True)
    calls: list[DeviceCall] = []
    graphs = [_graphs()]
    for u in (unit, big):  # plain calls give the verdict; the counters count graphs after each
        try:
            calls.append(run_device(st, compiled, device_values(u, st.adapter.device()), False, profile=False))
        except Exception as exc:  # noqa: BLE001 - staging the inputs failed
            calls.append(DeviceCall(error=readable(exc)))
        graphs.append(_graphs())
        if calls[-1].error is not None:
            break
    failed = next((c for c in calls if c.error is not None), None)
    if failed is not None:
        root = readable(root_cause(failed.error))  # type: ignore[arg-type]
        result.error = error_info(root, unit.overload, st.adapter.device_type, str(dtype).removeprefix("torch."))
        # the same rule as the static check's: the CPU computes both sizes (their references exist)
        result.path, result.outcome, note = failed_call(st, unit.overload, unit_id(unit, "dynamic"), root,
                                                        failed.fell_back, lambda: True, unit_dtypes(unit),
                                                        failed.read_to_host)
        said = f"dynamic=True: the {'first' if failed is calls[0] else 'second'} size raised"
        result.note = "; ".join(filter(None, [note, said]))
        apply_evidence(result, failed)
        return result
    dc = run_device(st, compiled, device_values(big, st.adapter.device()), False)  # profiled: the evidence
    ran = sorted({n for n in dc.observed.names if n.startswith("aten::")})
    result.path, result.components, note = _compiled_path(unit, eager, ran, dc.fell_back)
    apply_evidence(result, dc)
    scratch = _result(unit)
    first = check_values(st, unit, ref, calls[0].out, dtype, scratch)
    second = check_values(st, big, big_ref, calls[1].out, dtype, result)
    result.outcome = Outcome.ok if first.ok and second.ok else Outcome.wrong
    recompiles = graphs[2] - graphs[1]
    sizes = f"{tuple(primary_tensor(unit.cpu_values).shape)} then {tuple(primary_tensor(big.cpu_values).shape)}"  # type: ignore[union-attr]
    said = (f"dynamic=True at {sizes}: {'recompiled for the second size (dynamo counted '}{recompiles} more graph"
            f"{'s' if recompiles != 1 else ''}; the shapes were specialised)" if recompiles
            else f"dynamic=True at {sizes}: one graph served both sizes")
    details = [c.comparison.detail for c in (first, second) if not c.ok]
    result.note = "; ".join(filter(None, [note, said, *details]))
    return result


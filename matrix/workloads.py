"""The matrix's ``workloads`` section: observed host fallback checked against the operator entries.

A workload run records which ATen overloads ran on the host (``aten::cumsum.out``); the operator
matrix predicts host execution where an entry of that operator has path ``fallback``::

    results = predict_fallback(results, matrix.operators)
    results[0].host_fallback.predicted     # ['aten::cumsum.out']: the op probes saw it coming
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opmatrix.schema import Entry, ExecPath, OpName, Outcome, WorkloadResult

__all__ = ["base_name", "diff_workloads", "fallback_bases", "normal_base", "predict_fallback", "render_workload_diff"]


def base_name(op: str) -> str:
    """``aten::cumsum.out`` / ``aten.cumsum.default`` -> ``aten::cumsum`` (in-place ``_`` kept): the
    profiler's name of an :class:`~opmatrix.schema.OpName`; a name that is none is kept as it is."""
    try:
        return OpName.parse(op, shorthand=True).event_name
    except ValueError:
        return op


def fallback_bases(operators: Mapping[str, list[Entry]]) -> set[str]:
    """Operators (``aten::sort``) with at least one entry that runs on the host."""
    return {base_name(op) for op, entries in operators.items() if any(e.path is ExecPath.fallback for e in entries)}


def normal_base(base: str) -> str:
    """``aten::gelu_backward`` and ``aten::nll_loss_forward`` are predicted by ``aten::gelu`` / ``aten::nll_loss``."""
    for suffix in ("_backward", "_forward"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def predict_fallback(results: Iterable[WorkloadResult], operators: Mapping[str, list[Entry]]) -> list[WorkloadResult]:
    """Each result with ``host_fallback.predicted`` set (None when the matrix probed no operators)."""
    if not operators:
        return list(results)
    host = {normal_base(b) for b in fallback_bases(operators)}
    out = []
    for r in results:
        predicted = [op for op in r.host_fallback.ops if normal_base(base_name(op)) in host]
        hf = r.host_fallback.model_copy(update={"predicted": predicted})
        out.append(r.model_copy(update={"host_fallback": hf}))
    return out


def _rank(w: WorkloadResult) -> tuple[int, int]:
    """Lower is better: the outcome, then the number of steps that did not pass."""
    return (list(Outcome).index(w.outcome), len(w.failed_steps()))


def diff_workloads(a: Iterable[WorkloadResult], b: Iterable[WorkloadResult]) -> dict[str, list[str]]:
    """Workload runs worse / better / new / removed from ``a`` to ``b``, one line each."""
    old, new = {w.key(): w for w in a}, {w.key(): w for w in b}
    out: dict[str, list[str]] = {"worse": [], "better": [], "new": [], "removed": []}
    for key in sorted(old.keys() | new.keys()):
        name = "/".join(key)
        if key not in new:
            out["removed"].append(name)
            continue
        if key not in old:
            out["new"].append(f"{name}: {new[key].headline()}")
            continue
        x, y = old[key], new[key]
        more_host = sorted(set(y.host_fallback.ops) - set(x.host_fallback.ops))
        if _rank(y) > _rank(x) or (more_host and _rank(y) == _rank(x)):
            why = "; ".join(y.failed_steps()[:2]) or (f"new host fallback {', '.join(more_host)}" if more_host else "")
            out["worse"].append(f"{name}: {x.headline()} -> {y.headline()}{': ' + why if why else ''}")
        elif _rank(y) < _rank(x) and (y.outcome is not x.outcome or y.outcome is Outcome.ok):
            # better means the outcome improved: an error that is still an error is not better,
            # even when it now fails at a later step
            out["better"].append(f"{name}: {x.headline()} -> {y.headline()}")
    return out


def render_workload_diff(changes: dict[str, list[str]]) -> str:
    """The text block ``opmatrix diff`` prints under the cell table (empty when nothing changed)."""
    lines = [f"workloads {kind}: {line}" for kind in ("worse", "better", "new", "removed") for line in changes[kind]]
    return "\n".join(lines) + "\n" if lines else ""

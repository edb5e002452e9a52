"""The matrix's ``workloads`` section: observed host fallback checked against the operator entries.

A workload run records which ATen overloads ran on the host (``aten::cumsum.out``); the operator
matrix predicts host execution where an entry of that operator has path ``fallback``::

    results = predict_fallback(results, matrix.operators)
    results[0].host_fallback.predicted     # ['aten::cumsum.out']: the op probes saw it coming
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opmatrix.schema import Entry, ExecPath, WorkloadResult

__all__ = ["base_name", "fallback_bases", "normal_base", "predict_fallback"]


def base_name(op: str) -> str:
    """``aten::cumsum.out`` / ``aten.cumsum.default`` -> ``aten::cumsum`` (in-place ``_`` kept)."""
    ns, sep, rest = op.replace("::", ".", 1).partition(".")
    if not sep:
        return op
    return f"{ns}::{rest.partition('.')[0]}"


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

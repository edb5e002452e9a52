"""The other direction of the gate: cells that work but that no requirement claims.

Like PyTorch's ``test_dtypes`` ("the op works for a dtype it does not claim"), a working cell that
the contract does not promise is a finding. It never blocks; it is reported with the contract
lines that would claim it, compressed into as few operator requirements as the cells allow::

    - ops: [aten.cumsum.default]
      dtypes: [bfloat16, float32]
      ranks: {min: 1, max: 3}
      worst_path: native

"Works" means: every conditional group ok, path no worse than the contract's most lenient
``worst_path`` (composite when it has no operator requirement), no host fallback when the contract
forbids it, not flaky.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from opmatrix.matrix.compress import rank_runs
from opmatrix.schema import (
    Contract,
    DType,
    Entry,
    ExecPath,
    FallbackPolicy,
    Layout,
    Mode,
    OperatorRequirement,
    Outcome,
    RankRange,
    dump_yaml,
    model_to_data,
)
from opmatrix.schema.gate import Improvement

from .cells import CellIndex, CellKey, uses_fallback

__all__ = ["find_improvements", "improvement_yaml"]


class _Spec(NamedTuple):
    """One improvement line minus its ops: cells with equal specs share a line."""

    dtypes: tuple[DType, ...]
    run: tuple[int, int]
    layouts: tuple[Layout, ...]
    mode: Mode
    path: ExecPath


def _acceptable_worst(contract: Contract) -> ExecPath:
    paths = [op.worst_path for req in contract.requirements for op in req.operators]
    return max(paths) if paths else ExecPath.composite


def _works(groups: list[Entry], worst: ExecPath, no_fallback: bool) -> bool:
    return all(
        g.outcome is Outcome.ok and g.path <= worst and not g.flaky and not (no_fallback and uses_fallback(g))
        for g in groups
    )


def find_improvements(index: CellIndex, contract: Contract, claimed: set[CellKey]) -> list[Improvement]:
    """Working, unclaimed cells as operator requirements that cover exactly those cells."""
    worst = _acceptable_worst(contract)
    no_fallback = contract.fallback is FallbackPolicy.forbidden
    # (op, mode) -> (dtype, layout) -> ranks, and the worst path seen per (op, mode, dtype, layout)
    found: dict[tuple[str, Mode], dict[tuple[DType, Layout], set[int]]] = defaultdict(lambda: defaultdict(set))
    paths: dict[tuple[str, Mode, DType, Layout, int], ExecPath] = {}
    for key, groups in index.items():
        if key in claimed or not _works(groups, worst, no_fallback):
            continue
        found[(key.op, key.mode)][(key.dtype, key.layout)].add(key.rank)
        paths[(key.op, key.mode, key.dtype, key.layout, key.rank)] = max(g.path for g in groups)
    # group cells into exact products: per rank run, dtypes sharing the same layouts
    specs: dict[_Spec, list[str]] = defaultdict(list)
    counts: dict[_Spec, int] = defaultdict(int)
    for (op, mode), cells in sorted(found.items()):
        by_run: dict[tuple[int, int], dict[DType, set[Layout]]] = defaultdict(lambda: defaultdict(set))
        for (dtype, layout), ranks in cells.items():
            for run in rank_runs(ranks):
                by_run[run][dtype].add(layout)
        for run, dtype_layouts in sorted(by_run.items()):
            by_layouts: dict[tuple[Layout, ...], list[DType]] = defaultdict(list)
            for dtype, layout_set in dtype_layouts.items():
                by_layouts[tuple(sorted(layout_set, key=list(Layout).index))].append(dtype)
            for lays, dtypes in sorted(by_layouts.items()):
                dts = tuple(sorted(dtypes, key=list(DType).index))
                path = max(paths[(op, mode, d, lay, r)] for d in dts for lay in lays for r in range(run[0], run[1] + 1))
                spec = _Spec(dts, run, lays, mode, path)
                specs[spec].append(op)
                counts[spec] += len(dts) * len(lays) * (run[1] - run[0] + 1)
    out = []
    for spec, ops in specs.items():
        req = OperatorRequirement(
            ops=sorted(ops), dtypes=list(spec.dtypes), ranks=RankRange(min=spec.run[0], max=spec.run[1]),
            layouts=list(spec.layouts), mode=spec.mode, worst_path=spec.path,
        )
        out.append(Improvement(requirement=req, cells=counts[spec]))
    return sorted(out, key=lambda imp: (imp.requirement.ops, imp.requirement.mode, [str(d) for d in imp.requirement.dtypes]))


def improvement_yaml(improvements: Iterable[Improvement]) -> str:
    """The contract lines (a YAML list under a level-2 ``operators:``) that claim the improvements."""
    data = []
    for imp in improvements:
        item = model_to_data(imp.requirement)
        # worst_path is worth writing even when it equals the default: it is the claim
        item["worst_path"] = str(imp.requirement.worst_path)
        data.append(item)
    return dump_yaml(data) if data else ""

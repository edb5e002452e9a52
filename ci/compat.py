"""Level 7 of the gate: the promised torch / Python window, from an ``opmatrix compat`` report.

For every promised torch version the report must hold a run whose install check, import and
diagnostics (profiler, doctor) passed; and across each upgrade (older -> newer torch) no probed
cell may get a worse path or outcome: "a supported model retains a maintained execution path
after a framework upgrade"::

    result = evaluate_compat(req, rid="L7.compat", level=7, blocking=True, report=load_compat("out/compat/compat.yaml"))
    result.cells[-1].line()   # "check:compat torch 2.9.0 -> 2.13.0: aten.mm.default float32 rank 2 ...: native/ok -> fallback/ok"
"""

from __future__ import annotations

from opmatrix.schema import ExecPath, Outcome, load_model
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status
from opmatrix.schema.perf import CompatReport, CompatRequirement, CompatRun, torch_version_key

__all__ = ["evaluate_compat", "load_compat", "worse_cells"]


def load_compat(path: str) -> CompatReport:
    """Load a compat report (``opmatrix compat --out DIR`` writes ``DIR/compat.yaml``)."""
    return load_model(path, CompatReport)


def _rank(value: str) -> tuple[int, int]:
    path, _, outcome = value.partition("/")
    paths, outcomes = list(ExecPath), list(Outcome)
    p = paths.index(ExecPath(path)) if path in ExecPath._value2member_map_ else len(paths)
    o = outcomes.index(Outcome(outcome)) if outcome in Outcome._value2member_map_ else len(outcomes)
    return p, o


def worse_cells(older: CompatRun, newer: CompatRun) -> list[str]:
    """Cells whose path or outcome got worse from ``older`` to ``newer`` (or that disappeared)."""
    out = []
    for label, before in sorted(older.cells.items()):
        after = newer.cells.get(label)
        if after is None:
            out.append(f"{label}: {before} -> not probed")
            continue
        (p0, o0), (p1, o1) = _rank(before), _rank(after)
        if p1 > p0 or o1 > o0:
            out.append(f"{label}: {before} -> {after}")
    return out


def _run_cell(version: str, run: CompatRun | None, req: CompatRequirement) -> CellRef:
    op = f"check:compat torch {version}"
    if run is None:
        return CellRef(op=op, status=CellStatus.failed, reason="promised but not run (no environment with it)")
    if run.error:
        return CellRef(op=op, status=CellStatus.failed, reason=run.error)
    checks = {c.name: c for c in run.checks}
    needed = list(req.diagnostics) + (["install"] if req.install else [])
    bad = [f"{n}: {checks[n].detail or 'failed'}" if n in checks else f"{n}: not run" for n in needed
           if n not in checks or not checks[n].ok]
    if not run.cells:
        bad.append("no probed cells")
    ok = f"torch {run.torch}, python {run.python}: {', '.join(needed)} ok, {len(run.cells)} cells"
    return CellRef(op=op, status=CellStatus.failed if bad else CellStatus.passed, reason="; ".join(bad) or ok)


def _find(report: CompatReport, version: str) -> CompatRun | None:
    return next((r for r in report.runs if torch_version_key(r.torch) == torch_version_key(version)), None)


def evaluate_compat(
    req: CompatRequirement, *, rid: str, level: int, blocking: bool, report: CompatReport | None
) -> RequirementResult:
    """Judge the promised window against a compat report."""
    title = f"compatibility window torch {', '.join(req.torch)}" + (f", python {', '.join(req.python)}" if req.python else "")
    cells: list[CellRef] = []
    if report is not None:
        runs = {v: _find(report, v) for v in req.torch}
        cells = [_run_cell(v, r, req) for v, r in runs.items()]
        tried = {".".join(r.python.split(".")[:2]) for r in report.runs}
        cells += [CellRef(op=f"check:compat python {p}", status=CellStatus.failed, reason="promised but no run used it")
                  for p in req.python if p not in tried]
        ordered = sorted((r for r in runs.values() if r is not None and not r.error), key=lambda r: torch_version_key(r.torch))
        for older, newer in zip(ordered, ordered[1:], strict=False):
            worse = worse_cells(older, newer)
            cells.append(CellRef(
                op=f"check:compat torch {older.torch} -> {newer.torch}",
                status=CellStatus.failed if worse else CellStatus.passed,
                reason="; ".join(worse[:20]) or f"no cell worse after the upgrade ({len(older.cells)} compared)",
            ))
    bad = sum(c.status is CellStatus.failed for c in cells)
    if report is None:
        status, message = Status.unknown, "no compat report given (opmatrix gate --compat FILE): unproven"
    else:
        status = Status.failed if bad else Status.passed
        message = f"{len(cells) - bad}/{len(cells)} compatibility checks pass"
    return RequirementResult(id=rid, level=level, kind="compat", title=title, status=status, blocking=blocking,
                             message=message, cells=cells, checked=len(cells), failed=bad)

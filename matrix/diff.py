"""Diff two matrices cell by cell: better, worse, new, removed, not probed in B, and numerics that drifted.

::

    d = diff_matrices(load_matrix("g1/matrix.yaml"), load_matrix("g2/matrix.yaml"))
    d.worse            # tuple of CellChange, one per cell whose result got worse
    print(d.render_table())
    dumps_json(d.to_dict())

A cell is (op, dtype, rank, layout, mode). When both matrices split it into the same argument
condition groups (``dim: last`` ...), the groups are compared one by one; otherwise the worst group
of each side is compared (its conditions shown as ``conditions=differ``). Quality is (outcome,
path), in that order: ``wrong`` is worse than any path, a fault worse than ``wrong``; on a tie,
the first-order backward's (outcome, path) decides. A cell of equal quality is reported under
``numerics`` when its max absolute error grew by more than ``error_growth`` x its ``atol``
(default: a quarter of the tolerance budget).

A cell of A that B lacks is ``removed`` when B probed that operator in that dtype and mode (the
cell itself is gone: a rank or layout no longer produced), and ``not_probed`` when B holds nothing
of that operator, dtype and mode: B's run did not look, which says nothing about support.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from opmatrix.schema import DType, Entry, ExecPath, Layout, Matrix, Outcome, Shapes, describe
from opmatrix.schema.yamlload import dumps_json

from .compress import cover
from .distributed import DistChange

__all__ = ["DIFFERING_CONDITIONS", "KIND_WORDS", "CellChange", "CellState", "ChangeKind", "DiffRow", "MatrixDiff", "diff_matrices"]

ChangeKind = Literal["worse", "better", "new", "removed", "not_probed", "numerics"]
_KINDS: tuple[ChangeKind, ...] = ("worse", "better", "new", "removed", "not_probed", "numerics")
#: how each kind reads in a sentence ("3 not probed in B")
KIND_WORDS: dict[str, str] = {"not_probed": "not probed in B"}
Cell = tuple[str, DType, int, Layout, str]
Conds = tuple[tuple[str, str], ...]
#: the conditions shown when the two sides split a cell into different condition groups
DIFFERING_CONDITIONS: Conds = (("conditions", "differ"),)


@dataclass(frozen=True)
class CellState:
    """What one side of the diff says about a cell."""

    path: ExecPath
    outcome: Outcome
    max_abs_err: float | None = None
    atol: float | None = None
    #: (outcome rank, path rank) of the first-order backward, when probed
    backward: tuple[int, int] | None = None

    @property
    def quality(self) -> tuple[int, int]:
        """Lower is better: outcome first, then path."""
        return (self.outcome.rank, self.path.rank)

    def label(self) -> str:
        """``native`` or ``native/wrong``."""
        return self.path.value if self.outcome is Outcome.ok else f"{self.path.value}/{self.outcome.value}"


@dataclass(frozen=True)
class CellChange:
    """One cell that changed between matrix A (``before``) and B (``after``)."""

    kind: ChangeKind
    op: str
    dtype: DType
    rank: int
    layout: Layout
    mode: str
    conditions: tuple[tuple[str, str], ...]
    before: CellState | None
    after: CellState | None


@dataclass(frozen=True)
class DiffRow:
    """Changed cells with the same change, compressed like entries (dtypes x ranks x layouts)."""

    kind: ChangeKind
    op: str
    mode: str
    conditions: dict[str, str]
    dtypes: tuple[str, ...]
    ranks: tuple[int, int]
    layouts: tuple[str, ...]
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {
            "kind": self.kind, "op": self.op, "mode": self.mode, "conditions": self.conditions,
            "dtypes": list(self.dtypes), "ranks": {"min": self.ranks[0], "max": self.ranks[1]},
            "layouts": list(self.layouts), "before": self.before, "after": self.after,
        }


def _label_of(m: Matrix) -> str:
    b = m.backend
    return f"{b.name}{' ' + b.generation if b.generation else ''} (torch {m.evidence.torch_version})"


@dataclass(frozen=True)
class MatrixDiff:
    """The changes from matrix ``a`` to matrix ``b``, per kind, each sorted by cell key."""

    a: str
    b: str
    worse: tuple[CellChange, ...]
    better: tuple[CellChange, ...]
    new: tuple[CellChange, ...]
    removed: tuple[CellChange, ...]
    not_probed: tuple[CellChange, ...]
    numerics: tuple[CellChange, ...]
    #: workload changes by kind (``opmatrix diff`` fills them in; :func:`diff_matrices` compares cells)
    workloads: dict[str, list[str]] = field(default_factory=dict)
    distributed: tuple[DistChange, ...] = ()
    #: whether either matrix has workload results / a distributed section (a diff then shows that part)
    has_workloads: bool = False
    has_distributed: bool = False

    @property
    def empty(self) -> bool:
        """No cell changed."""
        return not any(self.counts().values())

    @property
    def same_verdicts(self) -> bool:
        """The same cells with the same paths and outcomes; only evidence (how large an error
        within tolerance was, e.g. bfloat16 sums accumulated by another thread count) may differ."""
        return not (self.worse or self.better or self.new or self.removed or self.not_probed)

    def counts(self) -> dict[str, int]:
        """Number of changed cells per kind."""
        return {kind: len(getattr(self, kind)) for kind in _KINDS}

    def changes(self) -> Iterator[CellChange]:
        """Every changed cell, worse first."""
        for kind in _KINDS:
            yield from getattr(self, kind)

    def rows(self) -> list[DiffRow]:
        """Changed cells grouped into compact rows (same op, mode, conditions and change)."""
        groups: dict[tuple[Any, ...], list[CellChange]] = defaultdict(list)
        for c in self.changes():
            groups[c.kind, c.op, c.mode, c.conditions, _side(c, "before"), _side(c, "after")].append(c)
        out = []
        for (kind, op, mode, conds, before, after), members in groups.items():
            for box in cover((c.dtype, c.rank, c.layout) for c in members):
                out.append(
                    DiffRow(kind, op, mode, dict(conds), tuple(d.value for d in box.dtypes), (box.rmin, box.rmax),
                            tuple(x.value for x in box.layouts), before, after)
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: the two sides, counts per kind, and the compact rows."""
        return {"a": self.a, "b": self.b, "counts": self.counts(), "rows": [r.to_dict() for r in self.rows()]}

    def to_json(self) -> str:
        """``to_dict()`` as indented JSON text."""
        return dumps_json(self.to_dict(), indent=2, sort_keys=True)

    def render_table(self) -> str:
        """A readable fixed-width table, one row per compact group, with counts first."""
        counts = ", ".join(f"{n} {KIND_WORDS.get(kind, kind)}" for kind, n in self.counts().items())
        lines = [f"A: {self.a}", f"B: {self.b}", f"cells: {counts}"]
        rows = self.rows()
        if not rows:
            return "\n".join([*lines, "no cell changed"]) + "\n"
        head = ("change", "op", "dtypes", "ranks", "layouts", "mode", "conditions", "A", "B")
        body = [
            (KIND_WORDS.get(r.kind, r.kind), r.op, ",".join(r.dtypes), f"{r.ranks[0]}" if r.ranks[0] == r.ranks[1] else f"{r.ranks[0]}-{r.ranks[1]}",
             ",".join(r.layouts), r.mode, describe(r.conditions), r.before, r.after)
            for r in rows
        ]
        widths = [max(len(str(row[i])) for row in (head, *body)) for i in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        lines += ["", fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()]
        lines += [fmt.format(*row).rstrip() for row in body]
        return "\n".join(lines) + "\n"


def _side(change: CellChange, which: str) -> str:
    state: CellState | None = getattr(change, which)
    if state is None:
        return "-"
    if change.kind == "numerics":
        return f"{state.label()} err {state.max_abs_err:.3g}"
    other: CellState | None = change.after if which == "before" else change.before
    if other is not None and other.label() == state.label() and state.backward is not None:
        # the forward is unchanged: say what did change, the first-order backward
        outcome, path = list(Outcome)[state.backward[0]], list(ExecPath)[state.backward[1]]
        back = path.value if outcome is Outcome.ok else f"{path.value}/{outcome.value}"
        return f"{state.label()}, backward {back}"
    return state.label()


def _state(entry: Entry) -> CellState:
    num, ag = entry.numerics, entry.autograd
    return CellState(
        path=entry.path,
        outcome=entry.outcome,
        max_abs_err=num.max_abs_err if num else None,
        atol=num.atol if num else None,
        backward=(ag.outcome.rank, ag.path.rank) if ag else None,
    )


def _cells(m: Matrix) -> dict[Cell, dict[Conds, CellState]]:
    """Cell -> condition group -> state (the worst, should two entries cover one group)."""
    out: dict[Cell, dict[Conds, CellState]] = defaultdict(dict)
    for op, entries in m.boxes().items():
        for e in entries:
            conds = tuple(sorted(e.conditions.items()))
            state = _state(e)
            # dynamic-shape compiled cells are their own cells ("compile dynamic"), never merged with static ones
            label = f"{e.mode.value} dynamic" if e.shapes is Shapes.dynamic else e.mode.value
            for dtype, rank, layout, _mode in e.cells():
                groups = out[op, dtype, rank, layout, label]
                held = groups.get(conds)
                if held is None or state.quality > held.quality:
                    groups[conds] = state
    return out


def _pairs(
    before: dict[Conds, CellState], after: dict[Conds, CellState]
) -> Iterator[tuple[Conds, CellState, CellState]]:
    """Group by group when both sides split the cell alike; else worst group against worst group."""
    if before.keys() == after.keys():
        for conds in sorted(before):
            yield conds, before[conds], after[conds]
        return
    worst_b = max(before.items(), key=lambda kv: (kv[1].quality, kv[0]))
    worst_a = max(after.items(), key=lambda kv: (kv[1].quality, kv[0]))
    yield DIFFERING_CONDITIONS, worst_b[1], worst_a[1]


def _drifted(before: CellState, after: CellState, error_growth: float) -> bool:
    if before.max_abs_err is None or after.max_abs_err is None:
        return False
    budget = error_growth * (after.atol if after.atol is not None else 0.0)
    return after.max_abs_err - before.max_abs_err > budget


def diff_matrices(a: Matrix, b: Matrix, *, error_growth: float = 0.25) -> MatrixDiff:
    """Cells better / worse / new / removed from ``a`` to ``b``, and numerics that drifted.

    ``a`` and ``b`` are schema matrices (``opmatrix.schema.Matrix``; pass ``Matrix.model`` for
    the query wrapper). Every list is sorted by cell key, so the result is deterministic.
    """
    ca, cb = _cells(a), _cells(b)
    looked_b = {(op, dtype, mode) for op, dtype, _rank, _layout, mode in cb}
    found: dict[str, list[CellChange]] = {kind: [] for kind in _KINDS}
    for cell in sorted(ca.keys() | cb.keys(), key=_sort_key):
        groups_a, groups_b = ca.get(cell), cb.get(cell)
        if groups_a is None or groups_b is None:
            kind: ChangeKind = "new" if groups_a is None else "removed"
            if kind == "removed" and (cell[0], cell[1], cell[4]) not in looked_b:
                kind = "not_probed"
            for conds, state in sorted((groups_b or groups_a or {}).items()):
                before, after = (None, state) if kind == "new" else (state, None)
                found[kind].append(CellChange(kind, *cell, conds, before=before, after=after))
            continue
        for conds, before, after in _pairs(groups_a, groups_b):
            change = _classify(before, after, error_growth)
            if change is not None:
                found[change].append(CellChange(change, *cell, conds, before=before, after=after))
    return MatrixDiff(
        a=_label_of(a), b=_label_of(b), worse=tuple(found["worse"]), better=tuple(found["better"]),
        new=tuple(found["new"]), removed=tuple(found["removed"]), not_probed=tuple(found["not_probed"]),
        numerics=tuple(found["numerics"]),
    )


def _classify(before: CellState, after: CellState, error_growth: float) -> ChangeKind | None:
    # as the release gate judges it: worse when the outcome *or* the path got worse (a cell that
    # went from native/wrong to fallback/ok is fixed but lost its kernel: a regression to review)
    if after.quality != before.quality:
        got_worse = after.outcome.rank > before.outcome.rank or after.path.rank > before.path.rank
        return "worse" if got_worse else "better"
    if after.backward != before.backward and before.backward is not None and after.backward is not None:
        return "worse" if after.backward > before.backward else "better"
    return "numerics" if _drifted(before, after, error_growth) else None


def _sort_key(cell: Cell) -> tuple[Any, ...]:
    op, dtype, rank, layout, mode = cell
    return (op, mode, dtype.value, rank, layout.value)

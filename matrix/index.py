"""The precompiled query index: every probed cell's :class:`~opmatrix.matrix.answer.Answer`.

Rows are keyed ``(op, dtype, layout, mode)`` (plain strings) and hold one answer slot per rank,
``None`` where that rank was not probed; a lookup is one dict probe and one list index::

    rows[("aten.softmax.int", "float32", "contiguous", "eager")][3]   # -> Answer

Entries of an operator without argument conditions cover disjoint cells and share one answer
per entry; cells split into condition groups get one answer per distinct set of groups (see
:func:`~opmatrix.matrix.answer.cell_answer`).
"""

from __future__ import annotations

from collections.abc import Iterator

from opmatrix.schema import CellKey, DType, Entry, Evidence, Layout, Mode, Shapes
from opmatrix.schema import Matrix as MatrixModel

from .answer import Answer, cell_answer, decide

__all__ = ["Row", "RowKey", "build_rows", "iter_cells"]

RowKey = tuple[str, str, str, str]  # op, dtype, layout, mode
Row = list["Answer | None"]


def _slots(entry: Entry) -> list[tuple[str, str, str]]:
    # ``_value_`` is a plain attribute; ``.value`` goes through a descriptor, slow at this count
    mode = entry.mode._value_
    layouts = [x._value_ for x in entry.layouts]
    return [(dtype._value_, layout, mode) for dtype in entry.dtypes for layout in layouts]


def _disjoint(op: str, entries: list[Entry], evidence: Evidence) -> dict[RowKey, Row] | None:
    """Rows for entries without conditions; None when two of them claim one cell."""
    rows: dict[RowKey, Row] = {}
    for entry in entries:
        answer = decide([entry], evidence)
        lo, hi = entry.ranks.min, entry.ranks.max
        width = hi - lo + 1
        for dtype, layout, mode in _slots(entry):
            key = (op, dtype, layout, mode)
            row = rows.get(key)
            if row is None:
                row = rows[key] = [None] * (hi + 1)
            elif len(row) <= hi:
                row.extend([None] * (hi + 1 - len(row)))
            if row[lo : hi + 1].count(None) != width:
                return None
            row[lo : hi + 1] = [answer] * width
    return rows


def _grouped(op: str, entries: list[Entry], evidence: Evidence) -> dict[RowKey, Row]:
    """Rows for entries whose condition groups share cells: one answer per set of groups."""
    spans: dict[RowKey, list[tuple[int, int, Entry]]] = {}
    for entry in entries:
        for dtype, layout, mode in _slots(entry):
            spans.setdefault((op, dtype, layout, mode), []).append((entry.ranks.min, entry.ranks.max, entry))
    shared: dict[tuple[int, ...], Answer] = {}
    rows: dict[RowKey, Row] = {}
    for key, items in spans.items():
        row: Row = [None] * (max(hi for _, hi, _ in items) + 1)
        for rank in range(len(row)):
            group = [e for lo, hi, e in items if lo <= rank <= hi]
            if not group:
                continue
            sig = tuple(map(id, group))
            answer = shared.get(sig)
            if answer is None:
                answer = shared[sig] = cell_answer(group, evidence)
            row[rank] = answer
        rows[key] = row
    return rows


def build_rows(model: MatrixModel, shapes: Shapes = Shapes.static) -> dict[RowKey, Row]:
    """The index of a whole matrix: eager and static-shape compiled cells, or (``shapes``
    dynamic) the compiled cells probed with dynamic shapes."""
    rows: dict[RowKey, Row] = {}
    for op, every in model.boxes().items():
        entries = [e for e in every if (e.shapes or Shapes.static) is shapes]
        if not entries:
            continue
        part = None if any(e.conditions for e in entries) else _disjoint(op, entries, model.evidence)
        rows.update(part if part is not None else _grouped(op, entries, model.evidence))
    return rows


def iter_cells(rows: dict[RowKey, Row]) -> Iterator[tuple[CellKey, Answer]]:
    """Every probed cell key with its answer, sorted by key."""
    cells = [
        (CellKey(op, DType(dtype), rank, Layout(layout), Mode(mode)), answer)
        for (op, dtype, layout, mode), row in rows.items()
        for rank, answer in enumerate(row)
        if answer is not None
    ]
    cells.sort(key=lambda item: item[0])
    yield from cells

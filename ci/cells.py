"""A matrix expanded back into cells, indexed for the gate's look-ups.

An entry covers dtypes x ranks x layouts in one mode; the gate judges cells, so it expands every
entry. A cell may hold several *conditional groups* (entries with different ``conditions``, e.g.
softmax ``dim: last`` native and ``dim: first`` composite); they stay together under one key::

    index = CellIndex(matrix)
    index.groups(CellKey("aten.softmax.int", DType.float32, 3, Layout.contiguous, Mode.eager))
    # -> [Entry(conditions={'dim': 'last'}, path=native, ...), Entry(conditions={'dim': 'first'}, ...)]

Until ``opmatrix.matrix`` offers its own index this works on the schema models only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping

from opmatrix.schema import CellKey, CellResult, DType, Entry, ExecPath, FallbackState, Layout, Matrix, Mode, Shapes

__all__ = ["CellKey", "CellIndex", "conditions_compatible", "severity", "uses_fallback"]


def uses_fallback(result: CellResult) -> bool:
    """Whether the cell (or one of its component ops) ran on the host."""
    return result.path is ExecPath.fallback or result.fallback.state is FallbackState.observed


def severity(result: CellResult) -> tuple[int, int, bool, bool]:
    """Sort key of a cell result, worst last: outcome, then path, then host fallback, flakiness."""
    return (result.outcome.rank, result.path.rank, uses_fallback(result), result.flaky)


def conditions_compatible(group: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether a group's conditions can hold together with ``wanted`` (absent keys match anything)."""
    return all(group.get(name, value) == value for name, value in wanted.items())


class CellIndex:
    """Every probed cell of a matrix, with its conditional groups, worst group last."""

    def __init__(self, matrix: Matrix) -> None:
        cells: dict[CellKey, list[Entry]] = defaultdict(list)
        ranks: dict[tuple[str, DType, Layout, Mode], set[int]] = defaultdict(set)
        dynamic: dict[CellKey, list[Entry]] = defaultdict(list)  # compiled with dynamic shapes: their own cells
        for op, entries in matrix.boxes().items():
            for entry in entries:
                for dtype, rank, layout, mode in entry.cells():
                    if entry.shapes is Shapes.dynamic:
                        dynamic[CellKey(op, dtype, rank, layout, mode)].append(entry)
                        continue
                    cells[CellKey(op, dtype, rank, layout, mode)].append(entry)
                    ranks[(op, dtype, layout, mode)].add(rank)
        self._cells = {key: sorted(groups, key=severity) for key, groups in cells.items()}
        self._dynamic = {key: sorted(groups, key=severity) for key, groups in dynamic.items()}
        self._ranks = dict(ranks)
        self.ops: frozenset[str] = frozenset(matrix.operators)

    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, key: object) -> bool:
        return key in self._cells

    def keys(self) -> list[CellKey]:
        """Every probed cell key, sorted."""
        return sorted(self._cells)

    def items(self) -> Iterator[tuple[CellKey, list[Entry]]]:
        """(key, groups) pairs in key order."""
        for key in self.keys():
            yield key, self._cells[key]

    def groups(self, key: CellKey, conditions: Mapping[str, str] | None = None, dynamic: bool = False) -> list[Entry]:
        """The conditional groups of a cell (best first), optionally only those compatible with ``conditions``;
        ``dynamic``: the compiled cell probed with dynamic shapes."""
        groups = (self._dynamic if dynamic else self._cells).get(key, [])
        if conditions:
            groups = [g for g in groups if conditions_compatible(g.conditions, conditions)]
        return groups

    def dynamic_keys(self, op: str, dtype: DType, layout: Layout) -> list[CellKey]:
        """The dynamic-shape compiled cells of (op, dtype, layout), any rank."""
        return sorted(k for k in self._dynamic if (k.op, k.dtype, k.layout) == (op, dtype, layout))

    def ranks(self, op: str, dtype: DType, layout: Layout, mode: Mode) -> list[int]:
        """Ranks probed for (op, dtype, layout, mode), ascending."""
        return sorted(self._ranks.get((op, dtype, layout, mode), ()))

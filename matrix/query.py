"""The query API: ``MatrixIndex.load(path).query(op, dtype=..., rank=..., layout=...) -> Answer``.

Loading builds an index (:mod:`.index`) from every probed cell ``(op, dtype, rank, layout,
mode)`` to its precomputed :class:`~opmatrix.matrix.answer.Answer`, so a query is a couple of
dict lookups::

    >>> m = MatrixIndex.load("out/refaccel-g2/matrix.yaml")  # needs a probed matrix: not run  # doctest: +SKIP
    >>> m.query("aten.softmax.int", dtype="float32", rank=3, args={"dim": -1}).path  # needs a probed matrix: not run  # doctest: +SKIP
    ExecPath.native

Operators may be given as ``torch.ops.aten.softmax.int`` (an ``OpOverload``), ``"aten::softmax.int"``
or ``"aten.softmax.int"``; the ``.default`` overload may be left out (``aten.mm``). Dtypes as
``"bfloat16"``, ``DType.bfloat16`` or ``torch.bfloat16``. A name that is no operator at all raises
:class:`UnknownOperatorError` (a ``KeyError``) with the closest names; a real operator or a cell
that was not probed answers ``unknown``.
"""

from __future__ import annotations

import difflib
import operator
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opmatrix.schema import CellKey, Entry, OpName, Shapes
from opmatrix.schema import Matrix as MatrixModel

from .answer import Answer, unknown
from .cache import load_matrix_cached
from .index import Row, RowKey, build_rows, iter_cells
from .keys import parse_dtype, parse_layout, parse_mode

__all__ = ["MatrixIndex", "UnknownOperatorError"]


class UnknownOperatorError(KeyError):
    """An operator name that is neither in the matrix nor a PyTorch operator."""

    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown operator {name!r}{hint} (give an ATen overload such as aten.softmax.int)")

    def __str__(self) -> str:
        return str(self.args[0])


def _is_torch_op(op: OpName) -> bool:
    """Whether ``op`` names a registered PyTorch operator overload."""
    if op.is_opinfo:
        return False
    import torch

    try:
        packet = getattr(getattr(torch.ops, op.namespace), op.name)
        return op.overload in packet.overloads()
    except (AttributeError, RuntimeError):
        return False


class MatrixIndex:
    """A support matrix with its query index; ``.model`` is the schema object (the YAML artifact)."""

    __slots__ = ("model", "_rows", "_names", "_op_set", "_count", "_dynamic")

    def __init__(self, model: MatrixModel):
        self.model = model
        self._op_set = frozenset(model.operators)
        self._names: dict[object, str] = {name: name for name in model.operators}
        self._rows: dict[RowKey, Row] = build_rows(model)
        self._dynamic: dict[RowKey, Row] | None = None  # the dynamic-shape compiled cells, indexed when asked
        self._count = sum(len(row) - row.count(None) for row in self._rows.values())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MatrixIndex:
        """Load (strictly validated; see :mod:`.cache` for the validated-model cache) and index a file."""
        return cls(load_matrix_cached(path))

    # -- the schema object's parts ---------------------------------------------------------

    @property
    def operators(self) -> dict[str, list[Entry]]:
        """Operator name -> entries."""
        return self.model.operators

    def __contains__(self, op: object) -> bool:
        try:
            return self.resolve(op) in self._op_set
        except UnknownOperatorError:
            return False

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        b = self.model.backend
        gen = f" {b.generation}" if b.generation else ""
        return f"<MatrixIndex {b.name}{gen}: {len(self._op_set)} operators, {self._count} cells>"

    def cells(self) -> Iterator[tuple[CellKey, Answer]]:
        """Every probed cell key ``(op, dtype, rank, layout, mode)`` with its answer, sorted."""
        return iter_cells(self._rows)

    # -- queries ---------------------------------------------------------------------------

    def resolve(self, op: object) -> str:
        """The matrix's name for ``op``; raises :class:`UnknownOperatorError` for a non-operator."""
        name = self._names.get(op)
        if name is not None:
            return name
        text = str(op).strip()
        try:  # an OpOverload prints aten.softmax.int, an OpOverloadPacket aten.mm (the default overload)
            parsed: OpName | None = OpName.parse(text, shorthand=True)
        except ValueError:
            parsed = None
        if parsed is not None and (str(parsed) in self._op_set or _is_torch_op(parsed)):
            name = str(parsed)  # probed, or a real operator that this matrix did not probe
        else:
            raise UnknownOperatorError(text, self._suggest(text, parsed))
        if len(self._names) < 100_000:  # bounded: arbitrary objects must not grow it forever
            self._names[op] = name
        return name

    def _suggest(self, text: str, parsed: OpName | None) -> list[str]:
        """The probed overloads of the named operator (``aten::softmax``: which overload?), else
        the closest probed names."""
        if parsed is not None:
            stem = f"{parsed.namespace}.{parsed.name}."
            same = sorted(n for n in self._op_set if n.startswith(stem))[:3]
            if same:
                return same
        return difflib.get_close_matches(str(parsed or text), sorted(self._op_set), n=3)

    def query(
        self,
        op: object,
        dtype: object,
        rank: int,
        layout: object = "contiguous",
        mode: object = "eager",
        args: Mapping[str, Any] | None = None,
        shapes: object = "static",
    ) -> Answer:
        """How ``op`` runs for one cell; ``args`` (by schema name) narrow conditional entries;
        ``shapes="dynamic"`` asks the compiled cells probed with dynamic shapes."""
        if shapes != "static" and str(getattr(shapes, "value", shapes)) != "static":
            return self._query_dynamic(op, dtype, rank, layout, mode, args, shapes)
        name = self._names.get(op)
        if name is not None:
            row = self._rows.get((name, dtype, layout, mode))  # type: ignore[arg-type]
            if row is not None and rank.__class__ is int and 0 <= rank < len(row):
                answer = row[rank]
                if answer is not None:
                    return answer if args is None else answer.given(args, rank)
        return self._query_slow(op, dtype, rank, layout, mode, args)

    def _query_dynamic(self, op: object, dtype: object, rank: int, layout: object, mode: object,
                       args: Mapping[str, Any] | None, shapes: object) -> Answer:
        text = str(getattr(shapes, "value", shapes))
        if text != "dynamic":
            raise ValueError(f"unknown shapes {text!r} (one of dynamic, static)")
        if parse_mode(mode) != "compile":
            raise ValueError("shapes=dynamic asks compiled cells: use mode='compile'")
        if self._dynamic is None:
            self._dynamic = build_rows(self.model, Shapes.dynamic)
        return self._query_slow(op, dtype, rank, layout, mode, args, self._dynamic)

    def _query_slow(
        self, op: object, dtype: object, rank: int, layout: object, mode: object, args: Mapping[str, Any] | None,
        rows: dict[RowKey, Row] | None = None,
    ) -> Answer:
        rows = self._rows if rows is None else rows
        name = self.resolve(op)
        try:
            number = -1 if isinstance(rank, bool) else operator.index(rank)  # numpy ints too
        except TypeError:
            number = -1
        if number < 0:
            raise ValueError(f"rank must be an int >= 0, got {rank!r}")
        rank = number
        key = (name, parse_dtype(dtype), parse_layout(layout), parse_mode(mode))
        row = rows.get(key)
        answer = row[rank] if row is not None and rank < len(row) else None
        if answer is not None:
            return answer if args is None else answer.given(args, rank)
        return unknown(self._why_unknown(name, key[1], rank, key[2], key[3], rows), self.model.evidence)

    def _why_unknown(self, name: str, dtype: str, rank: int, layout: str, mode: str,
                     rows: dict[RowKey, Row] | None = None) -> str:
        if name not in self._op_set:
            return f"{name} was not probed on this backend"
        dynamic = rows is not None and rows is not self._rows
        rows = self._rows if rows is None else rows
        probed = [k for k in rows if k[0] == name and k[3] == mode]
        if not probed:
            return f"{name} was not probed in {mode} mode{' with dynamic shapes' if dynamic else ''}"
        for pos, what, value in ((1, "dtype", dtype), (2, "layout", layout)):
            if not any(k[pos] == value for k in probed):
                seen = sorted({k[pos] for k in probed})
                return f"{name} was not probed with {what} {value} (probed: {', '.join(seen)})"
        row = rows[name, dtype, layout, mode]
        ranks = [r for r, a in enumerate(row) if a is not None]
        return f"{name} {dtype} {layout} was not probed at rank {rank} (probed ranks: {ranks})"

    # -- other views (imported lazily: torch.fx and pandas are heavy) --------------------------

    def operator_support(self, worst_path: object = "composite", mode: object = "eager") -> Any:
        """A ``torch.fx`` ``OperatorSupportBase`` accepting nodes whose cell is at most ``worst_path``."""
        from .fx import MatrixOperatorSupport

        return MatrixOperatorSupport(self, worst_path=worst_path, mode=mode)

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per probed cell (see :mod:`opmatrix.matrix.frame`)."""
        from .frame import to_frame

        return to_frame(self.model)

    def coverage(self) -> Any:
        """Path counts per dtype and the op x dtype pivot of worst paths."""
        from .frame import coverage

        return coverage(self.model)

    def diff(self, other: MatrixIndex | MatrixModel) -> Any:
        """Cells better / worse / new / removed from ``self`` to ``other``."""
        from .diff import diff_matrices

        return diff_matrices(self.model, other.model if isinstance(other, MatrixIndex) else other)

"""The options of ``opmatrix query`` and ``diff``, declared once (see :mod:`opmatrix.schema.options`).

    >>> from opmatrix.matrix.options import QueryOptions
    >>> QueryOptions(matrix="m.yaml", op="aten.add.Tensor", rank=2, arg=("alpha=1",)).command_line()
    'opmatrix query m.yaml aten.add.Tensor --rank 2 --arg alpha=1'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from opmatrix.schema.io import UsageError
from opmatrix.schema.options import Options, option

__all__ = ["DiffOptions", "QueryOptions"]


@dataclass(frozen=True, kw_only=True)
class QueryOptions(Options):
    """``opmatrix query``: how does OP run for a dtype / rank / layout?"""

    verb: ClassVar[str] = "query"
    summary: ClassVar[str] = "how does OP run for a dtype / rank / layout?"

    matrix: str = option(positional=True, metavar="MATRIX", help="the matrix to ask")
    op: str = option(positional=True, metavar="OP", help="aten.softmax.int or aten::softmax.int")
    dtype: str | None = option(None, help="the cell's dtype, e.g. float32 (omitted: list the op's entries)")
    rank: int | None = option(None, min=0, help="the cell's rank (omitted: list the op's entries)")
    layout: str | None = option(None, help="the cell's layout (default contiguous)")
    mode: str = option("eager", choices=("eager", "compile"), help="eager or compile")
    shapes: str = option("static", choices=("static", "dynamic"),
                         help="--mode compile: the static-shape (dynamic=False) or dynamic-shape (dynamic=True) cells")
    all: bool = option(False, help="with no --dtype/--rank: list every entry after the headline")
    arg: tuple[str, ...] = option((), repeat=True, empty_ok=True, metavar="NAME=VALUE",
                                  help="argument value for conditional entries, e.g. dim=-1 (repeatable)")
    json: bool = option(False, help="print one JSON object")

    def check(self) -> None:
        names = [a.partition("=")[0].strip() for a in self.arg]
        twice = sorted({n for n in names if n and names.count(n) > 1})
        if twice:
            given = ", ".join(a for a in self.arg if a.partition("=")[0].strip() == twice[0])
            raise UsageError(f"--arg: {twice[0]!r} is given more than once ({given}); give each argument once")


@dataclass(frozen=True, kw_only=True)
class DiffOptions(Options):
    """``opmatrix diff``: cells better / worse / new / removed between two matrices."""

    verb: ClassVar[str] = "diff"
    summary: ClassVar[str] = "cells better / worse / new / removed between two matrices"

    a: str = option(positional=True, metavar="A", help="the older matrix")
    b: str = option(positional=True, metavar="B", help="the newer matrix")
    json: bool = option(False, help="print one JSON object")

"""The options of ``opmatrix report``, declared once (see :mod:`opmatrix.schema.options`).

    >>> from opmatrix.reports.options import ReportOptions
    >>> ReportOptions(matrix="m.yaml", out="site").command_line()
    'opmatrix report m.yaml --out site'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from opmatrix.schema.options import Options, option

__all__ = ["ReportOptions"]


@dataclass(frozen=True, kw_only=True)
class ReportOptions(Options):
    """``opmatrix report``: render the HTML support site."""

    verb: ClassVar[str] = "report"
    summary: ClassVar[str] = "render the HTML support site"

    matrix: str = option(positional=True, metavar="MATRIX", help="the matrix the site shows")
    baseline: str | None = option(None, metavar="MATRIX", help="previous release's matrix (adds a diff page)")
    gate: str | None = option(None, metavar="RESULT.json", help="gate result to show on the index")
    compat: str | None = option(None, metavar="FILE", help="level 7: an opmatrix compat report (adds a compatibility page)")
    records: str | None = option(None, metavar="DIR", help="level 6: performance records of opmatrix bench "
                                 "(adds a performance page with a chart)")
    baseline_records: str | None = option(None, metavar="DIR", help="the previous release's performance records: "
                                          "each record's interval against its baseline is drawn (needs --records)")
    out: str = option(help="output directory")
    force: bool = option(False, recorded=False, help="write into a non-empty --out that opmatrix did not make")

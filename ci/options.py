"""The options of ``opmatrix gate`` and ``compat``, declared once (see :mod:`opmatrix.schema.options`).

    >>> from opmatrix.ci.options import GateOptions
    >>> GateOptions(matrix="m.yaml", contract="c.yaml", json="-").command_line()
    'opmatrix gate --matrix m.yaml --contract c.yaml --json'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from opmatrix.schema.io import UsageError
from opmatrix.schema.options import Options, option

__all__ = ["CompatOptions", "GateOptions"]

_VERSION = re.compile(r"\d+\.\d+(\.\d+)?([a-z]+\d*)?(\+[\w.]+)?")


@dataclass(frozen=True, kw_only=True)
class GateOptions(Options):
    """``opmatrix gate``: the release gate; exit 0 pass, 1 blocked, 2 invalid input."""

    verb: ClassVar[str] = "gate"
    summary: ClassVar[str] = "release gate: exit 0 pass, 1 blocked, 2 invalid input"

    matrix: str | None = option(None, help="the release's matrix (may be omitted when --records / --compat are given)")
    contract: str = option(help="the release contract (YAML) the evidence is judged against")
    baseline: str | None = option(None, help="previous release's matrix")
    junit: str | None = option(None, metavar="FILE", help="write JUnit XML")
    summary_file: str | None = option(None, flag="--summary", metavar="FILE", help="write a markdown summary")
    json: str | None = option(None, metavar="FILE", bare="-", help="write the result as JSON (- or no value = stdout)")
    today: str | None = option(None, help="evaluate waiver expiry as of this date (YYYY-MM-DD; default: today in UTC)")
    records: str | None = option(None, metavar="DIR", help="level 6: performance records of this release (opmatrix bench)")
    baseline_records: str | None = option(None, metavar="DIR",
                                          help="level 6: the previous release's performance records")
    compat: str | None = option(None, metavar="FILE", help="level 7: compat report (opmatrix compat)")
    allow_unsealed: bool = option(False, help="judge a matrix without an integrity block (refused otherwise); "
                                  "the verdict says so")


@dataclass(frozen=True, kw_only=True)
class CompatOptions(Options):
    """``opmatrix compat``: level 7, probe the op set under each promised torch version."""

    verb: ClassVar[str] = "compat"
    summary: ClassVar[str] = "level 7: probe the op set under each promised torch version"

    backend: str = option("cpu", help="the backend to probe under each version (a built-in name, "
                          "package.module:attr or privateuse1:package.module; default cpu)")
    generation: str | None = option(None, help="device generation (refaccel: g1 or g2); the report records the "
                                   "generation its matrices were probed on")
    torch: tuple[str, ...] = option(help="torch versions, e.g. 2.9.0,2.13.0")
    ops: tuple[str, ...] = option(("add", "mul", "mm", "softmax"),
                                  help="comma-separated OpInfo names probed under each version")
    timeout: float = option(600.0, above=0, unit="seconds", help="deadline in seconds for each step of a version's run")
    out: str = option(help="output directory (compat.yaml, one matrix per version)")

    def check(self) -> None:
        for version in self.torch:
            if not _VERSION.fullmatch(version):
                raise UsageError(f"--torch: {version!r} is not a torch version; give versions like 2.9.0,2.13.0")

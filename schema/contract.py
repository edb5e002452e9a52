"""Contracts and waivers: what a vendor promises for a release, and the accepted exceptions.

A contract promises a support level (0-7, docs/levels.md#support-levels-0-7) and says what each level requires::

    schema_version: 1
    release: "2.1"
    backend: refaccel
    generation: g2
    level: 2
    requirements:
    - level: 0
      checks: [import, driver, enumerate]
    - level: 2
      operators:
      - ops: ["aten.add.Tensor", "aten.mm.*"]
        dtypes: [float32, bfloat16]
        worst_path: composite
        autograd: true

The gate (``opmatrix.ci``) evaluates each requirement against a matrix: pass, fail, waived, or
unknown. Requirements of levels it cannot evaluate yet are ``unknown`` and fail when promised.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from .base import Model, Name, RankRange, Text
from .distributed import DistributedRequirement
from .enums import Accumulation, DType, ExecPath, FallbackPolicy, FaultScope, FlakyPolicy, Layout, Mode
from .perf import CompatRequirement, PerfRequirement
from .workloads import WorkloadRequirement

__all__ = ["Contract", "LevelRequirement", "OperatorRequirement", "ToleranceOverride", "Waiver", "WaiverMatch"]

#: a support level, 0-7 (docs/levels.md#support-levels-0-7)
Level = Annotated[int, Field(ge=0, le=7)]


def _calendar_date(value: Any) -> Any:
    """A date written as a date (``2027-06-30``), never a number read as a Unix time."""
    if isinstance(value, dt.datetime):
        raise ValueError(f"{value.isoformat()} is a time, not a date; write the day only, YYYY-MM-DD")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError("not a calendar date: write YYYY-MM-DD (a real day)") from None
    raise ValueError("not a date: write YYYY-MM-DD (a number is not read as a Unix time)")


#: a calendar date: YAML's date or a YYYY-MM-DD string; numbers and times are refused
CalendarDate = Annotated[dt.date, BeforeValidator(_calendar_date)]

#: fields that select what a requirement judges: an empty list there selects nothing, which would
#: make the requirement pass on no evidence (a contract error, not a vacuous pass)
_SELECTING: dict[str, tuple[str, ...]] = {
    "level": ("checks", "operators", "workloads"),
    "operators": ("ops", "dtypes", "layouts"),
    "workloads": ("names", "dtypes", "steps"),
    "distributed": ("collectives", "dtypes", "world_sizes"),
    "perf": ("records",),
    "compat": ("torch",),
}


def _non_finite(data: Any, where: str) -> list[str]:
    """Paths of non-finite numbers (``1e309`` overflows to inf) anywhere in ``data``."""
    if isinstance(data, float) and not math.isfinite(data):
        return [f"{where or '<document>'}: {data!r} is not a finite number (a literal like 1e309 overflows to "
                "infinity); write a finite value"]
    if isinstance(data, dict):
        return [m for k, v in data.items() for m in _non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(data, list):
        return [m for i, v in enumerate(data) for m in _non_finite(v, f"{where}[{i}]")]
    return []


def _empty_selections(data: Any) -> list[str]:
    """Paths of selecting lists written empty inside ``requirements``."""
    out: list[str] = []

    def check(part: Any, kind: str, where: str) -> None:
        if not isinstance(part, dict):
            return
        for key in _SELECTING[kind]:
            if part.get(key) == []:
                out.append(f"{where}.{key}: an empty list selects nothing, so the requirement could pass on no "
                           "evidence; name what it requires, or remove the field")

    requirements = data.get("requirements") if isinstance(data, dict) else None
    for i, req in enumerate(requirements if isinstance(requirements, list) else []):
        where = f"requirements[{i}]"
        check(req, "level", where)
        if not isinstance(req, dict):
            continue
        for kind in ("operators", "workloads"):
            parts = req.get(kind)
            for j, part in enumerate(parts if isinstance(parts, list) else []):
                check(part, kind, f"{where}.{kind}[{j}]")
        for kind in ("distributed", "perf", "compat"):
            check(req.get(kind), kind, f"{where}.{kind}")
    return out


class OperatorRequirement(Model):
    """Operators that must run for the given dtypes / ranks / layouts no worse than ``worst_path``.

    ``ops`` holds fnmatch patterns over overload names (``aten.softmax.*``) or named sets
    (``tag:core`` for PyTorch's ``core`` ATen tag, as recorded in the matrix's op source).
    """

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    ops: list[Name] = Field(min_length=1)
    dtypes: list[DType] = Field(min_length=1)
    ranks: RankRange | None = None
    layouts: list[Layout] = Field(default_factory=lambda: [Layout.contiguous], min_length=1)
    mode: Mode = Mode.eager
    worst_path: ExecPath = ExecPath.composite
    autograd: bool = False
    compile: bool = False
    fallback: FallbackPolicy | None = Field(default=None, description="overrides the contract's policy")
    dynamic_shapes: bool = Field(default=False, description="with compile: the dynamic-shape compiled cells (probed "
                                 "once per op and dtype, dynamic=True at two sizes) must exist and pass too")
    accumulation: Accumulation | None = Field(default=None, description="the accumulation mode the low-precision "
                                              "dtypes' cells must show (numerics.accumulation), e.g. float32")
    min_pass_ratio: float = Field(default=1.0, gt=0, le=1, description="samples passed / probed that a cell needs "
                                  "(above 0: a ratio of 0 would accept a cell none of whose samples passed)")
    conditions: dict[str, str] = Field(
        default_factory=dict,
        description="judge only the conditional groups compatible with these argument features, e.g. "
        "dim: last (default: every group, so the worst one decides)",
    )
    name: Name | None = None


class LevelRequirement(Model):
    """What one support level requires."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    level: Level
    checks: list[Name] = Field(default_factory=list, description="runtime checks by name (levels 0-1)")
    operators: list[OperatorRequirement] = Field(default_factory=list)
    workloads: list[WorkloadRequirement | str] = Field(
        default_factory=list, description="levels 3/4: workload requirements (a bare name: it must run, eager float32)"
    )
    distributed: DistributedRequirement | None = Field(default=None, description="level 5: distributed cases")
    perf: PerfRequirement | None = Field(default=None, description="level 6: records vs the baseline's")
    compat: CompatRequirement | None = Field(default=None, description="level 7: the promised version window")
    max_fault_scope: FaultScope | None = Field(
        default=None, description="the widest scope a fault of this level's operators may reach (operation, stream, ...)"
    )
    description: Text | None = None


class ToleranceOverride(Model):
    """Per-op tolerance a contract accepts instead of the dtype default."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    op: Name
    dtypes: list[DType] = Field(default_factory=list)
    atol: float = Field(ge=0, allow_inf_nan=False)
    rtol: float = Field(ge=0, allow_inf_nan=False)


class WaiverMatch(Model):
    """Which cells a waiver covers; an absent field matches anything."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    op: Name = Field(description="fnmatch pattern over overload names")
    dtype: DType | None = None
    rank: int | None = None
    layout: Layout | None = None
    path: ExecPath | None = None
    mode: Mode | None = None


class Waiver(Model):
    """An accepted exception with an owner and an expiry date."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    match: WaiverMatch
    reason: Text = Field(min_length=1)
    owner: Name = Field(min_length=1)
    expires: CalendarDate

    def expired(self, today: dt.date) -> bool:
        """A waiver is valid through its expiry date and expired the day after."""
        return today > self.expires


class Contract(Model):
    """A release's promised support level and its requirements."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    schema_version: Literal[1] = 1
    release: Name = Field(min_length=1)
    backend: Name = Field(min_length=1)
    generation: Name | None = None
    level: Level = Field(description="the promised support level")
    requirements: list[LevelRequirement] = Field(default_factory=list)
    fallback: FallbackPolicy = FallbackPolicy.allowed
    flaky: FlakyPolicy = FlakyPolicy.block
    tolerances: list[ToleranceOverride] = Field(default_factory=list)
    waivers: list[Waiver] = Field(default_factory=list)
    min_cells_ratio: float = Field(default=0.95, ge=0, le=1, description="vs the baseline's cell count")
    judged_levels: list[Level] | None = Field(
        default=None, min_length=1, description="judge only these levels (e.g. [5] for a distributed add-on contract whose lower "
        "levels the release's main contract judges); default: every level up to `level`",
    )

    @model_validator(mode="before")
    @classmethod
    def _means_something(cls, data: Any) -> Any:
        """Numbers that overflowed to infinity and selections written empty are contract errors."""
        problems = _non_finite(data, "") + _empty_selections(data)
        if problems:
            raise ValueError("\n".join(problems))
        return data

    @model_validator(mode="after")
    def _levels_unique(self) -> Contract:
        levels = [r.level for r in self.requirements]
        dup = sorted({lvl for lvl in levels if levels.count(lvl) > 1})
        if dup:
            raise ValueError(f"level {dup[0]} is listed twice in requirements; merge the two lists")
        if self.judged_levels is not None and len(set(self.judged_levels)) != len(self.judged_levels):
            raise ValueError(f"judged_levels {self.judged_levels} lists a level twice; list each once")
        return self

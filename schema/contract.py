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
from typing import Literal

from pydantic import Field, model_validator

from .base import Model, Name, RankRange, Text
from .distributed import DistributedRequirement
from .enums import DType, ExecPath, FallbackPolicy, FlakyPolicy, Layout, Mode
from .perf import CompatRequirement, PerfRequirement
from .workloads import WorkloadRequirement

__all__ = ["Contract", "LevelRequirement", "OperatorRequirement", "ToleranceOverride", "Waiver", "WaiverMatch"]


class OperatorRequirement(Model):
    """Operators that must run for the given dtypes / ranks / layouts no worse than ``worst_path``.

    ``ops`` holds fnmatch patterns over overload names (``aten.softmax.*``) or named sets
    (``tag:core`` for PyTorch's ``core`` ATen tag, as recorded in the matrix's op source).
    """

    ops: list[Name] = Field(min_length=1)
    dtypes: list[DType] = Field(min_length=1)
    ranks: RankRange | None = None
    layouts: list[Layout] = Field(default_factory=lambda: [Layout.contiguous])
    mode: Mode = Mode.eager
    worst_path: ExecPath = ExecPath.composite
    autograd: bool = False
    compile: bool = False
    fallback: FallbackPolicy | None = Field(default=None, description="overrides the contract's policy")
    min_pass_ratio: float = Field(default=1.0, ge=0, le=1, description="samples passed / probed")
    conditions: dict[str, str] = Field(
        default_factory=dict,
        description="judge only the conditional groups compatible with these argument features, e.g. "
        "dim: last (default: every group, so the worst one decides)",
    )
    name: Name | None = None


class LevelRequirement(Model):
    """What one support level requires."""

    level: int = Field(ge=0, le=7)
    checks: list[Name] = Field(default_factory=list, description="runtime checks by name (levels 0-1)")
    operators: list[OperatorRequirement] = Field(default_factory=list)
    workloads: list[WorkloadRequirement | str] = Field(
        default_factory=list, description="levels 3/4: workload requirements (a bare name: it must run, eager float32)"
    )
    distributed: DistributedRequirement | None = Field(default=None, description="level 5: distributed cases")
    perf: PerfRequirement | None = Field(default=None, description="level 6: records vs the baseline's")
    compat: CompatRequirement | None = Field(default=None, description="level 7: the promised version window")
    description: Text | None = None


class ToleranceOverride(Model):
    """Per-op tolerance a contract accepts instead of the dtype default."""

    op: Name
    dtypes: list[DType] = Field(default_factory=list)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class WaiverMatch(Model):
    """Which cells a waiver covers; an absent field matches anything."""

    op: Name = Field(description="fnmatch pattern over overload names")
    dtype: DType | None = None
    rank: int | None = None
    layout: Layout | None = None
    path: ExecPath | None = None
    mode: Mode | None = None


class Waiver(Model):
    """An accepted exception with an owner and an expiry date."""

    match: WaiverMatch
    reason: Text = Field(min_length=1)
    owner: Name = Field(min_length=1)
    expires: dt.date

    def expired(self, today: dt.date) -> bool:
        """A waiver is valid through its expiry date and expired the day after."""
        return today > self.expires


class Contract(Model):
    """A release's promised support level and its requirements."""

    schema_version: Literal[1] = 1
    release: Name = Field(min_length=1)
    backend: Name = Field(min_length=1)
    generation: Name | None = None
    level: int = Field(ge=0, le=7, description="the promised support level")
    requirements: list[LevelRequirement] = Field(default_factory=list)
    fallback: FallbackPolicy = FallbackPolicy.allowed
    flaky: FlakyPolicy = FlakyPolicy.block
    tolerances: list[ToleranceOverride] = Field(default_factory=list)
    waivers: list[Waiver] = Field(default_factory=list)
    min_cells_ratio: float = Field(default=0.95, ge=0, le=1, description="vs the baseline's cell count")
    judged_levels: list[int] | None = Field(
        default=None, description="judge only these levels (e.g. [5] for a distributed add-on contract whose lower "
        "levels the release's main contract judges); default: every level up to `level`",
    )

    @model_validator(mode="after")
    def _levels_unique(self) -> Contract:
        levels = [r.level for r in self.requirements]
        dup = sorted({lvl for lvl in levels if levels.count(lvl) > 1})
        if dup:
            raise ValueError(f"level {dup[0]} is listed twice in requirements; merge the two lists")
        return self

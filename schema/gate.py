"""What the gate decided: frozen, JSON-serialisable models of a verdict and its reasons.

A :class:`GateResult` is the single product of ``opmatrix.ci.evaluate_contract``; the JUnit
XML, the markdown summary, the JSON output and the printed verdict are all renderings of it::

    result = evaluate_contract(matrix, contract)
    result.verdict            # Verdict.blocked
    result.blocking[0]        # "L2 matmul: aten.mm.default bfloat16 rank 2 contiguous eager: ..."
    result.model_dump_json()  # what `opmatrix gate --json` prints

Every requirement of the contract becomes one :class:`RequirementResult` carrying the cells that
decided it (:class:`CellRef`), so a blocked release always names what to fix.
"""

from __future__ import annotations

from pydantic import Field

from .base import Model
from .contract import OperatorRequirement, WaiverMatch
from .enums import DType, ExecPath, Layout, Mode, Outcome, TextEnum
from .exitcode import ExitCode

__all__ = [
    "BaselineChange",
    "CellRef",
    "CellStatus",
    "GateCheck",
    "GateResult",
    "Improvement",
    "RequirementResult",
    "Status",
    "Verdict",
    "WaiverReport",
    "WaiverState",
]


class Status(TextEnum):
    """The outcome of one requirement (or one gate-level check)."""

    passed = "pass"
    failed = "fail"
    waived = "waived"  # failed only in cells an active waiver covers
    unknown = "unknown"  # cannot be evaluated from the matrix: fails when promised


class CellStatus(TextEnum):
    """How one deciding cell was judged."""

    passed = "pass"
    failed = "fail"
    waived = "waived"


class Verdict(TextEnum):
    """May the release ship?"""

    passed = "pass"
    blocked = "blocked"


class CellRef(Model):
    """One cell (or a required cell that was never probed) and why it was judged as it was.

    ``rank`` / ``layout`` / ``dtype`` are ``None`` only for required cells that have no probed
    counterpart at all (e.g. an op pattern that matched no probed operator).
    """

    op: str
    dtype: DType | None = None
    rank: int | None = None
    layout: Layout | None = None
    mode: Mode = Mode.eager
    conditions: dict[str, str] = Field(default_factory=dict)
    path: ExecPath | None = None
    outcome: Outcome | None = None
    status: CellStatus = CellStatus.passed
    reason: str = ""
    waiver: int | None = Field(default=None, description="index of the waiver in the contract's list")
    missing: bool = Field(default=False, description="no evidence for it (a required cell never probed, a check that "
                                                     "did not run or whose result is unknown): never waived")

    @property
    def probed(self) -> bool:
        """Whether a probed cell was judged (a required cell that was never probed has no outcome)."""
        return self.outcome is not None

    def label(self) -> str:
        """``aten.mm.default bfloat16 rank 2 contiguous eager [dim=last]``."""
        parts = [self.op]
        if self.dtype is not None:
            parts.append(str(self.dtype))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.layout is not None:
            parts.append(str(self.layout))
        if not self.op.startswith(("check:", "distributed:")):  # runtime checks and distributed cases have no mode  # runtime checks have no mode
            parts.append(str(self.mode))
        if self.conditions:
            parts.append("[" + ", ".join(f"{k}={v}" for k, v in sorted(self.conditions.items())) + "]")
        return " ".join(parts)

    def line(self) -> str:
        """The label followed by the reason, one line."""
        return f"{self.label()}: {self.reason}" if self.reason else self.label()


class RequirementResult(Model):
    """One requirement of the contract, judged."""

    id: str = Field(description="stable id, e.g. L2.matmul or L0.check.import")
    level: int
    kind: str = Field(description="check, operators, workload or level")
    title: str
    status: Status
    blocking: bool = Field(description="its level is promised, so a fail/unknown blocks")
    message: str
    cells: list[CellRef] = Field(default_factory=list, description="the cells that decided it")
    checked: int = 0
    failed: int = 0
    waived: int = 0
    not_probed: int = 0

    @property
    def blocks(self) -> bool:
        """Whether this requirement blocks the release."""
        return self.blocking and self.status in (Status.failed, Status.unknown)


class GateCheck(Model):
    """A gate-level check that is not a contract requirement (cell count, identity, waivers)."""

    name: str
    status: Status
    message: str

    @property
    def blocks(self) -> bool:
        """Whether this check blocks the release."""
        return self.status in (Status.failed, Status.unknown)


class BaselineChange(Model):
    """A cell that got worse (a regression) or better than in the baseline matrix."""

    cell: CellRef = Field(description="the cell now; status says failed / waived for regressions")
    before_path: ExecPath
    before_outcome: Outcome
    what: str = Field(description="what changed, e.g. 'path native -> fallback'")


class Improvement(Model):
    """Cells that work but that no requirement claims, as the contract lines that would claim them."""

    requirement: OperatorRequirement
    cells: int


class WaiverState(TextEnum):
    """Whether a waiver did anything."""

    active = "active"  # waived at least one finding
    stale = "stale"  # valid but matched nothing: remove it
    expired = "expired"  # past its date: blocks until renewed or removed


class WaiverReport(Model):
    """One waiver of the contract and what it did."""

    index: int
    match: WaiverMatch
    reason: str
    owner: str
    expires: str
    state: WaiverState
    matched: int = Field(description="findings it waived (or would have, when expired)")


class GateResult(Model):
    """The verdict and every reason for it."""

    verdict: Verdict
    backend: str
    generation: str | None
    release: str
    promised_level: int
    today: str
    cell_count: int
    matrix_digest: str | None = Field(default=None, description="content digest of the matrix judged (Matrix.digest)")
    baseline_cell_count: int | None = None
    blocking: list[str] = Field(default_factory=list, description="readable reasons, one per line")
    requirements: list[RequirementResult] = Field(default_factory=list)
    checks: list[GateCheck] = Field(default_factory=list)
    regressions: list[BaselineChange] = Field(default_factory=list)
    better: list[BaselineChange] = Field(default_factory=list)
    missing: list[CellRef] = Field(default_factory=list, description="in the baseline, not probed now")
    improvements: list[Improvement] = Field(default_factory=list)
    improvement_yaml: str = Field(default="", description="contract lines that would claim the improvements")
    waivers: list[WaiverReport] = Field(default_factory=list)
    flaky: list[CellRef] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the release may ship."""
        return self.verdict is Verdict.passed

    @property
    def exit_code(self) -> ExitCode:
        """The gate's exit status: OK when the release may ship, else BLOCKED."""
        return ExitCode.OK if self.passed else ExitCode.BLOCKED

    def contradictions(self) -> str | None:
        """How the verdict disagrees with the reasons it lists (an edited result), or None. The
        gate blocks exactly when it lists blocking reasons, and a pass has no requirement or
        gate check that blocks."""
        blocks = [r.id for r in self.requirements if r.blocks] + [f"gate {c.name}" for c in self.checks if c.blocks]
        if self.passed and (self.blocking or blocks):
            return (f"the verdict is pass, yet it lists {len(self.blocking)} blocking reason(s)"
                    + (f" and blocking results ({', '.join(blocks[:5])})" if blocks else ""))
        if not self.passed and not self.blocking:
            return "the verdict is blocked, yet it lists no blocking reason"
        return None

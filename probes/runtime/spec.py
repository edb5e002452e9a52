"""What a runtime check is (:class:`CheckSpec`) and what it returns (:class:`Verdict`).

A check is a function of a :class:`~opmatrix.probes.runtime.context.Probe` that returns a
verdict; the catalog gives it a name, a support level, its bring-up stage (docs/levels.md#runtime-bring-up-order) and the
advice shown when it does not pass::

    def check_item(probe: Probe) -> Verdict:
        ...
        return passed("12 dtypes: .item() matches the host value")

Checks of kind ``worker`` run inside an initialised worker; checks of kind ``process`` run as a
case in a fresh child process (the fork / spawn suite, and provoked initialisation failures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from opmatrix.schema import ApiCoverage, CheckResult, DeviceInfo, Runtime, RuntimeCheck

if TYPE_CHECKING:
    from .context import Probe

__all__ = ["CheckSpec", "Facts", "Verdict", "failed", "not_applicable", "passed", "unknown"]

Scalar = str | int | float | bool | None


@dataclass
class Facts:
    """Runtime data a check discovered on the way (devices, claims, versions, API coverage)."""

    devices: list[DeviceInfo] = field(default_factory=list)
    claimed_dtypes: list[str] = field(default_factory=list)
    capabilities: dict[str, Scalar] = field(default_factory=dict)
    apis: list[ApiCoverage] = field(default_factory=list)

    def empty(self) -> bool:
        """Whether the check found nothing worth recording."""
        return not (self.devices or self.claimed_dtypes or self.capabilities or self.apis)

    def to_runtime(self) -> Runtime | None:
        """The facts as a (check-less) :class:`Runtime`, or None when there are none."""
        if self.empty():
            return None
        return Runtime(
            devices=self.devices,
            claimed_dtypes=sorted(set(self.claimed_dtypes)),  # type: ignore[arg-type]
            capabilities=dict(sorted(self.capabilities.items())),
            apis=self.apis,
        )


@dataclass
class Verdict:
    """One check's result with its evidence; ``advice`` overrides the catalog's default."""

    result: CheckResult
    evidence: str
    advice: str | None = None
    via: str | None = None
    facts: Facts = field(default_factory=Facts)


def passed(evidence: str, via: str | None = None) -> Verdict:
    """The check held; ``evidence`` says what was measured."""
    return Verdict(CheckResult.passed, evidence, via=via)


def failed(evidence: str, advice: str | None = None, via: str | None = None) -> Verdict:
    """The check did not hold; ``evidence`` names what differed."""
    return Verdict(CheckResult.failed, evidence, advice, via)


def not_applicable(evidence: str) -> Verdict:
    """The check does not apply to this backend (e.g. streams on the host, values on meta)."""
    return Verdict(CheckResult.not_applicable, evidence)


def unknown(evidence: str, advice: str | None = None, via: str | None = None) -> Verdict:
    """The check could not decide (the API to test it is not served, or it could not run)."""
    return Verdict(CheckResult.unknown, evidence, advice, via)


Kind = Literal["worker", "process"]


@dataclass(frozen=True)
class CheckSpec:
    """A named check: level, bring-up stage, how it is isolated, and the default advice."""

    name: str
    level: int
    stage: int
    title: str
    kind: Kind
    advice: str
    run: Callable[[Probe], Verdict] | None = None

    def record(self, verdict: Verdict) -> RuntimeCheck:
        """The schema record for ``verdict``; advice only when the check did not pass."""
        advice = None
        if verdict.result in (CheckResult.failed, CheckResult.unknown):
            advice = verdict.advice or self.advice
        return RuntimeCheck(
            name=self.name,
            level=self.level,
            result=verdict.result,
            evidence=_clip(verdict.evidence),
            advice=advice,
            via=verdict.via,
        )


def _clip(text: str, limit: int = 1500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

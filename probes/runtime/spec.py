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

from opmatrix.schema import ApiCoverage, CheckResult, DeviceCheck, DeviceInfo, Runtime, RuntimeCheck

if TYPE_CHECKING:
    from .context import Probe

__all__ = ["CheckSpec", "Facts", "Verdict", "failed", "not_applicable", "on_each_device", "passed", "unknown"]

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
    #: how each device of the run did, for a check that ran on each (:func:`on_each_device`)
    devices: list[DeviceCheck] = field(default_factory=list)


#: worst first: one device failing fails the check (a bad chip is a finding), one that could not
#: decide leaves it unknown
_WORST = (CheckResult.failed, CheckResult.unknown, CheckResult.passed, CheckResult.not_applicable)
_SAYS = {CheckResult.failed: "fails", CheckResult.unknown: "could not decide", CheckResult.passed: "passes",
         CheckResult.not_applicable: "does not apply"}


def on_each_device(verdicts: list[tuple[str, str | None, Verdict]]) -> Verdict:
    """One verdict for a check run on each device (``(device, uuid, verdict)``, as torch names the
    device): the worst result; the evidence names each device that did not do as well as the
    best, with its identity, and says how the others did."""
    worst = min((v for _, _, v in verdicts), key=lambda v: _WORST.index(v.result))
    results = {v.result for _, _, v in verdicts}
    names = [d for d, _, _ in verdicts]
    if len(results) == 1:
        evidence = f"on each of {len(names)} devices ({', '.join(names)}); {names[0]}: {worst.evidence}"
    else:
        ranked = sorted(verdicts, key=lambda item: _WORST.index(item[2].result))
        evidence = "; ".join(
            f"{d}{f' ({u})' if u else ''} {_SAYS[v.result]}" + (f": {v.evidence}" if v.result is not CheckResult.passed else "")
            for d, u, v in ranked
        )
    facts = next((v.facts for _, _, v in verdicts if not v.facts.empty()), Facts())
    return Verdict(worst.result, evidence, worst.advice, worst.via, facts,
                   [DeviceCheck(device=d, uuid=u, result=v.result, evidence=_clip(v.evidence, 400)) for d, u, v in verdicts])


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

    @property
    def per_device(self) -> bool:
        """Whether the check exercises one device (stages 2-6: memory, copies, kernels, streams,
        statistics): a ``probe --devices`` run checks each of its devices."""
        return self.kind == "worker" and 2 <= self.stage <= 6

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
            devices=verdict.devices,
        )


def _clip(text: str, limit: int = 1500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

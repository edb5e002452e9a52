"""``opmatrix doctor --backend NAME``: the level 0/1 checks in bring-up order, as a readable table.

Exit codes: 0 when no level 0/1 check fails (checks that could not be decided are listed as
``unknown`` with what to do), 1 when any check fails, 2 on invalid input (unknown backend)::

    $ opmatrix doctor --backend refaccel
    stage 1: enumerate and identify a device
      check             lvl  result  evidence                                    next step
      import            0    pass    import opmatrix.backend.refaccel: 0.03 s
      ...
"""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

from opmatrix.probes.options import DoctorOptions
from opmatrix.schema import CheckResult, ExitCode, Runtime, RuntimeCheck

from .catalog import STAGES, by_name
from .execute import run_checks, runtime_from_records

if TYPE_CHECKING:
    from opmatrix.probes.runner.calibrate import Calibration
    from opmatrix.schema.distributed import Distributed

__all__ = ["DoctorReport", "doctor", "exit_code", "render", "show"]

_EVIDENCE_WIDTH = 78


def exit_code(runtime: Runtime) -> ExitCode:
    """1 when any level 0/1 check failed, else 0."""
    failed = any(c.result is CheckResult.failed and c.level <= 1 for c in runtime.checks)
    return ExitCode.FAILED if failed else ExitCode.OK


def _cut(text: str, width: int, name: str | None = None) -> str:
    """``text`` whole when it fits; else its first whole words and where the rest is (``doctor
    --json``, the check ``name``), never a word cut in two."""
    if len(text) <= width:
        return text
    head = textwrap.shorten(text, width, placeholder="")
    return f"{head} ... (the rest: doctor --json, check {name})" if name else f"{head} ..."


def _row(check: RuntimeCheck, name_width: int) -> str:
    """The check's row; evidence longer than its column wraps onto indented lines, whole."""
    result = check.result.value if check.result is not CheckResult.failed else "FAIL"
    evidence = check.evidence + (f" [via {check.via}]" if check.via else "")
    lines = textwrap.wrap(evidence, _EVIDENCE_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
    line = f"  {check.name:<{name_width}}  {check.level:<3}  {result:<14}  {lines[0]}"
    if check.result in (CheckResult.failed, CheckResult.unknown) and check.advice:
        line = f"{line:<{name_width + 24 + _EVIDENCE_WIDTH}}  -> {check.advice}"
    indent = " " * (name_width + 24)
    return "\n".join([line.rstrip(), *(indent + more for more in lines[1:])])


def render(runtime: Runtime, title: str, out: TextIO) -> None:
    """Print the doctor table: stages in bring-up order, devices, API coverage, a verdict line."""
    width = max((len(c.name) for c in runtime.checks), default=10)
    print(title, file=out)
    stage = None
    for check in runtime.checks:
        try:
            this = by_name(check.name).stage
        except KeyError:
            this = 0
        if this != stage:
            stage = this
            print(f"\nstage {stage}: {STAGES.get(stage, 'other')}", file=out)
            header = f"  {'check':<{width}}  {'lvl':<3}  {'result':<14}  {'evidence':<{_EVIDENCE_WIDTH}}  next step"
            print(header, file=out)
        print(_row(check, width), file=out)
    if runtime.devices:
        print("\ndevices:", file=out)
        for dev in runtime.devices:
            props = ", ".join(f"{k} {v}" for k, v in sorted(dev.properties.items()))
            print(f"  #{dev.index} {dev.name}  id {dev.uuid or '-'}  {props}", file=out)
    versions = {k: v for k, v in runtime.capabilities.items() if k in ("driver", "firmware", "isa", "backend_version")}
    if versions:
        print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), file=out)
    if runtime.claimed_dtypes:
        print("claimed dtypes: " + ", ".join(d.value for d in runtime.claimed_dtypes), file=out)
    if runtime.apis:
        print("\ngeneric API coverage (generic / own_module / none):", file=out)
        for api in runtime.apis:
            print(f"  {api.api:<40} {api.service.value:<11} {_cut(api.detail, 90)}", file=out)
    print("\n" + verdict_line(runtime), file=out)


def verdict_line(runtime: Runtime) -> str:
    """The last line: the levels' verdict and the checks that decide it."""
    counts = {r: sum(c.result is r for c in runtime.checks) for r in CheckResult}
    tally = ", ".join(f"{n} {r.value}" for r, n in counts.items() if n)
    failed = [c for c in runtime.checks if c.result is CheckResult.failed]
    if failed:
        names = "; ".join(f"{c.name}: {_cut(c.evidence, 120, c.name)}" for c in failed[:4])
        return f"levels 0-1: FAIL ({tally}) -- {names}"
    undecided = [c.name for c in runtime.checks if c.result is CheckResult.unknown]
    note = f"; undecided: {', '.join(undecided)}" if undecided else ""
    return f"levels 0-1: pass ({tally}){note}"


def _validate(spec: str, generation: str | None) -> bool | None:
    """Raise UsageError for a backend or generation that names nothing; the adapter's ``verified``.

    A built-in name without ``--generation`` is valid as it is: the parent then imports neither
    torch nor the backend (the checks run in child processes), which keeps doctor quick.
    """
    from opmatrix.backend.registry import BUILTIN, UnknownBackend, get_adapter
    from opmatrix.schema import UsageError

    if spec in BUILTIN and generation is None:
        verified = getattr(BUILTIN[spec], "verified", None)
        return verified if isinstance(verified, bool) else None
    try:
        adapter = get_adapter(spec, generation)
        if generation is not None:
            adapter.versions()  # adapters that know generations reject an unknown one here
    except UnknownBackend as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--backend {spec} --generation {generation}: {exc}") from None
    return bool(adapter.verified)


@dataclass(frozen=True)
class DoctorReport:
    """What ``doctor`` found: the level 0/1 runtime report (and, at ``--level 5``, the distributed suite)."""

    backend: str
    generation: str | None
    runtime: Runtime
    seconds: float
    #: the adapter's own word on whether it was verified on real hardware (None: it does not say)
    verified: bool | None
    level: int = 1
    distributed: Distributed | None = None
    #: what the deadlines were calibrated against at the start (docs/doctor.md#deadlines)
    calibration: Calibration | None = None

    @property
    def exit_code(self) -> ExitCode:
        """FAILED when a level 0/1 check (or, at level 5, a distributed case) fails, else OK."""
        if self.distributed is not None:
            from opmatrix.probes.distributed.hooks import distributed_failed

            if distributed_failed(self.distributed):
                return ExitCode.FAILED
        return exit_code(self.runtime)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object (its ``distributed`` key only at level 5)."""
        head = {"backend": self.backend, "generation": self.generation, "exit_code": int(self.exit_code)}
        if self.level >= 5:
            distributed = self.distributed.model_dump(mode="json") if self.distributed is not None else None
            return {**head, "runtime": self.runtime.model_dump(mode="json"), "distributed": distributed}
        body = {**head, "seconds": round(self.seconds, 1), "runtime": self.runtime.model_dump(mode="json")}
        cal = self.calibration
        if cal is not None:
            body["calibration"] = {**asdict(cal), "child_deadline": round(cal.child_deadline(), 1),
                                   "case_deadline": round(cal.case_deadline(), 1),
                                   "check_deadline": round(cal.check_deadline(), 1)}
        return body


def doctor(args: DoctorOptions) -> DoctorReport:
    """Run the level 0/1 checks against ``args.backend`` (at ``--level 5`` the distributed suite too)."""
    generation = args.generation
    verified = _validate(args.backend, generation)
    from opmatrix.probes.runner.calibrate import calibrate

    start = time.monotonic()
    cal = calibrate(args.backend, generation)  # deadlines measure the machine (docs/doctor.md#deadlines)
    runtime = runtime_from_records(run_checks(args.backend, generation, calibration=cal))
    seconds = time.monotonic() - start
    distributed = None
    if args.level >= 5:
        from opmatrix.probes.distributed.hooks import doctor_distributed

        distributed = doctor_distributed(args.backend, generation)
    return DoctorReport(backend=args.backend, generation=generation, runtime=runtime, seconds=seconds,
                        verified=verified, level=args.level, distributed=distributed, calibration=cal)


def show(report: DoctorReport, as_json: bool, out: TextIO) -> None:
    """Print ``report``: the table in bring-up order (and the level 5 part), or one JSON object."""
    if as_json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True), file=out)
        return
    runtime, gen = report.runtime, f" {report.generation}" if report.generation else ""
    if report.distributed is not None:
        render(runtime, f"opmatrix doctor: {report.backend}{gen}: {len(runtime.checks)} level 0/1 checks in "
               f"{report.seconds:.1f} s", out)
        from opmatrix.probes.distributed.hooks import render_doctor_distributed

        render_doctor_distributed(report.distributed, out)
        return
    note = "" if report.verified is not False else " (adapter unverified on real hardware)"
    title = (f"opmatrix doctor: {report.backend}{gen}{note}: {len(runtime.checks)} level 0/1 checks "
             f"in {report.seconds:.1f} s, in docs/levels.md bring-up order")
    cal = report.calibration
    if cal is not None:
        title += (f"\ndeadlines calibrated: {cal.describe()} -> a child {cal.child_deadline():.0f} s, "
                  f"a check {cal.check_deadline():.0f} s")
    render(runtime, title, out)

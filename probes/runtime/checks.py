"""Runtime checks as runner tasks of kind ``runtime``: one task per check, planned in bring-up order.

The runner (``opmatrix.probes.runner``) runs each task in a spawned worker whose adapter is
already set up, and calls :func:`handle`; process-suite checks start a fresh case host from there
(a worker that initialised the device must not fork)::

    tasks = plan_runtime_tasks("refaccel", "g2")
    tasks[0].id, tasks[0].payload     # 'runtime|import', {'check': 'import', 'level': 0, ...}
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict

from opmatrix.probes.runner import Skip, Task, WorkerContext
from opmatrix.probes.runner.calibrate import current
from opmatrix.schema import CheckResult, RuntimeCheck, RuntimeRecord
from opmatrix.schema.userref import child_env

from .catalog import CATALOG, by_name
from .context import Probe
from .discovery import check_driver, check_import
from .spec import CheckSpec, Facts, Verdict, failed, on_each_device
from .worker import MARK, make_record, run_check, task_id

__all__ = ["HANDLER", "RuntimeHandler", "RuntimePayload", "handle", "plan_runtime_tasks", "run_case_isolated"]

_PROBE_KEY = "opmatrix.runtime.probe"


class RuntimePayload(BaseModel):
    """A ``runtime`` task's payload: the check, its level, the backend spec it runs against."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str
    level: int = 0
    backend: str | None = None
    generation: str | None = None


def plan_runtime_tasks(adapter_spec: str, generation: str | None = None) -> list[Task]:
    """One runner task per runtime check, ordered as docs/levels.md#runtime-bring-up-order brings a runtime up."""
    return [
        Task(id=task_id(spec.name), kind="runtime", order=i,
             payload=RuntimePayload(check=spec.name, level=spec.level, backend=adapter_spec,
                                    generation=generation).model_dump())
        for i, spec in enumerate(CATALOG)
    ]


def isolated_deadline() -> float:
    """How long a process check waits for its case host: the case's own deadline (a retry
    included), plus the host's start-up and preflight, all calibrated at run start."""
    cal = current()
    return 2 * cal.case_deadline() + 60.0 + cal.child_deadline()


def run_case_isolated(spec: str, generation: str | None, name: str) -> Verdict:
    """Run one process-suite case in a fresh case host (never forked from this process)."""
    current(spec, generation)  # the run's calibration (measured here once if the run has none)
    limit = isolated_deadline()
    cmd = [sys.executable, "-m", "opmatrix.probes.runtime.casehost", "--backend", spec, "--cases", name, "--jobs", "1"]
    if generation:
        cmd += ["--generation", generation]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, check=False, env=child_env())
    except subprocess.TimeoutExpired:
        return failed(f"the case host did not finish within {limit:.0f} s ({current().describe()})")
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            rec = RuntimeRecord.model_validate(json.loads(line[len(MARK):])["record"])
            check = rec.check
            facts = Facts(capabilities=dict(rec.runtime.capabilities)) if rec.runtime else Facts()
            return Verdict(check.result, check.evidence, check.advice, check.via, facts)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])[-400:]
    return failed(f"the case host (exit {done.returncode}) reported nothing: {tail}")


class RuntimeHandler:
    """Runtime check tasks (payload ``{"check", "level", "backend", "generation"}``)."""

    def handle(self, ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
               skip_rest: Skip | None) -> RuntimeRecord:
        return handle(ctx, task, progress, skip, skip_rest)

    warm: str | None = None

    def unit_timeout(self, task: Task, unit: str, timeout: float) -> float:
        """A process check waits for its case host, which has a deadline of its own (a hang there is
        the check's finding, reported by the check): the runner waits longer than that, so that a
        case host slow to import torch on a busy machine is not killed first and read as ``hung``."""
        if by_name(RuntimePayload.model_validate(task.payload).check).kind == "process":
            return max(timeout, isolated_deadline() + 30.0)
        return timeout

    def fault_record(self, task: Task, skip: Skip) -> RuntimeRecord:
        """The check faulted its worker every time: an ``unknown`` check saying how."""
        text = f"{skip.outcome}: {skip.message}".strip()
        p = RuntimePayload.model_validate(task.payload)
        check = RuntimeCheck(name=p.check, level=p.level, result=CheckResult.unknown, evidence=text[-2000:])
        return RuntimeRecord(task=task.id, check=check)


def handle(
    ctx: WorkerContext,
    task: Task,
    progress: Callable[[str], None],
    skip: Mapping[str, Skip],
    skip_rest: Skip | None,
) -> RuntimeRecord:
    """Run the runtime check ``task.payload['check']`` in a runner worker (``ctx.adapter`` is set up)."""
    p = RuntimePayload.model_validate(task.payload)
    name, spec = p.check, by_name(p.check)
    backend, generation = p.backend or ctx.adapter.name, p.generation
    fault = skip.get(name) or skip_rest
    if fault is not None:
        signal = f" ({fault.signal})" if fault.signal else ""
        return make_record(spec, failed(f"{fault.outcome}: {fault.message}{signal}"))
    progress(name)
    if spec.kind == "process":
        verdict = run_case_isolated(backend, generation, name)
    elif name in ("import", "driver"):
        verdict = check_import(ctx.adapter) if name == "import" else check_driver(ctx.adapter)
        verdict.evidence += " (the runner's worker had set the backend up already)"
    elif spec.per_device and len(ctx.devices) > 1:
        verdict = _on_each_device(ctx, spec, backend, generation, progress, skip)
    else:
        verdict = run_check(spec, _probe(ctx, backend, generation))
    return make_record(spec, verdict, ctx.adapter.evidence_key())


def _probe(ctx: WorkerContext, backend: str, generation: str | None) -> Probe:
    """The worker's probe of the device its adapter has selected (one per device, kept)."""
    key = f"{_PROBE_KEY}@{ctx.adapter.device_index}"
    probe = ctx.cache.get(key)
    if probe is None:
        probe = ctx.cache[key] = Probe.from_adapter(ctx.adapter, backend, generation)
    assert isinstance(probe, Probe)
    return probe


def _on_each_device(ctx: WorkerContext, spec: CheckSpec, backend: str, generation: str | None,
                    progress: Callable[[str], None], skip: Mapping[str, Skip]) -> Verdict:
    """Run a per-device check on each device of the run (``--devices``), selected here, in the
    worker: each device is a unit (``allocation@1``), so a crash or hang on one is blamed on that
    device; the worker's own device is selected again afterwards."""
    adapter = ctx.adapter
    uuids = {d.index: d.uuid for d in adapter.devices()}
    mine = adapter.device_index
    verdicts: list[tuple[str, str | None, Verdict]] = []
    try:
        for index in ctx.devices:
            unit = f"{spec.name}@{index}"
            name = str(adapter.device(index))
            fault = skip.get(unit)
            if fault is not None:
                signal = f" ({fault.signal})" if fault.signal else ""
                verdicts.append((name, uuids.get(index), failed(f"{fault.outcome}: {fault.message}{signal}")))
                continue
            progress(unit)
            adapter.select_device(index)
            verdicts.append((name, uuids.get(index), run_check(spec, _probe(ctx, backend, generation))))
    finally:
        adapter.select_device(mine)
    return on_each_device(verdicts)


HANDLER = RuntimeHandler()

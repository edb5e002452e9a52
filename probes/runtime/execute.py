"""Run the runtime checks in isolated processes and turn their records into the matrix section.

Two children run at once: a :mod:`.worker` for the in-process checks (replaced after a crash or
a hang, which is blamed on the check it had announced) and a :mod:`.casehost` for the process
suite. Deadlines are calibrated first (:mod:`opmatrix.probes.runner.calibrate`); a check that runs
past its deadline is retried once in a fresh worker, and a second timeout on a machine too loaded
to judge it is ``unknown``. Records arrive as they finish; the result is in catalog (bring-up) order::

    records = run_checks("refaccel", "g2")
    runtime = runtime_from_records(records)       # devices, claimed dtypes, capabilities, checks, apis
    runtime.check("fork_after_init").result       # CheckResult.passed
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from opmatrix.probes.runner.calibrate import Calibration, calibrate
from opmatrix.schema import ApiCoverage, DeviceInfo, Runtime, RuntimeCheck, RuntimeRecord
from opmatrix.schema.enums import DTYPES
from opmatrix.schema.userref import child_env

from .catalog import CATALOG, by_name
from .children import describe_exit
from .spec import Verdict, failed, unknown
from .worker import MARK, POISONED_EXIT, make_record

__all__ = ["collect_runtime", "run_checks", "runtime_from_records"]

#: worker replacements before the remaining checks are given up as unknown
MAX_RESTARTS = 3


@dataclass
class _Child:
    """One running child process and what it has said so far."""

    kind: str
    proc: subprocess.Popen[bytes]
    stderr: IO[bytes]
    todo: list[str]
    current: str | None = None
    since: float = field(default_factory=time.monotonic)
    buffer: bytes = b""

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()
        return " | ".join(text.splitlines()[-3:])[-400:]


def _launch(kind: str, spec: str, generation: str | None, names: Sequence[str], cal: Calibration) -> _Child:
    module = "worker" if kind == "worker" else "casehost"
    flag = "--checks" if kind == "worker" else "--cases"
    cmd = [sys.executable, "-m", f"opmatrix.probes.runtime.{module}", "--backend", spec, flag, ",".join(names)]
    if generation:
        cmd += ["--generation", generation]
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                            env=child_env(cal.to_env()))
    return _Child(kind, proc, stderr, list(names))


def _lines(child: _Child, chunk: bytes) -> list[str]:
    child.buffer += chunk
    *lines, child.buffer = child.buffer.split(b"\n")
    return [ln.decode(errors="replace")[len(MARK):] for ln in lines if ln.startswith(MARK.encode())]


def _consume(child: _Child, chunk: bytes, record: Callable[[RuntimeRecord], None]) -> None:
    """Apply the protocol lines in ``chunk``: a start announces the check now running."""
    import json

    for line in _lines(child, chunk):
        event = json.loads(line)
        if event["event"] == "start":
            child.current, child.since = event["check"], time.monotonic()
            continue
        rec = RuntimeRecord.model_validate(event["record"])
        record(rec)
        child.current = None
        if rec.check.name in child.todo:
            child.todo.remove(rec.check.name)


def _drain(child: _Child, record: Callable[[RuntimeRecord], None]) -> None:
    """Read what an exited child still had in its pipe (bounded: a straggler may hold it open)."""
    stdout = child.proc.stdout
    assert stdout is not None
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.1)
        if not ready:
            continue
        chunk = os.read(stdout.fileno(), 65536)
        if not chunk:
            return
        _consume(child, chunk, record)


def run_checks(
    spec: str,
    generation: str | None = None,
    names: Iterable[str] | None = None,
    on_record: Callable[[RuntimeRecord], None] | None = None,
    check_deadline: float | None = None,
    calibration: Calibration | None = None,
) -> list[RuntimeRecord]:
    """Run the named checks (default: all) against backend ``spec``; records in catalog order.

    ``check_deadline``: of one in-worker check (default: calibrated, as ``calibration`` is when not given)."""
    cal = calibration or calibrate(spec, generation)
    limit = cal.check_deadline() if check_deadline is None else check_deadline
    retried: set[str] = set()
    wanted = [s for s in CATALOG if names is None or s.name in set(names)]
    records: dict[str, RuntimeRecord] = {}

    def record(rec: RuntimeRecord) -> None:
        records[rec.check.name] = rec
        if on_record is not None:
            on_record(rec)

    children = []
    worker_names = [s.name for s in wanted if s.kind == "worker"]
    case_names = [s.name for s in wanted if s.kind == "process"]
    if worker_names:
        children.append(_launch("worker", spec, generation, worker_names, cal))
    if case_names:
        children.append(_launch("process", spec, generation, case_names, cal))
    restarts = 0
    while children:
        streams: dict[Any, _Child] = {child.proc.stdout: child for child in children}
        ready, _, _ = select.select(list(streams), [], [], 0.2)
        for stream in ready:
            child = streams[stream]
            _consume(child, os.read(stream.fileno(), 65536), record)  # type: ignore[union-attr]
        for child in list(children):
            # the case host announces no checks: its cases have deadlines of their own
            hung = child.kind == "worker" and child.current is not None and time.monotonic() - child.since > limit
            if child.proc.poll() is None and not hung:
                continue
            children.remove(child)
            rest = _child_ended(child, hung, limit, record, retried, cal)
            if rest and child.kind == "worker" and restarts < MAX_RESTARTS:
                restarts += 1
                children.append(_launch("worker", spec, generation, rest, cal))
            else:
                for name in rest:
                    record(make_record(by_name(name), _given_up(child.kind)))
    order = {s.name: i for i, s in enumerate(CATALOG)}
    return sorted(records.values(), key=lambda r: order.get(r.check.name, len(order)))


def _child_ended(child: _Child, hung: bool, limit: float, record: Callable[[RuntimeRecord], None],
                 retried: set[str], cal: Calibration) -> list[str]:
    """Reap a child that exited or hung; record the check it was running; the checks left to run
    (a check that hung for the first time is among them, first: it runs again in a fresh worker)."""
    if hung:
        child.proc.kill()
    child.proc.wait()
    if not hung:
        _drain(child, record)
    if not child.todo:
        return []
    rest = list(child.todo)
    if child.proc.returncode == POISONED_EXIT and child.current is None:
        return rest  # the worker reported the check that poisoned it and asked to be replaced
    blamed = child.current or child.todo[0]
    if hung and blamed not in retried:
        retried.add(blamed)
        return [blamed] + [n for n in rest if n != blamed]
    if hung:
        text = f"hung: no result within {limit:.0f} s (the worker was killed), again when retried in a fresh worker"
        why = cal.too_loaded()
        verdict = (unknown(f"{text}; {why}; {cal.deadline_note(limit)}", "re-run on a machine that is less loaded")
                   if why else failed(f"{text}; {cal.deadline_note(limit)}"))
    else:
        verdict = failed(f"crashed: the {child.kind} process ended ({describe_exit(child.proc.returncode)})"
                         f" during this check; stderr: {child.stderr_tail()}")
    record(make_record(by_name(blamed), verdict))
    rest.remove(blamed)
    return rest


def _given_up(kind: str) -> Verdict:
    return unknown(f"not run: the {kind} process failed repeatedly before reaching this check")


def runtime_from_records(records: Iterable[RuntimeRecord]) -> Runtime:
    """The matrix ``runtime`` section from journal records (any order; later records win)."""
    checks: dict[str, RuntimeCheck] = {}
    devices: dict[int, DeviceInfo] = {}
    apis: dict[str, ApiCoverage] = {}
    claimed: set[str] = set()
    capabilities: dict[str, str | int | float | bool | None] = {}
    for rec in records:
        checks[rec.check.name] = rec.check
        if rec.runtime is not None:
            devices.update({d.index: d for d in rec.runtime.devices})
            claimed.update(str(d) for d in rec.runtime.claimed_dtypes)
            capabilities.update(rec.runtime.capabilities)
            apis.update({a.api: a for a in rec.runtime.apis})
    order = {s.name: i for i, s in enumerate(CATALOG)}
    return Runtime(
        devices=[devices[i] for i in sorted(devices)],
        claimed_dtypes=[d for d in DTYPES if d in claimed],  # type: ignore[misc]
        capabilities=dict(sorted(capabilities.items())),
        checks=sorted(checks.values(), key=lambda c: (order.get(c.name, len(order)), c.name)),
        apis=sorted(apis.values(), key=lambda a: a.api),
    )


def collect_runtime(backend: str, generation: str | None = None,
                    on_record: Callable[[RuntimeRecord], None] | None = None) -> Runtime:
    """Run every runtime check against ``backend`` in isolated processes; the matrix section."""
    return runtime_from_records(run_checks(backend, generation, on_record=on_record))

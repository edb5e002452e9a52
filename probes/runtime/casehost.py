"""The host of the process suite: a fresh interpreter that imports torch but never initialises the
backend, and forks one process per case (in a process group of its own, with a deadline), so
every case starts from the state a fresh process would have::

    python -m opmatrix.probes.runtime.casehost --backend refaccel --cases fork_after_init,spawn --jobs 2
    @@opmatrix {"event": "done", "record": {"task": "runtime|fork_after_init", ...}}

A preflight child first initialises the backend once: when that fails every case is ``unknown``
(the ``driver`` check names the problem), except ``init_messages``, which provokes failures anyway.

Deadlines are calibrated at run start (:mod:`opmatrix.probes.runner.calibrate`): a case that runs
past one (its own, or one of its children's) is retried once in a fresh process; a second timeout
is a finding only where the machine is not too loaded to judge, else ``unknown`` with the times.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opmatrix.probes.runner.calibrate import Calibration, current
from opmatrix.schema import CheckResult

from . import children
from .catalog import by_name
from .children import describe_exit, run_forked
from .context import NO_VALUE_DEVICES
from .process import CASES, CaseEnv, device_type_of, no_runtime_verdict
from .spec import Facts, Verdict, failed, unknown
from .worker import emit, make_record

__all__ = ["case_deadline", "main", "run_cases"]


def case_deadline() -> float:
    """Deadline of one case process, calibrated (spawn-heavy cases start interpreters)."""
    return current().case_deadline()


@dataclass
class _Running:
    names: list[str]
    pid: int
    fd: int
    start: float
    attempt: int = 1
    data: bytes = b""


def _payload(verdict: Verdict) -> dict[str, object]:
    return {"result": verdict.result.value, "evidence": verdict.evidence, "advice": verdict.advice,
            "via": verdict.via, "capabilities": verdict.facts.capabilities}


def _start(env: CaseEnv, names: list[str], attempt: int = 1) -> _Running:
    """Fork a case process that runs the case function deciding ``names`` (one function); it
    reports the verdicts and the deadlines its children ran past."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setpgid(0, 0)
        timeouts = children.TIMED_OUT
        try:
            found = CASES[names[0]](env)
            verdicts = found if isinstance(found, dict) else {names[0]: found}
            payload = {name: _payload(v) for name, v in verdicts.items()}
        except BaseException as exc:  # noqa: BLE001 - the case process reports anything, then exits
            raised = failed(f"the case raised {type(exc).__name__}: {exc}")
            payload = {name: _payload(raised) for name in names}
            if "timed out" in str(exc):  # DataLoader(timeout=...) raises "DataLoader timed out after N seconds"
                timeouts.append(current().child_deadline())
        try:
            os.write(write_fd, json.dumps({"verdicts": payload, "timeouts": timeouts}).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    return _Running(names, pid, read_fd, time.monotonic(), attempt)


def _finish(run: _Running, status: int | None, deadline: float) -> tuple[dict[str, Verdict], list[float]]:
    """The verdicts of a case process that ended (or ran past ``deadline``: status None), and the
    deadlines it or its children ran past."""
    os.close(run.fd)
    try:
        os.killpg(run.pid, signal.SIGKILL)  # stragglers the case left behind (its own group only)
    except ProcessLookupError:
        pass
    if status is None:
        os.waitpid(run.pid, 0)
        hung = failed(f"the case did not finish within {deadline:.0f} s (hung; killed)")
        return dict.fromkeys(run.names, hung), [deadline]
    code = os.waitstatus_to_exitcode(status)
    try:
        sent = json.loads(run.data.decode())
        payload, timeouts = sent["verdicts"], [float(t) for t in sent["timeouts"]]
    except (ValueError, KeyError, TypeError):
        ended = failed(f"the case process ended ({describe_exit(code)}) without a result")
        return dict.fromkeys(run.names, ended), []
    out = {}
    for name in run.names:
        item = payload.get(name) or {"result": "fail", "evidence": "the case reported no verdict for this check"}
        facts = Facts(capabilities=dict(item.get("capabilities") or {}))
        out[name] = Verdict(CheckResult(item["result"]), item["evidence"], item.get("advice"), item.get("via"), facts)
    return out, timeouts


def _judged(verdicts: dict[str, Verdict], timeouts: list[float], cal: Calibration) -> dict[str, Verdict]:
    """Verdicts of a case that timed out on its retry too: a failure where the machine could judge
    it, else ``unknown`` with the measured times; every timeout says which deadline applied."""
    why = cal.too_loaded()
    note = cal.deadline_note(max(timeouts))
    out = {}
    for name, verdict in verdicts.items():
        if verdict.result is not CheckResult.failed:
            out[name] = verdict
        elif why:
            out[name] = unknown(f"{verdict.evidence}; timed out again when retried in a fresh process; {why}; {note}",
                                "re-run on a machine that is less loaded (the backend was not judged)", verdict.via)
        else:
            out[name] = failed(f"{verdict.evidence}; timed out again when retried in a fresh process; {note}",
                               verdict.advice, verdict.via)
    return out


def _preflight(env: CaseEnv) -> tuple[str | None, str | None]:
    """(device type, problem): initialise once in a child; problem is None when that worked."""
    def probe() -> str:
        adapter = env.adapter()
        adapter.setup()
        kind = device_type_of(adapter)
        if kind not in NO_VALUE_DEVICES:
            env.initialise()
        return kind

    res = run_forked(probe, current().child_deadline())
    if res.status == "ok":
        return str(res.value), None
    return None, res.describe()


def run_cases(env: CaseEnv, names: Sequence[str], jobs: int = 2, deadline: float | None = None) -> None:
    """Run each case in its own forked process, ``jobs`` at a time, emitting records as they finish
    (``deadline``: of one case; calibrated by default)."""
    cal = current(env.spec, env.generation)
    deadline = cal.case_deadline() if deadline is None else deadline
    kind, problem = _preflight(env)
    pending = []
    for name in names:
        if kind in NO_VALUE_DEVICES:
            emit({"event": "done", "record": make_record(by_name(name), no_runtime_verdict(kind)).model_dump(mode="json")})
        elif problem is not None and name != "init_messages":
            verdict = unknown(f"not run: the backend did not initialise ({problem[:300]})",
                              "fix the driver check first")
            emit({"event": "done", "record": make_record(by_name(name), verdict).model_dump(mode="json")})
        else:
            pending.append(name)
    groups: dict[object, list[str]] = {}
    for name in pending:  # checks decided by one case function run in one process
        groups.setdefault(CASES[name], []).append(name)
    queue = [(names, 1) for names in groups.values()]
    running: list[_Running] = []
    while queue or running:
        while queue and len(running) < max(1, jobs):
            running.append(_start(env, *queue.pop(0)))
        fds = [r.fd for r in running]
        ready, _, _ = select.select(fds, [], [], 0.1)
        for run in list(running):
            if run.fd in ready:
                chunk = os.read(run.fd, 65536)
                run.data += chunk
            done, status = os.waitpid(run.pid, os.WNOHANG)
            late = time.monotonic() - run.start > deadline
            if done or late:
                if done:
                    run.data += _drain(run.fd)
                verdicts, timeouts = _finish(run, status if done else None, deadline)
                running.remove(run)
                if timeouts and any(v.result is CheckResult.failed for v in verdicts.values()):
                    if run.attempt == 1:  # once more in a fresh process before a timeout is a verdict
                        queue.insert(0, (run.names, 2))
                        continue
                    verdicts = _judged(verdicts, timeouts, cal)
                for name, verdict in verdicts.items():
                    if "calibrated:" not in verdict.evidence:  # a timeout's evidence names its deadline already
                        verdict.evidence += f" [{cal.deadline_note(cal.child_deadline())} per child]"
                    emit({"event": "done", "record": make_record(by_name(name), verdict).model_dump(mode="json")})


def _drain(fd: int) -> bytes:
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the case host."""
    parser = argparse.ArgumentParser(prog="opmatrix.probes.runtime.casehost")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--generation")
    parser.add_argument("--cases", required=True, help="comma-separated case names")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown_names = [n for n in names if n not in CASES]
    if unknown_names:
        parser.error(f"unknown cases: {', '.join(unknown_names)}; known: {', '.join(CASES)}")
    import torch  # noqa: F401 - imported once here so that every forked case starts with it loaded

    env = CaseEnv(args.backend, args.generation)
    # constructing the adapter imports its package (as `opmatrix probe` does in its parent) but
    # neither registers nor initialises the device: every case still starts uninitialised
    env.adapter()
    current(env.spec, env.generation)  # the run's calibration, or one measured now (kept for the cases)
    run_cases(env, names, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

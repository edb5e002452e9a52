"""The host of the process suite: a fresh interpreter that imports torch but never initialises the
backend, and forks one process per case (in a process group of its own, with a deadline), so
every case starts from the state a fresh process would have::

    python -m opmatrix.probes.runtime.casehost --backend refaccel --cases fork_after_init,spawn --jobs 2
    @@opmatrix {"event": "done", "record": {"task": "runtime|fork_after_init", ...}}

A preflight child first initialises the backend once: when that fails every case is ``unknown``
(the ``driver`` check names the problem), except ``init_messages``, which provokes failures anyway.
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

from .catalog import by_name
from .children import describe_exit, run_forked
from .context import NO_VALUE_DEVICES
from .process import CASES, CaseEnv, device_type_of, no_runtime_verdict
from .spec import Facts, Verdict, failed, unknown
from .worker import emit, make_record

__all__ = ["CASE_DEADLINE", "main", "run_cases"]

#: deadline of one case process (spawn-heavy cases start interpreters on a loaded machine)
CASE_DEADLINE = 90.0


@dataclass
class _Running:
    names: list[str]
    pid: int
    fd: int
    start: float
    data: bytes = b""


def _payload(verdict: Verdict) -> dict[str, object]:
    return {"result": verdict.result.value, "evidence": verdict.evidence, "advice": verdict.advice,
            "via": verdict.via, "capabilities": verdict.facts.capabilities}


def _start(env: CaseEnv, names: list[str]) -> _Running:
    """Fork a case process that runs the case function deciding ``names`` (one function)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setpgid(0, 0)
        try:
            found = CASES[names[0]](env)
            verdicts = found if isinstance(found, dict) else {names[0]: found}
            payload = {name: _payload(v) for name, v in verdicts.items()}
        except BaseException as exc:  # noqa: BLE001 - the case process reports anything, then exits
            raised = failed(f"the case raised {type(exc).__name__}: {exc}")
            payload = {name: _payload(raised) for name in names}
        try:
            os.write(write_fd, json.dumps(payload).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    return _Running(names, pid, read_fd, time.monotonic())


def _finish(run: _Running, status: int | None, deadline: float) -> dict[str, Verdict]:
    os.close(run.fd)
    try:
        os.killpg(run.pid, signal.SIGKILL)  # stragglers the case left behind (its own group only)
    except ProcessLookupError:
        pass
    if status is None:
        os.waitpid(run.pid, 0)
        return dict.fromkeys(run.names, failed(f"the case did not finish within {deadline:.0f} s (hung; killed)"))
    code = os.waitstatus_to_exitcode(status)
    try:
        payload = json.loads(run.data.decode())
    except ValueError:
        return dict.fromkeys(run.names, failed(f"the case process ended ({describe_exit(code)}) without a result"))
    from opmatrix.schema import CheckResult

    out = {}
    for name in run.names:
        item = payload.get(name) or {"result": "fail", "evidence": "the case reported no verdict for this check"}
        facts = Facts(capabilities=dict(item.get("capabilities") or {}))
        out[name] = Verdict(CheckResult(item["result"]), item["evidence"], item.get("advice"), item.get("via"), facts)
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

    res = run_forked(probe, CASE_DEADLINE)
    if res.status == "ok":
        return str(res.value), None
    return None, res.describe()


def run_cases(env: CaseEnv, names: Sequence[str], jobs: int = 2, deadline: float = CASE_DEADLINE) -> None:
    """Run each case in its own forked process, ``jobs`` at a time, emitting records as they finish."""
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
    queue = list(groups.values())
    running: list[_Running] = []
    while queue or running:
        while queue and len(running) < max(1, jobs):
            running.append(_start(env, queue.pop(0)))
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
                verdicts = _finish(run, status if done else None, deadline)
                running.remove(run)
                for name, verdict in verdicts.items():
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
    run_cases(env, names, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

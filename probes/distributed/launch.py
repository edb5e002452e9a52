"""Run a batch of distributed cases in spawned rank processes, each case under a deadline.

The launcher hosts the batch's ``TCPStore`` on 127.0.0.1 (port chosen free by the OS), starts
one ``python -m opmatrix.probes.distributed.rank`` process per rank, and watches their progress
files. A rank that dies outside a case's plan blames that case as ``crashed``; a case past its
deadline is ``hung``; either way the ranks are killed and the cases not yet run go to a fresh
batch, so one bad case never loses the others. The deadlines and the rendezvous timeout are
calibrated (docs/runner.md#calibrated-deadlines): a case's deadline grows with how slowly a plain
child starts, the ranks' start-up and rendezvous with the backend's measured start::

    results = run_batch(spec, cases, work_dir)     # {case id: [rank results ...]}
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opmatrix.probes.runner.calibrate import CHILD_BASE, MARGIN, Calibration, current
from opmatrix.schema.userref import child_env

__all__ = ["STARTUP_DEADLINE", "run_cases"]

STARTUP_DEADLINE = 120.0  # seconds for the ranks to import torch and set up, at least (slow on a busy machine)
#: seconds a rank waits at the batch's store for the others, at least
RENDEZVOUS_TIMEOUT = 60.0
_POLL = 0.05


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            break
    return out


def _spawn(spec: dict[str, Any], work: Path, world_size: int) -> list[subprocess.Popen[bytes]]:
    spec_file = work / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = child_env({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    procs = []
    for r in range(world_size):
        log = (work / f"rank{r}.log").open("wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "opmatrix.probes.distributed.rank", str(spec_file), str(r)],
                                      stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def _fault(case: dict[str, Any], outcome: str, why: str, seconds: float) -> dict[str, Any]:
    return {"case": case["id"], "event": "result", "rank": -1, "outcome": outcome, "error": why,
            "seconds": round(seconds, 3)}


def _startup(cal: Calibration) -> float:
    """Seconds the ranks may take to start and set the backend up (calibrated, at least the fixed one)."""
    return max(STARTUP_DEADLINE, CHILD_BASE + MARGIN * cal.start)


def _watch(procs: list[subprocess.Popen[bytes]], work: Path, cases: list[dict[str, Any]],
           cal: Calibration) -> tuple[int, dict | None]:
    """Follow the ranks through ``cases``; (cases finished, the fault record of the one blamed or None)."""
    ws = len(procs)
    done, started = 0, time.monotonic()
    while done < len(cases):
        case = cases[done]
        logs = [_read(work / f"rank{r}.jsonl") for r in range(ws)]
        dies = set(case.get("dies", []))
        finished = [r for r in range(ws)
                    if any(e["case"] == case["id"] and e["event"] == "result" for e in logs[r])]
        if len(set(finished) | dies) == ws and all(procs[r].poll() is not None or r not in dies for r in dies):
            done, started = done + 1, time.monotonic()
            continue
        begun = any(e["case"] == case["id"] and e["event"] == "start" for lg in logs for e in lg)
        limit = case["deadline"] * cal.slowdown + (0.0 if begun else _startup(cal))
        for r, p in enumerate(procs):
            if p.poll() is not None and r not in finished and r not in dies:
                # the log was read before the exit was seen: a rank that wrote its result and then
                # exited in between is read again (after its exit, the file is complete)
                if any(e["case"] == case["id"] and e["event"] == "result" for e in _read(work / f"rank{r}.jsonl")):
                    continue
                why = f"rank {r} exited with {p.returncode} during {case['id']} (signal {-p.returncode})" \
                    if p.returncode and p.returncode < 0 else f"rank {r} exited with {p.returncode} during {case['id']}"
                return done, _fault(case, "crashed", why, time.monotonic() - started)
        if time.monotonic() - started > limit:
            missing = sorted(set(range(ws)) - set(finished) - dies)
            return done, _fault(case, "hung", f"deadline {limit:g} s passed; ranks {missing} had not finished",
                                time.monotonic() - started)
        time.sleep(_POLL)
    return done, None


def _run_batch(base: dict[str, Any], world_size: int, cases: list[dict[str, Any]], work: Path) -> tuple[int, dict | None]:
    import datetime as dt

    import torch.distributed as dist

    cal = current()
    rendezvous = max(RENDEZVOUS_TIMEOUT, _startup(cal))
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=dt.timedelta(seconds=rendezvous))
    if work.exists():  # progress files of an earlier run would read as this run's results
        shutil.rmtree(work)
    work.mkdir(parents=True)
    spec = {**base, "port": store.port, "world_size": world_size, "cases": cases, "work": str(work),
            "rendezvous_s": rendezvous}
    procs = _spawn(spec, work, world_size)
    try:
        return _watch(procs, work, cases, cal)
    finally:
        _stop(procs)
        del store


def run_cases(base: dict[str, Any], world_size: int, cases: list[dict[str, Any]], work: Path,
              on_result: Any) -> None:
    """Run ``cases`` at ``world_size``; call ``on_result(case, rank_records)`` per case, in order."""
    remaining, attempt = list(cases), 0
    while remaining:
        attempt += 1
        where = work / f"try{attempt}"
        done, fault = _run_batch(base, world_size, remaining, where)
        logs = [_read(where / f"rank{r}.jsonl") for r in range(world_size)]
        for case in remaining[:done]:
            on_result(case, [e for lg in logs for e in lg if e["case"] == case["id"] and e["event"] == "result"])
        if fault is None:
            return
        blamed = remaining[done]
        partial = [e for lg in logs for e in lg if e["case"] == blamed["id"] and e["event"] == "result"]
        on_result(blamed, partial + [fault])
        remaining = remaining[done + 1:]

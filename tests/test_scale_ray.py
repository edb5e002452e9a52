"""``probe --executor ray`` on a real local Ray instance (started by the executor for each run).

Nothing is mocked: Ray actors spawn real workers that run real tasks; an actor is killed with
SIGKILL mid-task; a unit hangs past its deadline. Ray is a dependency of ``make setup`` (the
``ray`` extra), so these tests always run there. A node lost mid-run is tested on two nodes started with ``ray start``
on loopback (:mod:`tests.raycluster`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from opmatrix.cli import main
from opmatrix.probes.runner import run
from opmatrix.probes.runner.raypool import RayExecutor
from tests.runner_handlers import HANDLERS, make_tasks

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray is importable (never skipped: make setup installs it); workers can import tests.*."""
    import ray  # noqa: F401 - an ImportError here fails the test: the ray extra belongs to make setup

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()[1:]]


def _executor() -> RayExecutor:
    return RayExecutor(address=None, resource="opm_dev", backend="cpu", generation=None, device_type="cpu", poll=0.2)


def test_a_ray_run_gives_the_local_runs_matrix(cluster: Any, tmp_path: Path) -> None:
    from opmatrix.matrix.diff import diff_matrices
    from opmatrix.schema import load_matrix

    args = ["probe", "--backend", "refaccel", "--generation", "g2", "--ops", "add,mul,sort", "--dtypes",
            "float32,bfloat16", "--no-runtime", "--compile", "off", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    assert main([*args, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    local, on_ray = (load_matrix(tmp_path / name / "matrix.yaml") for name in ("local", "ray"))
    diff = diff_matrices(local, on_ray)
    assert diff.same_verdicts, diff.render_table()
    assert local.cell_count() == on_ray.cell_count() > 0
    records = [r for r in _records(tmp_path / "ray") if r["kind"] == "task"]
    assert {r["device"] for r in records} <= {"refaccel:0", "refaccel:1"}  # as torch names them
    assert len({r["task"] for r in records}) == len(records) == 6


def test_an_actor_killed_mid_task_is_a_crash_and_keeps_the_units_it_finished(cluster: Any, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = make_tasks(1, units=6, sleep=0.6, pid_dir=str(pids))
    runs = tmp_path / "runs"
    tasks = [t.__class__(t.id, t.kind, {**t.payload, "runs": str(runs)}, t.order) for t in tasks]

    def kill_the_actor() -> None:  # once u3 started, SIGKILL the actor (the worker's parent)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if runs.exists() and len(runs.read_text().splitlines()) >= 4:
                worker = next(pids.iterdir())
                os.kill(int(worker.read_text()), signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_actor)
    killer.start()
    summary = run(tasks, command="runner test", backend="cpu", out_dir=tmp_path / "out", handlers=HANDLERS, timeout=30, progress=False,
                  executor=_executor())
    killer.join()
    (record,) = _records(tmp_path / "out")
    outcomes = [c["result"]["outcome"] for c in record["cells"]]
    # The actor's death is recorded as a crash naming the actor on exactly the unit that was
    # running (u3: the driver reads the dead actor's unit board on its node once its worker died
    # with it), and every other unit is ok. A worker that had run more than three units when it
    # crashed gets its unit retried first in a fresh worker (then ok, with a note naming the
    # first crash), as in the local pool.
    named = [c["op"].rsplit(".", 1)[-1] for c in record["cells"] if "Ray actor" in json.dumps(c)]
    assert named == ["u3"], (named, outcomes)
    assert sorted(outcomes) in (["crashed"] + ["ok"] * 5, ["ok"] * 6), outcomes
    assert len(record["cells"]) == 6 and summary.restarts == 1
    ran = runs.read_text().splitlines()
    # every unit finished before the kill was carried (read from the node's carry file after the
    # death): none of them ran again in the replacement actor; u3 ran twice, u4 and u5 once
    assert [ran.count(f"t0.u{i}") for i in range(6)] == [1, 1, 1, 2, 1, 1], ran


def test_a_unit_past_its_deadline_kills_the_actor_and_is_hung(cluster: Any, tmp_path: Path) -> None:
    tasks = make_tasks(2, units=3, faults={"t1": {"u1": "hang"}})
    summary = run(tasks, command="runner test", backend="cpu", out_dir=tmp_path, handlers=HANDLERS, timeout=2, progress=False,
                  executor=_executor())
    cells = {(r["task"], c["result"]["outcome"]) for r in _records(tmp_path) for c in r["cells"]}
    assert ("t1|float32", "hung") in cells and ("t0|float32", "ok") in cells
    by_unit = {c["op"]: c["result"]["outcome"] for r in _records(tmp_path) if r["task"] == "t1|float32"
               for c in r["cells"]}
    assert sorted(by_unit.values()) == ["hung", "ok", "ok"], by_unit
    assert summary.faults == {"hung": 1}


def test_resume_continues_a_local_journal_on_ray(cluster: None, tmp_path: Path) -> None:
    """A run cut short locally (its last record gone) is finished by --executor ray: one journal, no duplicate."""
    args = ["probe", "--backend", "refaccel", "--generation", "g2", "--ops", "add,mul", "--dtypes", "float32",
            "--no-runtime", "--compile", "off", "--quiet", "--out", str(tmp_path)]
    assert main(args) == 0
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:-1]) + "\n")  # as if the local run had been interrupted
    assert main([*args, "--resume", "--executor", "ray"]) == 0
    records = _records(tmp_path)
    assert sorted(r["task"] for r in records) == ["add|float32", "mul|float32"]
    assert [r.get("device") for r in records].count(None) == 1  # one record from each executor


def test_a_local_ray_run_leaves_the_users_ray_configuration_as_it_found_it(cluster: Any, tmp_path: Path) -> None:
    """Ray 2.60 writes ``~/.ray/auth_token`` for a new local instance, after which every ``ray start``
    on the machine needs ``RAY_AUTH_MODE=token``: the executor's local instance uses a token in its
    environment only, and the process's environment is put back after the run."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(home)
    code = ("import os, sys; from opmatrix.probes.runner import run; from tests.runner_handlers import HANDLERS, "
            "make_tasks; from tests.test_scale_ray import _executor; s = run(make_tasks(2, units=1), backend='cpu', "
            "out_dir=sys.argv[1], executor=_executor(), handlers=HANDLERS, command='t', progress=False); "
            "print('RESULT', s.exit_code, s.recorded, os.environ.get('RAY_AUTH_MODE'), os.environ.get('RAY_AUTH_TOKEN'))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT 0 2 None None"], done.stdout[-2000:] + done.stderr[-3000:]
    assert not (home / ".ray").exists(), sorted(str(p) for p in (home / ".ray").rglob("*"))

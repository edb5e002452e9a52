"""How workers start: spawned, and replacements after a crash forked from a zygote (``.zygote``).

Each test drives a real run in its own orchestrator process, with a real (if tiny) installed
distribution that registers a ``torch.backends`` entry point, as out-of-tree device backends do:
torch's autoload must run in every worker and never in the zygote they are forked from.

The runs use one worker: with two, a worker that starts slowly (a loaded machine) may find the
other one has done every task, so it runs no unit and leaves no record, and the assertions would
measure start-up speed. With one, the worker that crashes must be replaced and its replacement
must run the rest: the same processes, whatever the load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opmatrix.probes.runner.zygote import start_method

from .conftest import ROOT

pytestmark = pytest.mark.skipif(start_method() != "forkserver", reason="torch here is not a CPU-only build")

_ORCHESTRATOR = """
import json, os, sys
from multiprocessing import forkserver
from opmatrix.probes.runner import run
from tests.runner_handlers import HANDLERS, make_tasks
if __name__ == "__main__":
    from opmatrix.probes.runner import zygote
    if "early" in sys.argv[3:]:  # what a first run's planning does while it builds OpInfo's name index
        zygote.start_early(())
    if "boom" in sys.argv[3:]:  # the zygote's imports fail: it dies before it forks anything
        import tests.runner_handlers as test_kind
        test_kind.HANDLER.warm = "boom_warm"
    tasks = make_tasks(8, units=2, sleep=0.3, pid_dir=sys.argv[2], faults={"t1": {"u0": "segv"}})
    # one worker at a time: every worker that starts runs a unit (the crash leaves work only it can
    # do), so which processes ran and where they came from never depends on how fast each started
    workers = 2 if "two" in sys.argv[3:] else 1
    s = run(tasks, command="runner test", backend="cpu", out_dir=sys.argv[1], workers=workers, handlers=HANDLERS,
            progress=False)
    print(json.dumps({"probed": s.probed, "restarts": s.restarts, "pid": os.getpid(),
                      "server": forkserver._forkserver._forkserver_pid}))
"""


def _fake_backend(site: Path, log: Path) -> None:
    """A distribution whose ``torch.backends`` entry point logs the pid of each process that loads it
    (and ``boom_warm``, a module that cannot be imported)."""
    site.mkdir(parents=True)
    (site / "boom_warm.py").write_text("raise RuntimeError('a preload that fails')\n")
    info = site / "fakeaccel-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeaccel\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nfakeaccel = fakeaccel:autoload\n")
    (site / "fakeaccel.py").write_text(
        f"import os\n\ndef autoload():\n    with open({str(log)!r}, 'a') as fh:\n        fh.write(f'{{os.getpid()}}\\n')\n"
    )


def _run(tmp_path: Path, *extra: str, **env: str) -> tuple[dict[str, int | None], dict[int, int], list[int]]:
    site, log, pids = tmp_path / "site", tmp_path / "autoload.log", tmp_path / "pids"
    _fake_backend(site, log)
    pids.mkdir()
    script = tmp_path / "orchestrator.py"
    script.write_text(_ORCHESTRATOR)
    # the run inherits a calibration (as a worker of a larger run does), so that no calibration child
    # imports torch: the autoload log then holds exactly the processes the runner started
    calibration = json.dumps({"plain_start": 2.0, "backend_start": 0.5, "load": 0.0, "backend": "cpu", "problem": None})
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OPMATRIX_CALIBRATION": calibration,
               **env}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), str(pids), *extra], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    workers = {int(p.name): int(p.read_text()) for p in pids.iterdir()}  # worker pid -> its parent's pid
    loaded = [int(line) for line in log.read_text().split()] if log.exists() else []
    return summary, workers, loaded


def test_replacements_fork_from_one_zygote_and_each_worker_runs_the_backend_autoload(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path)
    assert summary["probed"] == 8 and summary["restarts"] >= 1
    first = {pid for pid, parent in workers.items() if parent == summary["pid"]}
    replacements = {pid: parent for pid, parent in workers.items() if pid not in first}
    assert len(first) == 1 and replacements  # the first is spawned by the orchestrator ...
    (zygote,) = set(replacements.values())  # ... replacements fork from one other process
    assert sorted(loaded) == sorted(workers)  # torch's backend autoload ran once in each worker ...
    assert zygote not in loaded  # ... and never in the zygote
    assert summary["server"] is None  # which was stopped with the run


def test_workers_are_spawned_when_asked(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path, OPMATRIX_WORKER_START="spawn")
    assert summary["probed"] == 8 and summary["restarts"] >= 1 and len(workers) >= 2
    assert set(workers.values()) == {summary["pid"]}
    assert sorted(loaded) == sorted(workers)


def test_replacements_are_spawned_when_the_zygote_dies_importing(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path, "boom")
    assert summary["probed"] == 8 and summary["restarts"] >= 1 and len(workers) >= 2
    assert set(workers.values()) == {summary["pid"]}  # every worker spawned, the replacements too
    assert sorted(loaded) == sorted(workers) and summary["server"] is None


def test_a_zygote_started_early_serves_the_first_workers_too(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path, "early")
    assert summary["probed"] == 8 and summary["restarts"] >= 1 and len(workers) >= 2
    (zygote,) = set(workers.values())  # every worker, the first included, forked from it
    assert zygote != summary["pid"] and zygote not in loaded and sorted(loaded) == sorted(workers)
    assert summary["server"] is None


def test_several_workers_fork_from_one_zygote_from_the_start(tmp_path: Path) -> None:
    """Two workers: both first workers fork from one zygote (torch and the task kind's modules
    imported once for both), and each still runs the backend autoload itself."""
    summary, workers, loaded = _run(tmp_path, "two")
    assert summary["probed"] == 8 and len(workers) >= 2
    (zygote,) = set(workers.values())  # every worker, both first ones included, forked from it
    assert zygote != summary["pid"] and zygote not in loaded and sorted(loaded) == sorted(workers)
    assert summary["server"] is None


_ASK = """
import json, os
from multiprocessing import forkserver
from opmatrix.probes.runner import zygote
if __name__ == "__main__":
    before = zygote.ask(os.getpid)
    zygote.start_early(())
    answered = zygote.ask(os.getppid)  # the child's parent: the zygote
    failed = zygote.ask(int, "not a number")
    server = forkserver._forkserver._forkserver_pid
    zygote.stop()
    print(json.dumps({"before": before, "answered": answered, "failed": failed, "after": zygote.ask(os.getpid),
                      "server": server, "pid": os.getpid()}))
"""


def test_the_zygote_answers_questions_from_a_child_and_says_when_it_cannot(tmp_path: Path) -> None:
    script = tmp_path / "ask.py"
    script.write_text(_ASK)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"][0] is False and out["after"][0] is False  # no zygote: the caller does the work
    assert out["answered"] == [True, out["server"]] and out["server"] != out["pid"]
    assert out["failed"][0] is False and "ValueError" in out["failed"][1]


_PLAN = """
import json, sys
from opmatrix.probes.options import ProbeOptions
from opmatrix.probes.planning import plan_probe
from opmatrix.probes.ops import source
from opmatrix.probes.runner import zygote
if __name__ == "__main__":
    if len(sys.argv) > 1:  # a zygote whose imports fail (it dies before it can answer)
        from opmatrix.probes.ops.handler import HANDLER
        HANDLER.warm = sys.argv[1]
    plan = plan_probe(ProbeOptions(backend="cpu", ops=("add", "softmax"), no_runtime=True))
    workers = zygote.start_method(replacement=True)  # how the run's workers would start
    zygote.stop()
    print(json.dumps({"torch": "torch" in sys.modules, "tasks": [t.id for t in plan.tasks], "workers": workers,
                      "ops": plan.identity.ops, "hash": plan.identity.op_source_hash,
                      "cached": source.index_cached()}))
"""


def test_a_first_run_plans_from_the_index_the_zygote_built_without_importing_torch(tmp_path: Path) -> None:
    """On a first run (no name index cached) the orchestrator asks the zygote, which imports
    ``op_db`` anyway, for OpInfo's names: it plans exactly as from ``op_db`` itself, imports no torch
    (so it has no torch to tear down at exit), and the index is cached for the next run."""
    script = tmp_path / "plan.py"
    script.write_text(_PLAN)
    plans = {}
    for how in ("forkserver", "spawn", "no-cache"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPMATRIX_CACHE_DIR": str(tmp_path / f"cache-{how}"),
               "OPMATRIX_WORKER_START": "spawn" if how == "spawn" else "",
               "OPMATRIX_NO_CACHE": "1" if how == "no-cache" else ""}
        done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        plans[how] = json.loads(done.stdout.strip().splitlines()[-1])
        written = list((tmp_path / f"cache-{how}" / "opinfo").glob("names-*.json"))
        assert bool(written) == (how != "no-cache") and plans[how]["cached"]
    asked, built, handed = plans["forkserver"], plans["spawn"], plans["no-cache"]
    # spawned workers: planning imports op_db itself; else the zygote's answer is used, even with
    # no cache on disk to read it back from
    assert asked["torch"] is False and handed["torch"] is False and built["torch"] is True
    assert asked["workers"] == handed["workers"] == "forkserver" and built["workers"] == "spawn"
    assert asked["tasks"] == built["tasks"] == handed["tasks"] and asked["hash"] == built["hash"] == handed["hash"]
    assert asked["ops"] == built["ops"] == ["add", "softmax", "softmax.with_dtype"]


def test_a_zygote_that_dies_importing_leaves_planning_to_the_orchestrator(tmp_path: Path) -> None:
    (tmp_path / "boom_warm.py").write_text("raise RuntimeError('a preload that fails')\n")
    script = tmp_path / "plan.py"
    script.write_text(_PLAN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "OPMATRIX_CACHE_DIR": str(tmp_path / "cache"), "OPMATRIX_WORKER_START": ""}
    done = subprocess.run([sys.executable, str(script), "boom_warm"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout.strip().splitlines()[-1])
    assert "a preload that fails" in done.stderr  # the zygote's own last words
    assert plan["torch"] is True and plan["cached"]  # the orchestrator built the index itself ...
    assert plan["workers"] == "spawn"  # ... and gave the zygote up: the run's workers will be spawned
    assert plan["ops"] == ["add", "softmax", "softmax.with_dtype"]

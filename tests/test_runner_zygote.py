"""How workers start: spawned, and replacements after a crash forked from a zygote (``.zygote``).

Each test drives a real run in its own orchestrator process, with a real (if tiny) installed
distribution that registers a ``torch.backends`` entry point, as out-of-tree device backends do:
torch's autoload must run in every worker and never in the zygote they are forked from.
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
    if len(sys.argv) > 3:  # what a first run's planning does while it builds OpInfo's name index
        from opmatrix.probes.runner import zygote
        zygote.start_early(())
    tasks = make_tasks(8, units=2, sleep=0.3, pid_dir=sys.argv[2], faults={"t1": {"u0": "segv"}})
    s = run(tasks, backend="cpu", out_dir=sys.argv[1], workers=2, handlers=HANDLERS, progress=False)
    print(json.dumps({"probed": s.probed, "restarts": s.restarts, "pid": os.getpid(),
                      "server": forkserver._forkserver._forkserver_pid}))
"""


def _fake_backend(site: Path, log: Path) -> None:
    """A distribution whose ``torch.backends`` entry point logs the pid of each process that loads it."""
    info = site / "fakeaccel-0.1.dist-info"
    info.mkdir(parents=True)
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
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), **env}
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
    assert len(first) == 2 and replacements  # the first two are spawned by the orchestrator ...
    (zygote,) = set(replacements.values())  # ... replacements fork from one other process
    assert sorted(loaded) == sorted(workers)  # torch's backend autoload ran once in each worker ...
    assert zygote not in loaded  # ... and never in the zygote
    assert summary["server"] is None  # which was stopped with the run


def test_workers_are_spawned_when_asked(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path, OPMATRIX_WORKER_START="spawn")
    assert summary["probed"] == 8 and summary["restarts"] >= 1 and len(workers) >= 3
    assert set(workers.values()) == {summary["pid"]}
    assert sorted(loaded) == sorted(workers)


def test_a_zygote_started_early_serves_the_first_workers_too(tmp_path: Path) -> None:
    summary, workers, loaded = _run(tmp_path, "early")
    assert summary["probed"] == 8 and len(workers) >= 3
    (zygote,) = set(workers.values())  # every worker, the first two included, forked from it
    assert zygote != summary["pid"] and zygote not in loaded and sorted(loaded) == sorted(workers)
    assert summary["server"] is None

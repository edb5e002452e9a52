"""``probe --executor ray`` on a Ray cluster of two nodes started with ``ray start`` on loopback.

Nothing is mocked: two ``ray start --block`` nodes (127.0.0.2, the head, and 127.0.0.3), each
declaring one ``refaccel`` device, a driver joining with ``--ray-address`` in its own process,
and a node lost mid-run by SIGKILLing its raylet (:mod:`tests.raycluster`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from opmatrix.cli import main
from tests.raycluster import LoopbackCluster

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

OPS = "softmax,add,mul,mm,bmm,addmm,sum,sort,topk,addcmul,cumsum,nn.functional.linear"
ARGS = ["probe", "--backend", "refaccel", "--generation", "g2", "--ops", OPS, "--dtypes", "float32,bfloat16",
        "--no-runtime", "--compile", "off"]


def _tasks(out: Path) -> list[str]:
    lines = (out / "journal.jsonl").read_text().splitlines()[1:]
    return [r["task"] for r in map(json.loads, lines) if r.get("kind") == "task"]


def _slots(out: Path) -> set[int]:
    """The worker slots that recorded tasks so far (a line being written is skipped)."""
    slots = set()
    for line in (out / "journal.jsonl").read_text().splitlines()[1:]:
        try:
            slots.add(json.loads(line).get("worker"))
        except ValueError:
            continue
    return slots - {None}


def _outcomes(out: Path) -> dict[str, list[str]]:
    lines = (out / "journal.jsonl").read_text().splitlines()[1:]
    return {r["task"]: [c["result"]["outcome"] for c in r["cells"]] for r in map(json.loads, lines)}


def _drive(cmd: list[str], env: dict[str, str], log: Path, kill_when: Callable[[], bool],
           kill: Callable[[], None]) -> tuple[int, bool, str]:
    """Run a driver (at most 300 s); call ``kill`` once, the first time ``kill_when()`` holds.
    Returns (its exit code, whether ``kill`` was called, its output)."""
    with open(log, "wb") as f:
        driver = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    killed = False
    try:
        end = time.monotonic() + 300
        while driver.poll() is None and time.monotonic() < end:
            if not killed and kill_when():
                kill()
                killed = True
            time.sleep(0.05)
        code = driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    return code, killed, log.read_text(errors="replace")


def test_a_node_lost_mid_run_loses_nothing_and_records_nothing_twice(tmp_path: Path) -> None:
    from opmatrix.matrix.diff import diff_matrices
    from opmatrix.schema import load_matrix

    assert main([*ARGS, "--quiet", "--workers", "2", "--out", str(tmp_path / "local")]) == 0
    planned = sorted(_tasks(tmp_path / "local"))
    out = tmp_path / "ray"
    with LoopbackCluster(tmp_path / "cluster", {"refaccel": 1}, nodes=2) as cluster:
        cmd = [sys.executable, "-m", "opmatrix", *ARGS, "--executor", "ray", "--ray-address", cluster.address,
               "--out", str(out)]
        # both nodes' workers have run tasks: lose one
        code, killed, said = _drive(cmd, {**os.environ, **cluster.env}, tmp_path / "driver.log",
                                    lambda: (out / "journal.jsonl").exists() and len(_slots(out)) == 2,
                                    lambda: cluster.kill_node(1))
    assert killed, said[-3000:]
    assert code == 0, said[-3000:]
    # the lost node's task ran again on the other node, blamed on nothing
    assert "node lost: task" in said and "left the cluster" in said, said[-3000:]
    tasks = _tasks(out)
    assert sorted(tasks) == planned and len(set(tasks)) == len(tasks)  # nothing lost, nothing twice
    outcomes: dict[str, Any] = _outcomes(out)
    assert not any(o in ("crashed", "hung") for cells in outcomes.values() for o in cells), outcomes
    local, on_ray = (load_matrix(tmp_path / name / "matrix.yaml") for name in ("local", "ray"))
    diff = diff_matrices(local, on_ray)
    assert diff.same_verdicts, diff.render_table()
    assert local.cell_count() == on_ray.cell_count() > 0


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


def test_a_lost_nodes_task_runs_again_elsewhere_keeping_its_finished_units(tmp_path: Path) -> None:
    """The runner's test tasks (6 units each, each sleeping 0.7 s): when the second node's worker
    starts the fifth unit of its first task (an event, not a time), that node's raylet is
    SIGKILLed. Every task is recorded once, nothing is blamed, and only units of the task the node
    was running run again: from the one in flight, or from one finished since the driver's last
    look (it mirrors a node's finished units every half second), on. The units the node had
    finished well before (u0, u1: 1.4 s and more) are kept, not run again."""
    pids, runs, started, out = tmp_path / "pids", tmp_path / "runs", tmp_path / "started", tmp_path / "out"
    pids.mkdir()
    started.mkdir()
    with LoopbackCluster(tmp_path / "cluster", {"opm_dev": 1}, nodes=2) as cluster:
        env = {**os.environ, **cluster.env,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, str(ROOT / "tests" / "runner_handlers.py"), str(out), "--tasks", "6", "--units", "6",
               "--sleep", "0.7", "--timeout", "30", "--pid-dir", str(pids), "--runs", str(runs),
               "--started", str(started), "--ray-address", cluster.address]
        raylet = cluster.raylet_pid(1)
        node_files: list[Path] = []

        def on_the_node() -> list[str]:
            """The units started by the worker on the second node (whose actor is its raylet's child)."""
            if not node_files:
                node_files.extend(f for f in started.iterdir() if _parent(int(f.name.split("-")[1])) == raylet)
            return node_files[0].read_text().split() if node_files else []

        code, killed, said = _drive(cmd, env, tmp_path / "driver.log", lambda: len(on_the_node()) >= 5,
                                    lambda: cluster.kill_node(1))
    assert killed and code == 0, said[-3000:]
    lost = node_files[0].read_text().split()
    tasks = _tasks(out)
    assert sorted(tasks) == [f"t{i}|float32" for i in range(6)], tasks  # each once
    outcomes = _outcomes(out)
    assert all(o == ["ok"] * 6 for o in outcomes.values()), outcomes  # nothing blamed
    ran = runs.read_text().split()
    units = [f"t{i}.u{j}" for i in range(6) for j in range(6)]
    assert set(ran) == set(units)  # nothing lost
    # the node's task: the one its worker was running when the node went (its last started unit)
    task = lost[-1].split(".")[0]
    on_node = [u for u in lost if u.startswith(task + ".")]
    assert on_node[:5] == [f"{task}.u{j}" for j in range(5)], lost
    twice = [u for u in units if ran.count(u) == 2]
    assert len(ran) == len(units) + len(twice), ran  # nothing ran three times
    # only units the lost node had started run again, all of one task, consecutive, up to the
    # last it started; u0 and u1 had finished long before the loss and are kept
    if twice:  # none when the unit in flight finished, and was mirrored, before the node died
        first = int(twice[0].rsplit("u", 1)[1])
        assert twice == [f"{task}.u{j}" for j in range(first, first + len(twice))], (twice, lost)
        assert twice[-1] == on_node[-1] and first >= 2, (twice, on_node)

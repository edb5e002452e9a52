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
    """The runner's test tasks (each unit sleeps): once the second node's worker has run units, its
    raylet is SIGKILLed. Every task is recorded once, nothing is blamed, and units run again only
    in the task the node was running, from the unit in flight (or one finished since the driver's
    last look) on: the units it had seen finished are kept."""
    pids, runs, out = tmp_path / "pids", tmp_path / "runs", tmp_path / "out"
    pids.mkdir()
    with LoopbackCluster(tmp_path / "cluster", {"opm_dev": 1}, nodes=2) as cluster:
        env = {**os.environ, **cluster.env,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, str(ROOT / "tests" / "runner_handlers.py"), str(out), "--tasks", "6", "--units", "4",
               "--sleep", "0.7", "--timeout", "30", "--pid-dir", str(pids), "--runs", str(runs),
               "--ray-address", cluster.address]
        raylet, seen = cluster.raylet_pid(1), []

        def third_unit_on_the_node() -> bool:
            # a worker whose parent (its actor) is a child of the second node's raylet
            if not seen and any(f.read_text().isdigit() and _parent(int(f.read_text())) == raylet
                                for f in pids.iterdir()):
                seen.append(time.monotonic())
            return bool(seen) and time.monotonic() - seen[0] > 1.6  # about its third unit

        code, killed, said = _drive(cmd, env, tmp_path / "driver.log", third_unit_on_the_node,
                                    lambda: cluster.kill_node(1))
    assert killed and code == 0, said[-3000:]
    tasks = _tasks(out)
    assert sorted(tasks) == [f"t{i}|float32" for i in range(6)], tasks  # each once
    outcomes = _outcomes(out)
    assert all(o == ["ok"] * 4 for o in outcomes.values()), outcomes  # nothing blamed
    ran = runs.read_text().split()
    units = [f"t{i}.u{j}" for i in range(6) for j in range(4)]
    assert set(ran) == set(units)  # nothing lost
    # Units run again only in the task that was in flight on the lost node: the one running then,
    # and those finished since the driver's last look at that node (its mirror of the finished
    # units, every half second); the units it had seen finished are kept.
    twice = [u for u in units if ran.count(u) == 2]
    assert len(ran) == len(units) + len(twice), ran
    assert len({u.split(".")[0] for u in twice}) <= 1, twice
    if twice:
        task = twice[0].split(".")[0]
        first = int(twice[0].rsplit("u", 1)[1])
        assert twice == [f"{task}.u{j}" for j in range(first, first + len(twice))], twice

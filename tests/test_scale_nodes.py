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
from pathlib import Path
from typing import Any

import pytest

from opmatrix.cli import main
from tests.raycluster import LoopbackCluster

pytestmark = pytest.mark.slow

OPS = "softmax,add,mul,mm,bmm,addmm,sum,sort,topk,addcmul,cumsum,nn.functional.linear"
ARGS = ["probe", "--backend", "refaccel", "--generation", "g2", "--ops", OPS, "--dtypes", "float32,bfloat16",
        "--no-runtime", "--compile", "off"]


def _tasks(out: Path) -> list[str]:
    lines = (out / "journal.jsonl").read_text().splitlines()[1:]
    return [r["task"] for r in map(json.loads, lines) if r.get("kind") == "task"]


def _outcomes(out: Path) -> dict[str, list[str]]:
    lines = (out / "journal.jsonl").read_text().splitlines()[1:]
    return {r["task"]: [c["result"]["outcome"] for c in r["cells"]] for r in map(json.loads, lines)}


def test_a_node_lost_mid_run_loses_nothing_and_records_nothing_twice(tmp_path: Path) -> None:
    from opmatrix.matrix.diff import diff_matrices
    from opmatrix.schema import load_matrix

    assert main([*ARGS, "--quiet", "--workers", "2", "--out", str(tmp_path / "local")]) == 0
    planned = sorted(_tasks(tmp_path / "local"))
    out = tmp_path / "ray"
    with LoopbackCluster(tmp_path / "cluster", {"refaccel": 1}, nodes=2) as cluster:
        env = {**os.environ, **cluster.env}
        with open(tmp_path / "driver.log", "wb") as log:
            driver = subprocess.Popen([sys.executable, "-m", "opmatrix", *ARGS, "--executor", "ray",
                                       "--ray-address", cluster.address, "--out", str(out)],
                                      stdout=log, stderr=subprocess.STDOUT, env=env)
        killed: float | None = None
        try:
            end = time.monotonic() + 300
            while driver.poll() is None and time.monotonic() < end:
                journal = out / "journal.jsonl"
                done = len(_tasks(out)) if journal.exists() else 0
                if killed is None and done >= 4:  # both nodes' workers are running tasks: lose one
                    cluster.kill_node(1)
                    killed = time.monotonic()
                time.sleep(0.1)
            code = driver.wait(30)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    said = (tmp_path / "driver.log").read_text(errors="replace")
    assert killed is not None, said[-3000:]
    assert code == 0, said[-3000:]
    # the lost node's task ran again on the other node, blamed on nothing
    assert "node lost: task" in said and "left the cluster" in said, said[-3000:]
    tasks = _tasks(out)
    assert sorted(tasks) == planned and len(set(tasks)) == len(tasks)  # nothing lost, nothing twice
    outcomes: dict[str, Any] = _outcomes(out)
    assert not any(o in ("crashed", "hung") for cells in outcomes.values() for o in cells), outcomes
    local, on_ray = (load_matrix(tmp_path / name / "matrix.yaml") for name in ("local", "ray"))
    diff = diff_matrices(local, on_ray)
    assert diff.empty, diff.render_table()
    assert local.cell_count() == on_ray.cell_count() > 0

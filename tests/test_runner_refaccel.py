"""Real faults from the reference accelerator, through the real op engine, land on their cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opmatrix.probes.handlers import TASK_HANDLERS
from opmatrix.probes.runner import Task, run

pytestmark = pytest.mark.slow

# not mul, sum: the health check after a fault runs them on the device
FAULTS = {"neg": "crash", "exp": "abort", "sort": "oom", "tanh": "poison", "cumsum": "hang"}
SIGNALS = {"crash": "SIGSEGV", "abort": "SIGABRT"}
OUTCOME = {"crash": "crashed", "abort": "crashed", "oom": "oom", "poison": "poisoned", "hang": "hung"}
# what still worked after each: a fault that ended the process left a fresh one on the same device working
SCOPE = {"crash": "context", "abort": "context", "oom": "operation", "poison": "context", "hang": "context"}
OPS = ["add", *FAULTS]


def test_refaccel_faults_are_recorded_on_the_cells_that_caused_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crash, abort, oom, poison and hang of one op each: its cells carry the fault, the rest run."""
    spec = ",".join(f"{mode}:aten::{op}" for op, mode in FAULTS.items())
    monkeypatch.setenv("OPMATRIX_REFACCEL_FAULT", spec)  # spawned workers inherit it
    options = {"compile": "off", "autograd": False, "max_samples": 2, "layouts": ["contiguous", "transposed"]}
    tasks = [
        Task(f"{op}|float32", "op", {"source": op, "dtype": "float32", "options": options}, order=i)
        for i, op in enumerate(OPS)
    ]
    summary = run(tasks, command="runner test", backend="refaccel", generation="g2", out_dir=tmp_path, workers=2, timeout=10.0, progress=False,
                  handlers=TASK_HANDLERS)
    assert not summary.aborted, summary.message
    lines = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()[1:]]
    records = {r["task"]: r for r in lines}
    assert len(lines) == len(records) == summary.recorded == len(tasks)

    clean = {c["result"]["outcome"] for c in records["add|float32"]["cells"]}
    assert clean == {"ok"}
    for op, mode in FAULTS.items():
        cells = [c for c in records[f"{op}|float32"]["cells"] if c["op"].startswith(f"aten.{op}")]
        assert cells, op
        outcomes = {c["result"]["outcome"] for c in cells}
        assert outcomes == {OUTCOME[mode]}, (op, outcomes)
        if mode in SIGNALS:
            assert {c["result"]["error"]["signal"] for c in cells} == {SIGNALS[mode]}
        assert {c["result"]["error"]["fault_scope"] for c in cells} == {SCOPE[mode]}, op
    assert set(summary.faults) == {"crashed", "oom", "poisoned", "hung"}


def _probe(tmp_path: Path, ops: list[str], workers: int = 2) -> dict[str, dict]:
    options = {"compile": "off", "autograd": False, "max_samples": 2, "layouts": ["contiguous"]}
    tasks = [Task(f"{op}|float32", "op", {"source": op, "dtype": "float32", "options": options}, order=i)
             for i, op in enumerate(ops)]
    summary = run(tasks, command="runner test", backend="refaccel", generation="g2", out_dir=tmp_path, workers=workers,
                  timeout=60.0, progress=False, handlers=TASK_HANDLERS)
    assert not summary.aborted, summary.message
    lines = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()[1:]]
    return {r["task"]: r for r in lines}


def test_each_fault_mode_is_observed_as_its_scope(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fail, poison-stream and poison-device are found to reach one operation, one stream and one
    device, by what still worked afterwards (the checks are the evidence); add keeps its ok cells."""
    scoped = {"neg": ("fail", "operation"), "exp": ("poison-stream", "stream"), "tanh": ("poison-device", "device")}
    monkeypatch.setenv("OPMATRIX_REFACCEL_FAULT", ",".join(f"{m}:aten::{op}" for op, (m, _) in scoped.items()))
    monkeypatch.setenv("OPMATRIX_REFACCEL_STATE_DIR", str(tmp_path / "state"))
    # one worker: with two on one device, tanh's poisoned device (until its reset) is what exp's
    # checks would see in a fresh process, and exp would rightly read 'device'
    records = _probe(tmp_path, ["add", *scoped], workers=1)
    assert {c["result"]["outcome"] for c in records["add|float32"]["cells"]} == {"ok"}
    for op, (_, scope) in scoped.items():
        errors = [c["result"]["error"] for c in records[f"{op}|float32"]["cells"] if c["op"].startswith(f"aten.{op}")]
        assert errors and {e["fault_scope"] for e in errors} == {scope}, op
    device = next(c["result"]["error"] for c in records["tanh|float32"]["cells"])["scope_evidence"]
    assert device[:3] == [device[0], device[1], "device 1 in this process: works"], device
    assert device[-1] == "reset hook: refaccel:0 reset (it was unavailable: uncorrectable device fault in aten::tanh (injected))"
    assert not list((tmp_path / "state").glob("*.unavailable"))  # the reset hook cleared the mark

"""``probe --devices``: one worker per device, each cell names its device, a bad chip is a finding.

refaccel exposes ``$OPMATRIX_REFACCEL_DEVICES`` devices (2 by default) and
``$OPMATRIX_REFACCEL_BAD_DEVICE=1:aten::mul`` makes ``refaccel:1`` compute ``aten::mul`` wrong
while ``refaccel:0`` stays right: real workers on real (simulated) devices, no mock.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opmatrix.matrix.build import build_matrix
from opmatrix.probes.handlers import TASK_HANDLERS
from opmatrix.probes.runner import Task, run
from opmatrix.schema import (
    BackendId,
    CellRecord,
    CellResult,
    DeviceCells,
    Evidence,
    ExecPath,
    Outcome,
    Samples,
    TaskRecord,
)

OPTIONS = {"compile": "off", "autograd": False, "max_samples": 2, "layouts": ["contiguous"]}


def _tasks(ops: list[str], dtypes: list[str]) -> list[Task]:
    return [Task(f"{op}|{d}", "op", {"source": op, "dtype": d, "options": OPTIONS}, order=i * len(dtypes) + j)
            for i, op in enumerate(ops) for j, d in enumerate(dtypes)]


def _records(out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    return {r["task"]: r for r in map(json.loads, (out / "journal.jsonl").read_text().splitlines()[1:])}


def _cell(outcome: Outcome) -> CellRecord:
    result = CellResult(path=ExecPath.native, outcome=outcome, samples=Samples(probed=1, passed=int(outcome is Outcome.ok)))
    return CellRecord(op="aten.mul.Tensor", dtype="float32", rank=1, layout="contiguous", result=result)


def _matrix(records: list[TaskRecord]):  # type: ignore[no-untyped-def]
    ev = Evidence(opmatrix_version="0", torch_version="2.13", python="3", platform="x")
    return build_matrix(records, backend=BackendId(name="refaccel", device_type="refaccel", dispatch_key="PrivateUse1"),
                        evidence=ev)


def test_a_cell_two_devices_disagree_on_is_device_dependent_with_both_identities() -> None:
    wrong_on_1 = TaskRecord(task="mul|float32", source="mul", dtype="float32", outcome=Outcome.ok,
                            cells=[_cell(Outcome.wrong)], device="refaccel:1", device_uuid="RA-1",
                            cross_checks=[DeviceCells(device="refaccel:0", uuid="RA-0", cells=[_cell(Outcome.ok)])])
    entry = _matrix([wrong_on_1]).operators["aten.mul.Tensor"][0]
    assert entry.outcome is Outcome.wrong  # the worst stands: a bad chip is never rounded away
    assert entry.devices == ["refaccel:0", "refaccel:1"]
    assert [(d.device, d.uuid, d.outcome) for d in entry.device_dependent] == [
        ("refaccel:0", "RA-0", Outcome.ok), ("refaccel:1", "RA-1", Outcome.wrong)]
    assert "device-dependent" in (entry.note or "")
    # both devices wrong: the op is wrong, not the chip
    both = wrong_on_1.model_copy(update={"cross_checks": [DeviceCells(device="refaccel:0", cells=[_cell(Outcome.wrong)])]})
    plain = _matrix([both]).operators["aten.mul.Tensor"][0]
    assert plain.outcome is Outcome.wrong and not plain.device_dependent


@pytest.mark.slow
def test_devices_all_runs_a_worker_per_device_and_finds_the_bad_chip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPMATRIX_REFACCEL_BAD_DEVICE", "1:aten::mul")
    monkeypatch.delenv("OPMATRIX_REFACCEL_DEVICES", raising=False)
    # float64: g2 rejects it. bfloat16 first: the first worker (device 0) takes it before the second
    # starts, since the bad chip's 1% error is inside bfloat16's tolerance (1.6%): on device 1 it
    # would read ok, and which device runs it must not depend on how fast the second worker starts
    tasks = _tasks(["mul"], ["bfloat16", "float32", "float16"])
    summary = run(tasks, command="runner test", backend="refaccel", generation="g2", out_dir=tmp_path, devices="all", timeout=30.0,
                  progress=False, handlers=TASK_HANDLERS)
    assert not summary.aborted, summary.message
    records = _records(tmp_path)
    assert len(records) == len(tasks)
    ran_on = {r["device"] for r in records.values()}
    assert ran_on <= {"refaccel:0", "refaccel:1"} and ran_on, ran_on
    for rec in records.values():
        assert rec["device_uuid"].startswith("RA-")
        outcomes = {c["result"]["outcome"] for c in rec["cells"]}
        if rec["device"] == "refaccel:1":  # wrong there, right on refaccel:0
            assert "wrong" in outcomes
            assert [c["device"] for c in rec["cross_checks"]] == ["refaccel:0"]
            assert {c["result"]["outcome"] for c in rec["cross_checks"][0]["cells"]} == {"ok"}
        else:
            assert outcomes == {"ok"} and not rec.get("cross_checks")
    assert "refaccel:1" in ran_on, "both workers start together; refaccel:1 should have run a task"
    from opmatrix.matrix.journal import read_journal

    matrix = _matrix([r for r in read_journal(tmp_path / "journal.jsonl") if isinstance(r, TaskRecord)])
    dependent = [e for entries in matrix.operators.values() for e in entries if e.device_dependent]
    assert dependent and all({d.device for d in e.device_dependent} == {"refaccel:0", "refaccel:1"} for e in dependent)


@pytest.mark.slow
def test_a_crash_on_one_device_replaces_that_devices_worker_on_the_same_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPMATRIX_REFACCEL_FAULT", "crash:aten::neg")
    tasks = _tasks(["neg", "add"], ["float32", "float64"])
    summary = run(tasks, command="runner test", backend="refaccel", generation="g2", out_dir=tmp_path, devices=[0, 1], timeout=30.0,
                  progress=False, handlers=TASK_HANDLERS)
    records = _records(tmp_path)
    assert summary.restarts >= 1 and len(records) == len(tasks)
    for task_id, rec in records.items():
        # slot i owns device i (--devices 0,1) in every incarnation: the record of a crashed task is
        # written by its slot's replacement, which must sit on the device the slot had
        assert rec["worker"] in (0, 1) and rec["device"] == f"refaccel:{rec['worker']}", (task_id, rec["worker"])
        if task_id.startswith("neg"):
            assert {c["result"]["outcome"] for c in rec["cells"] if c["op"].startswith("aten.neg")} == {"crashed"}
        else:
            assert {c["result"]["outcome"] for c in rec["cells"]} == {"ok"}
    # each slot's log: a replacement starts on the device its slot had (w<i>.log, appended across incarnations)
    logs = sorted((tmp_path / "workers").glob("w*.log"))
    assert len(logs) == 2


def test_executor_ray_without_ray_exits_2_with_the_install_line(tmp_path: Path) -> None:
    """Ray hidden from the import system (as on a machine without the extra): exit 2, the pip line."""
    import subprocess
    import sys

    code = ("import importlib.util, sys; real = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda name, *a: None if name == 'ray' else real(name, *a); "
            "from opmatrix.cli import main; sys.exit(main(sys.argv[1:]))")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", code, "probe", "--backend", "refaccel", "--ops", "add", "--no-runtime",
                           "--executor", "ray", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert 'pip install "opmatrix[ray]"' in done.stderr
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("devices", ["x", "0,0", "all,1"])
def test_bad_devices_exit_2(devices: str, capsys: pytest.CaptureFixture[str]) -> None:
    from opmatrix.cli import main

    assert main(["probe", "--backend", "refaccel", "--ops", "add", "--devices", devices]) == 2
    assert "--devices" in capsys.readouterr().err


@pytest.mark.slow
def test_per_device_runtime_checks_run_on_each_device_and_name_the_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime suite's per-device checks run on every device of --devices (each selected inside
    the worker); refaccel:1 computing 1% off fails the kernel check there only, named with its identity."""
    from opmatrix.probes.runtime import plan_runtime_tasks
    from opmatrix.schema import CheckResult, Runtime, RuntimeCheck

    monkeypatch.setenv("OPMATRIX_REFACCEL_BAD_DEVICE", "1:*")
    monkeypatch.delenv("OPMATRIX_REFACCEL_DEVICES", raising=False)
    tasks = [t for t in plan_runtime_tasks("refaccel", "g2") if t.payload["check"] in ("enumerate", "kernel", "item")]
    summary = run(tasks, command="runner test", backend="refaccel", generation="g2", out_dir=tmp_path, devices="all",
                  timeout=30.0, progress=False, handlers=TASK_HANDLERS, workers=1)
    assert not summary.aborted, summary.message
    checks = {r["check"]["name"]: RuntimeCheck.model_validate(r["check"]) for r in _records(tmp_path).values()}
    kernel, item, enumerate_ = checks["kernel"], checks["item"], checks["enumerate"]
    assert [(d.device, d.result) for d in kernel.devices] == [("refaccel:0", CheckResult.passed),
                                                               ("refaccel:1", CheckResult.failed)]
    assert kernel.result is CheckResult.failed  # the worst: a bad chip is a finding
    assert all(d.uuid and d.uuid.startswith("RA-") for d in kernel.devices)
    assert kernel.evidence.startswith(f"refaccel:1 ({kernel.devices[1].uuid}) fails")
    # .item() of a freshly filled tensor is a copy, right on both devices
    assert [d.result for d in item.devices] == [CheckResult.passed] * 2 and item.result is CheckResult.passed
    assert not enumerate_.devices  # a device-listing check already covers every device: it runs once
    # the gate judges each device: the bad one fails the requirement by name
    import datetime

    from opmatrix.ci.requirements import evaluate_check
    from opmatrix.ci.waivers import WaiverBook

    runtime = Runtime(checks=list(checks.values()))
    result = evaluate_check("kernel", rid="L1.check.kernel", level=1, blocking=True, runtime=runtime, book=WaiverBook([], datetime.date.today()))
    assert result.status.value == "fail" and result.failed == 1 and result.checked == 2
    assert "check:kernel@refaccel:1" in result.message and kernel.devices[1].uuid in result.message


def test_a_check_on_each_device_is_the_worst_of_them_and_the_gate_names_the_bad_device() -> None:
    import datetime

    from opmatrix.ci.requirements import evaluate_check
    from opmatrix.ci.waivers import WaiverBook
    from opmatrix.probes.runtime.catalog import by_name
    from opmatrix.probes.runtime.spec import failed, on_each_device, passed, unknown
    from opmatrix.schema import CheckResult, Runtime, Waiver

    same = on_each_device([("x:0", "U0", passed("4 dtypes ok")), ("x:1", "U1", passed("4 dtypes ok"))])
    assert same.result is CheckResult.passed and same.evidence.startswith("on each of 2 devices (x:0, x:1)")
    mixed = on_each_device([("x:0", "U0", passed("ok")), ("x:1", "U1", unknown("no API")), ("x:2", "U2", failed("off by 1%"))])
    assert mixed.result is CheckResult.failed
    assert mixed.evidence.startswith("x:2 (U2) fails: off by 1%; x:1 (U1) could not decide: no API; x:0 (U0) passes")
    assert [(d.device, d.uuid, d.result) for d in mixed.devices] == [
        ("x:0", "U0", CheckResult.passed), ("x:1", "U1", CheckResult.unknown), ("x:2", "U2", CheckResult.failed)]
    check = by_name("kernel").record(mixed)
    assert check.devices == mixed.devices and check.advice  # the record carries each device

    today = datetime.date(2026, 12, 3)
    result = evaluate_check("kernel", rid="r", level=1, blocking=True, runtime=Runtime(checks=[check]),
                            book=WaiverBook([], today))
    assert result.status.value == "fail" and result.checked == 3 and result.failed == 2
    assert "check:kernel@x:2: failed: off by 1% [U2]" in result.message
    # a waiver may name the bad device alone: the other device's unknown still stands (unproven)
    waiver = Waiver.model_validate({"reason": "bad board RMA'd", "expires": "2027-01-01", "owner": "lab",
                                    "match": {"op": "check:kernel@x:2"}})
    waived = evaluate_check("kernel", rid="r", level=1, blocking=True, runtime=Runtime(checks=[check]),
                            book=WaiverBook([waiver], today))
    assert (waived.waived, waived.failed, waived.status.value) == (1, 1, "unknown"), waived

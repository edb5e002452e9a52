"""Runner fault handling: crashes, aborts, hangs, OOM and poisoned devices land on the unit that ran."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from opmatrix.probes.handlers import TASK_HANDLERS
from opmatrix.probes.runner import Skip, Task, WorkerPoisoned, run
from opmatrix.probes.runner.pool import last_words
from opmatrix.probes.runner.task import resolve_handler
from opmatrix.schema import RuntimeRecord, TaskRecord
from opmatrix.schema.workloads import WorkloadRecord
from tests.runner_handlers import HANDLERS, make_tasks


def _records(out: Path) -> dict[str, dict]:
    lines = (out / "journal.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "header"
    records = [json.loads(line) for line in lines[1:]]
    ids = [r["task"] for r in records]
    assert len(ids) == len(set(ids)), "a task was recorded twice"
    return {r["task"]: r for r in records}


def _outcomes(record: dict) -> dict[str, str]:
    return {c["op"].rsplit(".", 1)[1]: c["result"]["outcome"] for c in record["cells"]}


FAULTS = {
    "t1": {"u1": "segv"},
    "t2": {"u0": "abort"},
    "t3": {"u2": "hang"},
    "t4": {"u1": "oom"},
    "t5": {"u1": "poison"},
    "t6": {"u0": "oom-escape"},
    "t7": {"u2": "exit"},
    "t8": {"u0": "segv", "u1": "segv", "u2": "segv", "u3": "segv"},
}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("faults")
    tasks = make_tasks(10, units=4, faults=FAULTS)
    # t9 prepares for longer than the unit deadline before its first unit: not a hang
    tasks[9] = Task(tasks[9].id, "test", {**tasks[9].payload, "prepare": 3.0}, order=9)
    summary = run(tasks, command="runner test", backend="cpu", out_dir=out, workers=2, timeout=2.0, handlers=HANDLERS, progress=False)
    return out, summary


def test_every_fault_is_recorded_on_the_unit_that_ran(faulty_run: tuple[Path, object]) -> None:
    """Each injected fault is the outcome of exactly its unit; every other unit ran and is ok."""
    out, summary = faulty_run
    records = _records(out)
    assert sorted(records) == sorted(t.id for t in make_tasks(10))
    expected_outcome = {
        "segv": "crashed",
        "abort": "crashed",
        "exit": "crashed",
        "hang": "hung",
        "oom": "oom",
        "oom-escape": "oom",
        "poison": "poisoned",
    }
    for i in range(10):
        task = f"t{i}"
        want = {f"u{k}": "ok" for k in range(4)}
        want.update({u: expected_outcome[m] for u, m in FAULTS.get(task, {}).items()})
        assert _outcomes(records[f"{task}|float32"]) == want, task


def test_crash_records_signal_and_stack(faulty_run: tuple[Path, object]) -> None:
    """A crash keeps the signal name and the worker's last Python stack; a hang its stack too."""
    out, _ = faulty_run
    records = _records(out)
    cells = {c["op"]: c["result"] for r in records.values() for c in r["cells"]}
    segv = cells["test.t1.u1"]["error"]
    assert segv["signal"] == "SIGSEGV"
    assert "Segmentation fault" in segv["message"] and "_misbehave" in segv["message"]
    assert cells["test.t2.u0"]["error"]["signal"] == "SIGABRT"
    assert cells["test.t7.u2"]["error"]["message"].startswith("worker exited with code 3")
    hung = cells["test.t3.u2"]["error"]["message"]
    # the deadline is the run's --timeout 2 scaled by the machine measured at the start: never below it
    limit = re.match(r"no progress within ([0-9.]+)s", hung)
    assert limit is not None and float(limit.group(1)) >= 2 and "_misbehave" in hung, hung[:80]


def test_a_task_faulting_on_every_unit_terminates(faulty_run: tuple[Path, object]) -> None:
    """After three faults the rest of the task is recorded with the last fault, without running."""
    out, summary = faulty_run
    record = _records(out)["t8|float32"]
    assert _outcomes(record) == {"u0": "crashed", "u1": "crashed", "u2": "crashed", "u3": "crashed"}
    # three that crashed, one that recorded the rest (and one more when the first crash was retried
    # in a fresh worker, as a crash in a worker that had run other tasks first is)
    retried = "(the second time" in record["cells"][0]["result"]["error"]["message"]
    assert record["attempts"] == 4 + retried


def test_a_record_that_is_no_journal_record_is_the_tasks_error(tmp_path: Path) -> None:
    """The runner parses what a worker sends into its journal model once; a handler that returns
    another model gets its task's fault record (error, naming why), journaled as a model too."""
    from opmatrix.schema.journalfile import scan_journal

    good, bad = make_tasks(2, units=1)
    bad = Task(bad.id, "test", {**bad.payload, "bad_record": True}, order=bad.order)
    summary = run([good, bad], command="runner test", backend="cpu", out_dir=tmp_path, workers=1, timeout=10.0,
                  handlers=HANDLERS, progress=False)
    assert summary.probed == 2
    scan = scan_journal(tmp_path / "journal.jsonl")
    records = {r.task: r for r in scan.by_task.values() if isinstance(r, TaskRecord)}
    assert records["t0|float32"].outcome.value == "ok" and records["t0|float32"].evidence_key
    failed = records["t1|float32"]
    assert failed.outcome.value == "error" and failed.attempts == 2 and failed.evidence_key
    assert failed.error is not None and "unknown record kind 'bogus'" in failed.error.message
    for line in (tmp_path / "journal.jsonl").read_text().splitlines()[1:]:  # written as the models print
        assert TaskRecord.model_validate_json(line).model_dump_json() == line


def test_summary_counts_faults_and_restarts(faulty_run: tuple[Path, object]) -> None:
    """The summary says how many cells faulted, and each replaced worker is a restart."""
    _, summary = faulty_run
    assert (summary.planned, summary.recorded, summary.probed, summary.aborted) == (10, 10, 10, False)
    assert summary.faults == {"crashed": 7, "hung": 1, "oom": 2, "poisoned": 1}
    # oom handled inside the handler needs no restart; the other 9 faults each cost a worker, and
    # so does each crash retried in a fresh worker (one that had run other units first)
    assert summary.restarts == 9 + summary.retried
    assert summary.exit_code == 0


def test_no_unit_board_outlives_its_worker(faulty_run: tuple[Path, object]) -> None:
    """Crashed, hung, replaced and stopped workers all leave their logs and no board file."""
    out, _ = faulty_run
    assert list((out / "workers").glob("w*.log"))
    assert not list((out / "workers").glob("*.unit"))


def _one_task(tmp_path: Path, faults: dict[str, str], units: int = 6) -> tuple[dict, list[str], object]:
    """One task in one worker: its record, the units that actually ran (in order), the summary."""
    runs = tmp_path / "runs.txt"
    task = make_tasks(1, units=units, faults={"t0": faults})[0]
    task = Task(task.id, task.kind, {**task.payload, "runs": str(runs)})
    summary = run([task], command="runner test", backend="cpu", out_dir=tmp_path / "out", workers=1, timeout=10.0, handlers=HANDLERS,
                  progress=False)
    return _records(tmp_path / "out")["t0|float32"], runs.read_text().split(), summary


def test_units_finished_before_a_crash_are_not_run_again(tmp_path: Path) -> None:
    """Two crashes in one task: the units before each are restored from their checkpoints, not
    run again. u0 crashed a fresh worker (the input's fault: recorded); u4 crashed one that had
    run u1..u3 first, so it runs once more in a fresh worker, and crashes again."""
    record, runs, summary = _one_task(tmp_path, {"u0": "segv", "u4": "segv"}, units=6)
    assert _outcomes(record) == {"u0": "crashed", "u1": "ok", "u2": "ok", "u3": "ok", "u4": "crashed", "u5": "ok"}
    assert runs == ["t0.u0", "t0.u1", "t0.u2", "t0.u3", "t0.u4", "t0.u4", "t0.u5"], runs
    assert (summary.restarts, summary.retried) == (3, 1)
    first = record["cells"][0]["result"]["error"]["message"]
    assert "(the second time" not in first
    message = record["cells"][4]["result"]["error"]["message"]
    assert message.startswith("worker died by SIGSEGV") and "(the second time: it had first crashed (SIGSEGV) a worker that had run 3 units before it" in message


def test_a_crash_from_what_the_worker_accumulated_passes_in_a_fresh_worker(tmp_path: Path) -> None:
    """u4 kills a worker only after it has run four units (a JIT out of code memory, a leak): in a
    fresh worker it passes, and its cell says what happened the first time; nothing else re-runs."""
    record, runs, summary = _one_task(tmp_path, {"u4": "worn:4"}, units=6)
    assert _outcomes(record) == {f"u{i}": "ok" for i in range(6)}
    assert runs == ["t0.u0", "t0.u1", "t0.u2", "t0.u3", "t0.u4", "t0.u4", "t0.u5"], runs
    note = record["cells"][4]["result"]["note"]
    assert note.startswith("passed in a fresh worker; it had crashed (SIGSEGV) a worker that had run 4 units"), note
    assert (summary.restarts, summary.retried, summary.faulted) == (1, 1, 0)


def test_failed_health_check_after_a_fault_replaces_the_worker(tmp_path: Path) -> None:
    """A unit after which the device is unusable is recorded poisoned; later tasks get a fresh worker."""
    tasks = make_tasks(3, faults={"t0": {"u1": "sick"}})
    summary = run(
        tasks,
        command="runner test", backend="tests.runner_handlers:SickCpuAdapter",
        out_dir=tmp_path,
        workers=1,
        timeout=5.0,
        handlers=HANDLERS,
        progress=False,
    )
    records = _records(tmp_path)
    assert _outcomes(records["t0|float32"]) == {"u0": "ok", "u1": "poisoned", "u2": "ok"}
    assert _outcomes(records["t1|float32"]) == {"u0": "ok", "u1": "ok", "u2": "ok"}
    assert summary.restarts == 1


def test_run_that_only_crashes_stops_at_the_restart_cap(tmp_path: Path) -> None:
    """Every unit crashing: the run aborts at the cap with a message naming it; exit code 1."""
    every = {f"t{i}": {f"u{k}": "segv" for k in range(3)} for i in range(20)}
    summary = run(
        make_tasks(20, faults=every),
        command="runner test", backend="cpu",
        out_dir=tmp_path,
        workers=1,
        timeout=5.0,
        max_restarts=3,
        handlers=HANDLERS,
        progress=False,
    )
    assert summary.aborted and summary.exit_code == 1
    assert summary.restarts == 3
    assert "--max-restarts" in summary.message and "3 worker restarts" in summary.message
    assert summary.recorded < 20


def test_backend_that_cannot_set_up_aborts_with_its_error(tmp_path: Path) -> None:
    """A worker whose setup fails stops the run with the setup error instead of retrying forever."""
    summary = run(
        make_tasks(2), command="runner test", backend="no_such_backend", out_dir=tmp_path, workers=1, handlers=HANDLERS, progress=False
    )
    assert summary.aborted and summary.recorded == 0
    assert "could not set up backend 'no_such_backend'" in summary.message and "UnknownBackend" in summary.message


def test_unknown_task_kind_is_refused_before_the_run(tmp_path: Path) -> None:
    """A task kind without a handler is refused by name before any worker starts or anything is written."""
    with pytest.raises(ValueError, match="no handler for task kind 'nope' \\(known: test\\)"):
        run([Task("x|float32", "nope")], command="runner test", backend="cpu", out_dir=tmp_path / "out", workers=1, handlers=HANDLERS,
            progress=False)
    assert not (tmp_path / "out").exists()


def test_fault_record_for_each_kind() -> None:
    """Each suite's handler builds the record of its task that faulted with everything skipped."""
    handlers = {kind: resolve_handler(target) for kind, target in TASK_HANDLERS.items()}
    op = handlers["op"].fault_record(Task("softmax|bfloat16", "op"), Skip("hung", "no progress", None))
    assert isinstance(op, TaskRecord)
    assert (op.source, str(op.dtype), str(op.outcome)) == ("softmax", "bfloat16", "hung")
    task = Task("rt:streams", "runtime", {"check": "streams", "level": 1})
    rt = handlers["runtime"].fault_record(task, Skip("crashed", "x", "SIGSEGV"))
    assert isinstance(rt, RuntimeRecord)
    assert (rt.check.name, rt.check.level, str(rt.check.result)) == ("streams", 1, "unknown")
    task = Task("workload:mlp|float32|eager", "workload", {"workload": "mlp", "dtype": "float32", "mode": "eager"})
    wl = handlers["workload"].fault_record(task, Skip("oom", "out of memory"))
    assert isinstance(wl, WorkloadRecord) and str(wl.result.outcome) == "oom"
    with pytest.raises(ValueError, match="expected source\\|dtype"):
        handlers["op"].fault_record(Task("softmax", "op"), Skip("hung", ""))
    with pytest.raises(ValueError, match="expected one of"):
        Skip("slow", "")


def test_worker_poisoned_carries_unit() -> None:
    """The exception a handler raises names the unit and the reason."""
    exc = WorkerPoisoned("s0/strided", "device lost")
    assert (exc.unit, exc.message) == ("s0/strided", "device lost") and "s0/strided" in str(exc)


def test_last_words_keeps_the_fatal_block() -> None:
    """Crash messages keep the fault header and innermost frames, not the module list."""
    log = (
        "noise\n" * 50
        + "terminate called\nFatal Python error: Aborted\n\nStack:\n  File x\n\nExtension modules: a, b\n"
    )
    words = last_words(log)
    assert words.startswith("noise") and "terminate called" in words and "Extension modules" not in words
    assert last_words("plain tail") == "plain tail"


def test_a_worker_of_another_generation_stops_the_run_and_adds_no_record(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record's worker is checked against the run's header: a second worker that probes g1
    in a g2 run (a pool started the wrong workers) stops the run, naming it, before it records."""
    monkeypatch.setenv("OPMATRIX_TEST_GEN_MARK", str(tmp_path / "first-worker"))
    summary = run(make_tasks(6, sleep=0.2), command="runner test", backend="tests.runner_handlers:SplitGenerationAdapter",
                  generation="g2", out_dir=tmp_path / "out", workers=2, timeout=20.0, handlers=HANDLERS, progress=False)
    assert summary.aborted, summary
    assert "probes tests.runner_handlers:SplitGenerationAdapter generation g1" in summary.message, summary.message
    assert "the run is for generation g2" in summary.message, summary.message
    lines = [json.loads(x) for x in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    # the two workers start together: when the g1 one is ready first the run stops before any header;
    # else the header is the g2 worker's. Either way nothing of the g1 worker is recorded
    assert not lines or (lines[0]["generation"] == "g2" and "|gen=g2|" in lines[0]["evidence_key"] + "|"), lines[:1]
    wrong = int(summary.message.split("worker ", 1)[1].split(":", 1)[0])
    assert all(line.get("worker") != wrong for line in lines[1:]), lines  # nothing of the g1 worker


def test_every_record_names_the_machine_that_ran_it(tmp_path: Path) -> None:
    """Beside the device, a record names its machine: the host name (and the Ray node id, which a
    local run has none of), so that cells from several nodes can be told apart."""
    import socket

    run(make_tasks(2), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, timeout=20.0,
        handlers=HANDLERS, progress=False)
    records = list(_records(tmp_path).values())
    assert records and all(r["host"] == socket.gethostname() and r["node"] is None for r in records), records

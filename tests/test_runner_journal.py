"""The journal loses nothing: kill -9 then --resume, Ctrl-C, torn lines, evidence-key reuse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opmatrix.probes.runner import run
from opmatrix.probes.runner.journal import Journal, open_for_resume
from opmatrix.probes.runner.worker import code_hash
from tests.runner_handlers import HANDLERS, make_tasks

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "runner_handlers.py"


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]


def _task_ids(out: Path) -> list[str]:
    return [r["task"] for r in _lines(out) if r["kind"] != "header"]


def _start(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test session started in the background (`make test &`, some CI agents) ignores
        # SIGINT, and Python keeps an inherited SIG_IGN: the Ctrl-C test would see no Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_records(out: Path, count: int, proc: subprocess.Popen[str], limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        path = out / "journal.jsonl"
        if path.exists() and path.read_text().count('"kind":"task"') >= count:
            return
        assert proc.poll() is None, f"run ended early: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records after {limit}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_sigkill_of_the_orchestrator_then_resume_records_each_task_once(tmp_path: Path) -> None:
    """kill -9 half-way: workers die with it; --resume leaves exactly one record per planned task."""
    out, pids = tmp_path / "out", tmp_path / "pids"
    pids.mkdir()
    args = ("--tasks", "12", "--units", "3", "--sleep", "0.1", "--workers", "2", "--pid-dir", str(pids))
    proc = _start(out, *args)
    _wait_for_records(out, 4, proc)
    proc.kill()
    proc.wait()
    done_before = set(_task_ids(out))
    assert 4 <= len(done_before) < 12
    time.sleep(0.5)
    workers = [int(p.name) for p in pids.iterdir()]
    assert workers and not [pid for pid in workers if _alive(pid)], "a worker outlived its orchestrator"

    resumed = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args, "--resume"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    ids = _task_ids(out)
    assert sorted(ids) == sorted(t.id for t in make_tasks(12))
    assert sum(1 for r in _lines(out) if r["kind"] == "header") == 1


def test_ctrl_c_leaves_a_complete_journal_and_says_how_to_resume(tmp_path: Path) -> None:
    """SIGINT: exit 130, only complete lines, a resume hint; resuming finishes the rest."""
    out = tmp_path / "out"
    args = ("--tasks", "10", "--sleep", "0.1", "--workers", "2")
    proc = _start(out, *args)
    _wait_for_records(out, 3, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    # the command the caller passed (never read from sys.argv by the runner), with --resume added
    assert f"interrupted; continue with: python tests/runner_handlers.py {out} {' '.join(args)} --resume" in stderr
    text = (out / "journal.jsonl").read_text()
    assert text.endswith("\n")
    before = _task_ids(out)  # every line parses
    assert 3 <= len(before) < 10
    summary = run(
        make_tasks(10, sleep=0.1), command="runner test", backend="cpu", out_dir=out, workers=2, resume=True, handlers=HANDLERS, progress=False
    )
    assert (summary.resumed, summary.probed) == (len(before), 10 - len(before))
    assert sorted(_task_ids(out)) == sorted(t.id for t in make_tasks(10))


def test_resume_cuts_a_torn_last_line(tmp_path: Path) -> None:
    """A write cut short by a kill is dropped so the next record starts on its own line."""
    path = tmp_path / "journal.jsonl"
    path.write_text('{"kind":"header","backend":"cpu","planned":2}\n{"kind":"task","task":"a|float32"}\n{"kind":"ta')
    state = open_for_resume(path)
    assert list(state.records) == ["a|float32"] and state.dropped_tail
    journal = Journal(path)
    journal.append('{"kind":"task","task":"b|float32"}')
    journal.close()
    assert [json.loads(line)["task"] for line in path.read_text().splitlines()[1:]] == ["a|float32", "b|float32"]


def test_resume_rejects_a_corrupt_line_in_the_middle(tmp_path: Path) -> None:
    """Only the last line may be torn; garbage before it is named, not silently dropped."""
    path = tmp_path / "journal.jsonl"
    path.write_text('{"kind":"header","backend":"cpu","planned":2}\nnot json\n{"kind":"task","task":"a|float32"}\n')
    with pytest.raises(ValueError, match=r"journal.jsonl:2: not JSON .*remove line 2"):
        open_for_resume(path)


def test_resume_runs_only_what_is_missing(tmp_path: Path) -> None:
    """A resumed run with more planned tasks probes just the new ones, with no duplicates."""
    run(make_tasks(3), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, progress=False)
    summary = run(
        make_tasks(5), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, resume=True, handlers=HANDLERS, progress=False
    )
    assert (summary.resumed, summary.probed, summary.recorded) == (3, 2, 5)
    assert sorted(_task_ids(tmp_path)) == sorted(t.id for t in make_tasks(5))


def test_unchanged_rerun_reuses_records_by_evidence_key(tmp_path: Path) -> None:
    """Same build, same op source, same task: copied from the last journal, not re-probed."""
    options = {"op_source_hash": "abc"}
    first = run(
        make_tasks(4), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, options=options, progress=False
    )
    keys = {r["task"]: r["evidence_key"] for r in _lines(tmp_path) if r["kind"] == "task"}
    assert first.probed == 4 and len(set(keys.values())) == 4

    again = run(
        make_tasks(4), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, options=options, progress=False
    )
    assert (again.reused, again.probed, again.recorded) == (4, 0, 4)
    assert {r["task"]: r["evidence_key"] for r in _lines(tmp_path) if r["kind"] == "task"} == keys
    assert (tmp_path / "journal.jsonl.prev").exists()

    changed = make_tasks(4)
    changed[1] = make_tasks(4, units=2)[1]  # a different sample spec for one task
    partly = run(
        changed, command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, options=options, progress=False
    )
    assert (partly.reused, partly.probed) == (3, 1)

    new_source = run(
        make_tasks(4),
        command="runner test", backend="cpu",
        out_dir=tmp_path,
        workers=1,
        handlers=HANDLERS,
        options={"op_source_hash": "def"},
        progress=False,
    )
    assert (new_source.reused, new_source.probed) == (0, 4)


def test_devices_are_spread_over_workers(tmp_path: Path) -> None:
    """--devices 0,1: worker i probes devices[i % 2], so both devices get work."""
    run(
        make_tasks(6, sleep=0.2),
        command="runner test", backend="cpu",
        out_dir=tmp_path,
        workers=2,
        devices=["0", "1"],
        handlers=HANDLERS,
        progress=False,
    )
    notes = {c["result"]["note"] for r in _lines(tmp_path) if r["kind"] == "task" for c in r["cells"]}
    assert notes == {"device=0", "device=1"}


def test_code_hash_follows_the_probe_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Editing a handler's sources changes the evidence; a missing module is named, not fatal."""
    pkg = tmp_path / "probepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("def handle(*a): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_hash(["probepkg.engine"])
    assert code_hash(["probepkg.engine"]) == before
    (pkg / "engine.py").write_text("def handle(*a): return 1\n")
    assert code_hash(["probepkg.engine"]) != before
    assert code_hash(["no_such_pkg.engine"]) != code_hash(["other_missing.engine"])


def test_unchanged_rerun_of_a_host_backend_starts_no_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu's identity follows from the installed software: a re-run reuses all without a worker."""
    options = {"op_source_hash": "abc"}

    def again() -> object:
        return run(
            make_tasks(4), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, options=options, progress=False
        )

    first = again()
    assert first.probed == 4 and first.startup_seconds is not None
    keys = {r["task"]: r["evidence_key"] for r in _lines(tmp_path) if r["kind"] == "task"}

    cached = again()
    assert (cached.reused, cached.probed, cached.startup_seconds) == (4, 0, None)
    assert {r["task"]: r["evidence_key"] for r in _lines(tmp_path) if r["kind"] == "task"} == keys
    header = _lines(tmp_path)[0]
    assert header["kind"] == "header" and header["evidence_key"] and header["evidence"]["torch_version"]
    assert header["command"] == "runner test"  # what the caller said the run stands for

    # a variable that steers the backend changes the fingerprint: a worker confirms the identity
    monkeypatch.setenv("OPMATRIX_REFACCEL_DRIVER", "ok")
    confirmed = again()
    assert (confirmed.reused, confirmed.probed) == (4, 0) and confirmed.startup_seconds is not None


def test_the_orchestrator_never_imports_torch(tmp_path: Path) -> None:
    """Messages from workers hold plain values: the parent stays light (torch costs seconds of CPU)."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from opmatrix.probes.runner import run\n"
        "from tests.runner_handlers import HANDLERS, make_tasks\n"
        "if __name__ == '__main__':\n"
        f"    s = run(make_tasks(2), command='runner test', backend='cpu', out_dir={str(tmp_path)!r}, workers=1, handlers=HANDLERS,"
        " progress=False)\n"
        "    assert s.probed == 2, s\n"
        "    print('torch' in sys.modules)\n"
    )
    script = tmp_path / "parent.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_tasks_an_earlier_run_timed_go_longest_first(tmp_path: Path) -> None:
    """A long task started last idles every other worker: known durations schedule it first."""
    timed = {"t1|float32": 5.0, "t3|float32": 9.0, "t0|float32": 1.0}  # t2 was never timed
    lines = [json.dumps({"kind": "header", "backend": "cpu", "planned": 4})]
    lines += [json.dumps({"kind": "task", "task": t, "outcome": "crashed", "seconds": s}) for t, s in timed.items()]
    (tmp_path / "journal.jsonl").write_text("\n".join(lines) + "\n")
    summary = run(make_tasks(4), command="runner test", backend="cpu", out_dir=tmp_path, workers=1, handlers=HANDLERS, progress=False)
    assert summary.probed == 4  # faulted records are timed, never reused
    assert _task_ids(tmp_path) == ["t2|float32", "t3|float32", "t1|float32", "t0|float32"]


def test_engine_options_refuse_an_unknown_key(tmp_path: Path) -> None:
    """A misspelt run option is refused by name before anything is written (it was dropped silently)."""
    with pytest.raises(ValueError, match=r"^run options: op_source refused \(known: op_source_hash\)$"):
        run(make_tasks(1), command="runner test", backend="cpu", out_dir=tmp_path / "o", workers=1, handlers=HANDLERS,
            options={"op_source": "abc"}, progress=False)
    assert not (tmp_path / "o").exists()

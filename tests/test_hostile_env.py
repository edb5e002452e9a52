"""The gate and the probe in a hostile CI: shared caches, full disks, special files, time zones, stray settings.

One group per class of problem (issue 42): a poisoned shared cache is a miss, never a hang; a full
disk stops the run naming it, never a cell; a stream output stays a stream; the date is UTC's; a
setting that means nothing is refused; every argument is checked before any work.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opmatrix.schema import UsageError, load_matrix
from opmatrix.schema.files import is_stream, read_cache_entry, read_cache_json, write_cache_entry, write_output

from .conftest import ROOT, run_cli
from .test_gate_sound import G2, _write
from .test_gate_support import g2_matrix

TRACEBACK = "Traceback (most recent call last)"


# -- 1. cache reads are bounded and typed ---------------------------------------------------------


def test_a_fifo_cache_entry_is_a_miss_said_once_never_a_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = tmp_path / "e.json"
    os.mkfifo(entry)
    started = time.monotonic()
    assert read_cache_entry(entry) is None and read_cache_json(entry) is None
    assert time.monotonic() - started < 5  # opening a FIFO for reading would wait for a writer
    err = capsys.readouterr().err
    assert err.count(str(entry)) == 1 and "FIFO" in err


def test_a_link_to_dev_zero_a_huge_or_torn_entry_is_a_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zero, big, torn, good = (tmp_path / n for n in ("zero.json", "big.json", "torn.json", "good.json"))
    zero.symlink_to("/dev/zero")
    big.write_bytes(b"[" + b"0," * 1000 + b"0]")
    torn.write_text('{"a": [1, 2')
    good.write_text('{"a": [1, 2]}')
    assert read_cache_entry(zero) is None
    assert read_cache_entry(big, limit=100) is None
    assert read_cache_json(torn) is None
    assert read_cache_json(good) == {"a": [1, 2]}
    err = capsys.readouterr().err
    assert "symbolic link" in err and "over 100 bytes" in err and "not valid JSON" in err


def test_a_cache_write_replaces_a_fifo_instead_of_writing_into_it(tmp_path: Path) -> None:
    entry = tmp_path / "e.json"
    os.mkfifo(entry)
    assert write_cache_entry(entry, "{}")  # writing into the FIFO would block until someone read it
    assert entry.is_file() and not entry.is_symlink() and entry.read_text() == "{}"


def test_the_gate_with_every_cache_entry_a_fifo_neither_hangs_nor_changes_its_verdict(tmp_path: Path) -> None:
    matrix = _write(tmp_path, "g2.yaml", g2_matrix())
    env = {**os.environ, "OPMATRIX_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPMATRIX_NO_CACHE", None)

    def gate() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "opmatrix", "gate", "--matrix", matrix, "--contract", G2],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)

    clean = gate()
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert entries, "the gate cached nothing: the test would prove nothing"
    for p in entries:
        p.unlink()
        os.mkfifo(p)
    poisoned = gate()  # a hang is subprocess.TimeoutExpired
    assert poisoned.returncode == clean.returncode == 0, poisoned.stderr
    assert "FIFO" in poisoned.stderr and TRACEBACK not in poisoned.stderr
    assert all(p.is_file() for p in entries)  # rebuilt as regular files
    assert load_matrix(matrix).cell_count() == g2_matrix().cell_count()


def test_an_emptied_or_foreign_opinfo_index_is_rebuilt_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An index naming no op (emptied), one whose ops do not hash to its digest, or another
    torch's: each is a miss, said once, so `--ops add` never fails with "'add' matches no OpInfo"."""
    from opmatrix.probes.ops import source

    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPMATRIX_NO_CACHE", raising=False)
    source._index_path.cache_clear()
    source._index.cache_clear()
    monkeypatch.setattr(source, "_ADOPTED", [])
    path = source._index_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    ops = [["add", "add"]]
    good = {"torch": source._installed_torch(), "git": "", "ops": ops, "digest": source._ops_digest(ops)}
    cases = {
        "names no OpInfo": {**good, "ops": [], "digest": source._ops_digest([])},
        "does not match its own digest": {**good, "ops": [["sub", "sub"]]},
        "not the installed": {**good, "torch": "1.0.0"},
    }
    try:
        for said, data in cases.items():
            path.write_text(json.dumps(data))
            source._index.cache_clear()
            assert not source.index_cached()
            assert said in capsys.readouterr().err
        path.write_text(json.dumps(good))
        source._index.cache_clear()
        assert source.index_cached() and [e.full_name for e in source.op_names()] == ["add"]
    finally:
        source._index_path.cache_clear()
        source._index.cache_clear()


def test_a_run_identity_that_is_a_fifo_is_a_miss_and_replaced(tmp_path: Path) -> None:
    from opmatrix.probes.runner.identity import IDENTITY_FILE, cached_identity, store_identity

    os.mkfifo(tmp_path / IDENTITY_FILE)
    assert cached_identity(tmp_path, "fp") is None
    from opmatrix.probes.runner.evidence import WorkerIdentity

    store_identity(tmp_path, "fp", WorkerIdentity(torch="x", adapter="cpu", torch_version="x"))
    assert (tmp_path / IDENTITY_FILE).is_file() and "fp" in (tmp_path / IDENTITY_FILE).read_text()


def test_an_overload_cache_that_is_a_fifo_is_empty_and_replaced(tmp_path: Path) -> None:
    from opmatrix.probes.ops.overloadcache import OverloadCache

    path = tmp_path / "overloads.json"
    os.mkfifo(path)
    cache = OverloadCache(str(path))
    assert cache.known == {}
    cache.put("k", ["aten.add.Tensor"])
    cache.flush()
    assert json.loads(path.read_text()) == {"k": ["aten.add.Tensor"]}


# -- 2. infrastructure faults are not op evidence --------------------------------------------------


@pytest.mark.parametrize("mode", ["nospace", "nospace-exit"])
def test_a_full_disk_stops_the_run_naming_it_and_resume_finishes(tmp_path: Path, mode: str) -> None:
    """A unit whose write fails with ENOSPC (reported, or the worker dying of it): exit 2 naming the
    disk, no record blames the unit, the journal is kept, and --resume records every task."""
    from opmatrix.probes.runner import run
    from tests.runner_handlers import HANDLERS, make_tasks

    out = tmp_path / "out"
    tasks = make_tasks(4, units=2, faults={"t1": {"u1": mode}})
    summary = run(tasks, command="hostile test", backend="cpu", out_dir=out, workers=1, timeout=10.0,
                  handlers=HANDLERS, progress=False)
    assert summary.exit_code == 2 and "disk is full" in summary.infrastructure, summary.message
    lines = (out / "journal.jsonl").read_text().splitlines()
    assert not any("No space" in line or "t1|" in json.loads(line).get("task", "") for line in lines[1:])
    assert sum(f for f in summary.faults.values()) == 0
    again = run(make_tasks(4, units=2), command="hostile test", backend="cpu", out_dir=out, workers=1, timeout=10.0,
                handlers=HANDLERS, progress=False, resume=True)
    assert again.exit_code == 0 and again.recorded == 4 and again.resumed >= 1


def test_infrastructure_cause_reads_the_workers_words_and_the_machine(tmp_path: Path) -> None:
    from opmatrix.probes.runner.infra import MemoryWatch, infrastructure_cause

    said = infrastructure_cause("worker exited with code 1; its last output:\nOSError: [Errno 28] No space left on device",
                                None, [tmp_path])
    assert said is not None and "No space left on device" in said
    assert infrastructure_cause("worker died by SIGSEGV", "SIGSEGV", [tmp_path], MemoryWatch()) is None


# -- 3. streams are streams ----------------------------------------------------------------------


def test_a_link_to_an_open_descriptor_is_written_through_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "captured.txt"
    link = tmp_path / "stdout-link"
    with open(target, "w") as fh:
        link.symlink_to(f"/proc/self/fd/{fh.fileno()}")
        assert is_stream(link)
        write_output(link, "summary\n")
    assert link.is_symlink() and target.read_text() == "summary\n"


def test_a_link_to_a_regular_file_stays_a_link_and_its_target_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    write_output(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "link"])
def test_gate_summary_to_stdout_redirected_to_a_file_reaches_it(tmp_path: Path, name: str) -> None:
    """As root too: /dev/stdout, /dev/fd/1 and a link to /proc/self/fd/1 are written in place
    (with stdout redirected to a file they resolve to that file, which a rename would cut off)."""
    matrix = _write(tmp_path, "g2.yaml", g2_matrix())
    if name == "link":
        (tmp_path / "link").symlink_to("/proc/self/fd/1")
        name = str(tmp_path / "link")
    captured = tmp_path / "stdout.txt"
    with open(captured, "w") as fh:
        done = subprocess.run([sys.executable, "-m", "opmatrix", "gate", "--matrix", matrix, "--contract", G2,
                               "--summary", name], stdout=fh, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    text = captured.read_text()
    assert "opmatrix gate: PASS" in text and "requirement" in text.lower()
    assert Path("/dev/stdout").is_symlink() or Path("/dev/stdout").is_char_device()
    if name.endswith("link"):
        assert Path(name).is_symlink()


def test_the_stream_rule_is_documented() -> None:
    text = (ROOT / "docs" / "seals.md").read_text()
    assert "/dev/fd/" in text and "/proc/self/fd" in text


# -- 4. time is UTC --------------------------------------------------------------------------------


def test_the_gates_today_is_utc_whatever_the_runners_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    from opmatrix.ci.evaluate import utc_today

    seen = set()
    for zone in ("Pacific/Kiritimati", "Etc/GMT+12", "UTC"):  # UTC+14 and UTC-12: two dates at most instants
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        seen.add(utc_today())
    monkeypatch.delenv("TZ")
    time.tzset()
    assert seen == {dt.datetime.now(dt.timezone.utc).date()}


def test_an_expired_waiver_names_the_date_it_was_judged_on() -> None:
    from opmatrix.ci import evaluate_contract

    from .test_gate_waivers import BF16_REJECTED, MM, contract, matrix, waiver

    expired = waiver("aten.mm.*", expires=dt.date(2026, 11, 30), dtype="bfloat16")
    result = evaluate_contract(matrix(BF16_REJECTED), contract(MM, waivers=[expired]), today=dt.date(2026, 12, 1))
    assert any("judged on 2026-12-01, UTC" in line for line in result.blocking)


# -- 5. nothing is ignored silently ----------------------------------------------------------------


@pytest.mark.parametrize("body", ["raise SystemExit(0)", "import argparse; argparse.ArgumentParser().parse_args()",
                                  "exit()"])
def test_a_factory_that_exits_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    from opmatrix.explanation import placement
    from opmatrix.options import ExplainOptions

    (tmp_path / "exitfac42.py").write_text(f"def make():\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    matrix = _write(tmp_path, "g2.yaml", g2_matrix())
    with pytest.raises(UsageError, match=r"exitfac42:make called exit"):
        placement(ExplainOptions(matrix=matrix, model="exitfac42:make"))


def test_a_module_that_exits_on_import_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opmatrix.explanation import placement
    from opmatrix.options import ExplainOptions

    (tmp_path / "exitmod42.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=r"importing 'exitmod42' called exit\(3\)"):
        placement(ExplainOptions(matrix=_write(tmp_path, "g2.yaml", g2_matrix()), model="exitmod42:make"))


@pytest.mark.parametrize(("env", "said"), [
    ({"OPMATRIX_REFACCEL_FAULT": "crash:aten::no_such_op_here"}, "no_such_op_here"),
    ({"OPMATRIX_REFACCEL_DRIVER": "okay"}, "OPMATRIX_REFACCEL_DRIVER: unknown driver condition 'okay'"),
    ({"OPMATRIX_REFACCEL_BAD_DEVICE": "7:*"}, "device 7 in '7:*' is not one of refaccel's 2 devices"),
    ({"OPMATRIX_WORKER_START": "spwan"}, "OPMATRIX_WORKER_START: unknown value 'spwan'"),
    ({"OPMATRIX_PROGRESS": "bars"}, "OPMATRIX_PROGRESS: unknown value 'bars'"),
    ({"OPMATRIX_REFACCEL_GEN": "g9"}, "default generation 'g9'"),
    ({"OPMATRIX_REFACCEL_SLOWDOWN": "aten::no_such_op:1.3"}, "OPMATRIX_REFACCEL_SLOWDOWN: 'aten::no_such_op'"),
    ({"OPMATRIX_REFACCEL_SLOWDOWN": "aten::mm:0.5"}, "OPMATRIX_REFACCEL_SLOWDOWN: expected op:factor >= 1"),
    ({"OPMATRIX_NO_CACHE": "maybe"}, "OPMATRIX_NO_CACHE: unknown value 'maybe'"),
])
def test_a_setting_that_means_nothing_is_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  env: dict[str, str], said: str) -> None:
    from opmatrix.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "out"
    assert main(["probe", "--backend", "refaccel", "--ops", "add", "--dtypes", "float32", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_repeated_query_arg_is_refused(tmp_path: Path) -> None:
    done = run_cli("query", _write(tmp_path, "g2.yaml", g2_matrix()), "aten.add.Tensor", "--arg", "alpha=1",
                   "--arg", "alpha=2")
    assert done.returncode == 2 and "'alpha' is given more than once (alpha=1, alpha=2)" in done.stderr


# -- 6. every argument checked before work -------------------------------------------------------


@pytest.mark.parametrize(("argv", "said"), [
    (["--backend", "refaccel", "--devices", "5"], "--devices: refaccel has devices 0-1; 5 is not one of them"),
    (["--backend", "refaccel", "--devices", "0,7,9"], "7, 9 are not one of them"),
    (["--backend", "refaccel", "--devices", "\u00b2"], "--devices: expected all or device indices"),
    (["--backend", "refaccel", "--devices", "1,01"], "--devices: a device is named twice"),
    (["--backend", "cpu", "--devices", "1"], "--devices: cpu has device 0; 1 is not one of them"),
    (["--backend", "cuda"], "--backend cuda: "),
])
def test_a_device_the_backend_lacks_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               argv: list[str], said: str) -> None:
    import torch

    from opmatrix.cli import main

    if argv[1] == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: nothing to refuse")
    out = tmp_path / "out"
    assert main(["probe", *argv, "--ops", "add", "--dtypes", "float32", "--no-runtime", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and TRACEBACK not in err and not out.exists()


def test_the_python_api_raises_for_a_device_the_backend_lacks(tmp_path: Path) -> None:
    import opmatrix

    opts = opmatrix.ProbeOptions(backend="refaccel", ops=("add",), dtypes=("float32",), no_runtime=True, devices=("5",),
                                 out=str(tmp_path / "out"))
    with pytest.raises(UsageError, match="--devices"):
        opmatrix.probe(opts)
    assert not (tmp_path / "out").exists()


def test_a_journal_that_cannot_grow_stops_the_run_with_exit_2_and_resume_finishes(tmp_path: Path) -> None:
    """Files limited to 6 KB (RLIMIT_FSIZE: writes past it fail with EFBIG, as on a full disk): the
    run stops with exit 2 naming the write, its journal is kept, and --resume without the limit
    records every task once."""
    import resource
    import signal

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (6144, 6144))

    out = tmp_path / "out"
    script = [sys.executable, str(ROOT / "tests" / "runner_handlers.py"), str(out), "--tasks", "12", "--workers", "1"]
    cut = subprocess.run(script, capture_output=True, text=True, cwd=ROOT, timeout=600, preexec_fn=limited)
    assert cut.returncode == 2, cut.stdout + cut.stderr
    assert "stopped by the machine" in cut.stderr and "File too large" in cut.stderr and TRACEBACK not in cut.stderr
    assert (out / "journal.jsonl").exists()
    done = subprocess.run([*script, "--resume"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    tasks = [json.loads(line)["task"] for line in (out / "journal.jsonl").read_text().splitlines()[1:]]
    assert sorted(tasks) == sorted(f"t{i}|float32" for i in range(12))


def test_a_generic_privateuse1_backend_refuses_a_device_it_lacks_before_any_work(tmp_path: Path) -> None:
    """toyaccel with two devices, counted by its device module once imported (no device call)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_FAULT": "",
           "TOYACCEL_DEVICES": "2"}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "opmatrix", "probe", "--backend", "privateuse1:tests.toyaccel_plugin",
                           "--ops", "add", "--dtypes", "float32", "--no-runtime", "--devices", "0,5", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "has devices 0-1; 5 is not one of them" in done.stderr and TRACEBACK not in done.stderr
    assert not out.exists()

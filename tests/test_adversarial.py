"""Adversarial inputs: a release gate must not be fooled by its own artifacts (issue 16).

Each test is one case an adversarial user tried: bad arguments, a journal of another run, a
corrupt or torn journal, two writers in one directory, a report beside files it does not own, a
matrix cut short or edited, a gate result of another matrix, hostile strings, and the cases that
already held (unsafe YAML, aliases, duplicate keys, binary garbage, kill -9 / SIGTERM + resume).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from opmatrix.cli import main
from opmatrix.reports.names import page_names
from opmatrix.reports.synthetic import synthetic_matrix
from opmatrix.schema import ArtifactError, JournalHeader, Matrix, UsageError, dumps_model, load_matrix
from opmatrix.schema.journal import RunIdentity
from opmatrix.schema.journalfile import scan_journal
from opmatrix.schema.outdir import LOCK_FILE, claim_dir
from opmatrix.schema.text import terminal_text

from .conftest import ROOT, run_cli

PROBE = ["probe", "--backend", "refaccel", "--no-runtime", "--no-compile", "--quiet", "--dtypes", "float32"]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# -- arguments are checked before any worker starts; nothing is written -----------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timeout", "nan", "--ops", "add"], "--timeout: must be a finite number of seconds above 0, got nan"),
        (["--timeout", "inf", "--ops", "add"], "--timeout: must be a finite number of seconds above 0, got inf"),
        (["--timeout", "-1", "--ops", "add"], "--timeout: must be a finite number of seconds above 0, got -1.0"),
        (["--ops", ","], "--ops: empty; name OpInfo names or patterns"),
        (["--ops", ""], "--ops: empty; name OpInfo names or patterns"),
        (["--ops", "add", "--dtypes", ","], "--dtypes: empty; name at least one (choose from float64, float32"),
        (["--ops", "add", "--layouts", "diagonal"], "--layouts: unknown value 'diagonal' (choose from contiguous"),
        (["--ops", "add", "--generation", "g9"], "--generation: refaccel has no generation 'g9' (choose from g1, g2)"),
    ],
)
def test_bad_probe_arguments_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      args: list[str], says: str) -> None:
    base = PROBE[:-2] if "--dtypes" in args else PROBE  # a value option is given once (twice is refused)
    code, _, err = _cli(capsys, *base, *args, "--out", str(tmp_path / "out"))
    assert code == 2 and _one_line(err).startswith(says)
    assert not (tmp_path / "out").exists()


def test_a_fault_spec_that_matches_no_overload_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPMATRIX_REFACCEL_FAULT", "crash:aten::add.Tensor,hang:aten::no_such_op")
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--out", str(tmp_path / "out"))
    assert code == 2 and "'aten::no_such_op' in 'hang:aten::no_such_op' matches no operator overload" in _one_line(err)
    monkeypatch.setenv("OPMATRIX_REFACCEL_FAULT", "explode:aten::add")
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--out", str(tmp_path / "out"))
    assert code == 2 and "unknown fault mode 'explode'" in _one_line(err)
    assert not (tmp_path / "out").exists()


def test_out_root_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--out", "/")
    assert code == 2 and "is a file-system root" in _one_line(err)


# -- run identity ------------------------------------------------------------------------------


def _journal(out: Path, header: JournalHeader, *lines: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "journal.jsonl"
    path.write_text(header.model_dump_json() + "\n" + "".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _g2_header(ops: list[str]) -> JournalHeader:
    run = RunIdentity(backend="refaccel", generation="g2", adapter="opmatrix.backend.refaccel.adapter.RefaccelAdapter",
                      ops=ops, dtypes=["float32"], runtime="off", options={"compile": "off"})
    return JournalHeader(backend="refaccel", generation="g2", planned=1, run=run)


def test_resume_of_another_generation_names_what_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _journal(tmp_path / "s", _g2_header(["add"]))
    before = path.read_bytes()
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--generation", "g1", "--resume", "--out", str(tmp_path / "s"))
    line = _one_line(err)
    assert code == 2 and "--resume of a different run: generation ('g2' in the journal, 'g1' now)" in line
    assert "start fresh without --resume" in line
    assert path.read_bytes() == before and not (tmp_path / "s" / "matrix.yaml").exists()


def test_resume_with_another_selection_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _journal(tmp_path / "s", _g2_header(["add", "mul"]))
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--generation", "g2", "--resume", "--out", str(tmp_path / "s"))
    assert code == 2 and "ops (2 in the journal, 1 now; not selected now: mul)" in _one_line(err)


# -- one journal reader ------------------------------------------------------------------------


def test_corrupt_middle_line_exits_2_naming_file_line_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _journal(tmp_path / "s", _g2_header(["add"]), "{garbage", '{"kind":"task","task":"add|float32"}')
    before = path.read_bytes()
    for extra in (["--resume"], []):  # a fresh run must not move it aside and silently lose it either
        code, _, err = _cli(capsys, *PROBE, "--ops", "add", *extra, "--out", str(tmp_path / "s"))
        line = _one_line(err)
        assert code == 2 and f"{path}:2: not JSON" in line and "remove line 2" in line
        assert path.read_bytes() == before and not path.with_name("journal.jsonl.prev").exists()
    code, _, err = _cli(capsys, "merge", str(path), "--out", str(tmp_path / "m"))
    assert code == 2 and f"{path}:2: not JSON" in _one_line(err)


def test_a_record_of_the_wrong_shape_is_named_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = '{"kind":"task","task":"add|float32","source":"add","dtype":"float32","outcome":"ok","cells":"oops"}'
    path = _journal(tmp_path / "s", _g2_header(["add"]), bad)
    code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--resume", "--out", str(tmp_path / "s"))
    line = _one_line(err)
    assert code == 2 and line.startswith(f"{path}:2: cells: ") and "remove line 2" in line


def test_a_torn_last_line_is_dropped_and_said(tmp_path: Path) -> None:
    path = _journal(tmp_path, _g2_header(["add"]))
    path.write_text(path.read_text() + '{"kind":"task","task":"ad', encoding="utf-8")
    scan = scan_journal(path)
    assert scan.torn and scan.records == [_g2_header(["add"])]
    assert "dropped a cut-off last line" in (scan.note() or "")


# -- ownership of an output directory ----------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = tmp_path / "s"
        out.mkdir()
        (out / LOCK_FILE).write_text(json.dumps({"pid": holder.pid, "command": "opmatrix probe --ops linalg.*"}))
        code, _, err = _cli(capsys, *PROBE, "--ops", "add", "--out", str(out))
        line = _one_line(err)
        assert code == 2 and f"is being written by pid {holder.pid}" in line and "opmatrix probe --ops linalg.*" in line
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_and_said(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "command": "opmatrix probe"}))
    with claim_dir(tmp_path, kind="journal", command="test") as claim:
        assert claim.notes == [f"note: took over a stale lock in {tmp_path} (pid {dead.pid} is gone)"]
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_foreign_directory_needs_force(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(UsageError, match=r"is not an opmatrix output directory and is not empty \(thesis.tex\)"):
        claim_dir(tmp_path, kind="journal", command="test")
    with claim_dir(tmp_path, kind="journal", command="test", force=True):
        pass
    with pytest.raises(UsageError, match=r"was written by another opmatrix verb \(journal\)"):
        claim_dir(tmp_path, kind="site", command="test")
    assert (tmp_path / "thesis.tex").read_text() == "mine"


def test_merge_into_a_probe_directory_keeps_the_old_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = JournalHeader(backend="refaccel", generation="g2", planned=1, device_type="refaccel",
                           dispatch_key="PrivateUse1")
    old = _journal(tmp_path / "s", header, '{"kind":"task","task":"old|float32","source":"old","dtype":"float32",'
                                          '"outcome":"ok","skipped":"no samples"}')
    shard = _journal(tmp_path / "shard", header)
    code, _, _ = _cli(capsys, "merge", str(shard), "--out", str(tmp_path / "s"))
    assert code == 0
    assert "old|float32" in old.with_name("journal.jsonl.prev").read_text()


# -- report owns only what it wrote ------------------------------------------------------------


def test_report_keeps_files_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              example_matrix_path: Path) -> None:
    site = tmp_path / "site"
    (site / "ops").mkdir(parents=True)
    (site / "diff.html").write_text("mine")
    (site / "ops" / "notes.html").write_text("mine too")
    code, _, err = _cli(capsys, "report", str(example_matrix_path), "--out", str(site))
    assert code == 2 and "is not an opmatrix output directory" in _one_line(err)
    code, _, _ = _cli(capsys, "report", str(example_matrix_path), "--out", str(site), "--force")
    assert code == 0 and (site / "index.html").exists()
    code, _, _ = _cli(capsys, "report", str(example_matrix_path), "--out", str(site))  # now ours
    assert code == 0
    assert (site / "diff.html").read_text() == "mine" and (site / "ops" / "notes.html").read_text() == "mine too"


def test_report_never_writes_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               example_matrix_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.html").write_text("keep")
    site = tmp_path / "site"
    site.mkdir()
    (site / "ops").symlink_to(elsewhere)
    code, _, err = _cli(capsys, "report", str(example_matrix_path), "--out", str(site), "--force")
    assert code == 2 and f"{site / 'ops'}: is a symlink" in _one_line(err)
    assert [p.name for p in elsewhere.iterdir()] == ["keep.html"]


def test_page_names_never_collide() -> None:
    hostile = "aten.<x>.y"
    lookalike = page_names([hostile])[hostile].removesuffix(".html")  # a safe name spelled like its page
    pages = page_names([hostile, lookalike, "aten.ADD.x", "aten.add.x"])
    assert len({p.casefold() for p in pages.values()}) == 4


# -- artifacts that prove themselves -----------------------------------------------------------


def _sealed(tmp_path: Path, n_ops: int = 12) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(dumps_model(synthetic_matrix(n_ops=n_ops, seed=3), command="test"), encoding="utf-8")
    return path


def test_a_matrix_cut_at_an_operator_boundary_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _sealed(tmp_path).read_text().splitlines(keepends=True)
    ops = [i for i, line in enumerate(lines) if line.startswith("  aten.")]
    cut = tmp_path / "cut.yaml"
    cut.write_text("".join(lines[: ops[len(ops) // 2]]))
    code, _, err = _cli(capsys, "validate", str(cut))
    assert code == 2 and "truncated or edited: integrity says" in err
    with pytest.raises(ArtifactError, match="truncated or edited"):
        load_matrix(cut)


def test_an_edited_matrix_is_invalid_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = _sealed(tmp_path)
    text = path.read_text()
    edited = tmp_path / "edited.yaml"
    edited.write_text(text.replace("path: rejected", "path: native", 1))
    assert edited.read_text() != text
    for verb in (["validate", str(edited)], ["diff", str(path), str(edited)], ["query", str(edited), "aten.x"]):
        code, _, err = _cli(capsys, *verb)
        assert code == 2 and "edited after it was written" in err, verb


def test_a_matrix_without_integrity_still_loads(tmp_path: Path) -> None:
    data = yaml.safe_load(_sealed(tmp_path).read_text())
    del data["integrity"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data))
    assert load_matrix(old).integrity is None


def test_report_gate_refuses_a_result_that_is_not_this_matrixs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                example_matrix_path: Path,
                                                                example_contract_path: Path) -> None:
    gate = tmp_path / "gate.json"
    gate.write_text('{"verdict": "pass"}')
    code, _, err = _cli(capsys, "report", str(example_matrix_path), "--gate", str(gate), "--out", str(tmp_path / "a"))
    assert code == 2 and "lacks backend, generation, matrix_digest" in _one_line(err)
    assert not (tmp_path / "a").exists()
    matrix = load_matrix(example_matrix_path)
    gate.write_text(json.dumps({"verdict": "pass", "backend": "cuda", "generation": matrix.backend.generation,
                                "matrix_digest": matrix.digest()}))
    code, _, err = _cli(capsys, "report", str(example_matrix_path), "--gate", str(gate), "--out", str(tmp_path / "b"))
    assert code == 2 and "belongs to another matrix: backend 'cuda'" in _one_line(err)
    code, _, _ = _cli(capsys, "gate", "--matrix", str(example_matrix_path), "--contract", str(example_contract_path),
                      "--json", str(gate), "--today", "2026-12-01")
    assert code in (0, 1) and json.loads(gate.read_text())["matrix_digest"] == matrix.digest()
    code, _, _ = _cli(capsys, "report", str(example_matrix_path), "--gate", str(gate), "--out", str(tmp_path / "c"))
    assert code == 0


def test_inf_survives_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opmatrix.matrix import MatrixIndex

    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    path = _sealed(tmp_path)
    text = path.read_text()
    assert "max_abs_err: " in text
    data = yaml.safe_load(text)
    del data["integrity"]
    for entries in data["operators"].values():
        for entry in entries:
            if "numerics" in entry:  # a device that returned inf where the CPU did not: wrong
                entry["numerics"]["max_abs_err"] = float("inf")
                entry["outcome"] = "wrong"
    path.write_text(dumps_model(Matrix.model_validate(data)))
    first, second = MatrixIndex.load(path), MatrixIndex.load(path)  # the second load comes from the cache
    errs = [e.numerics.max_abs_err for es in second.model.operators.values() for e in es if e.numerics]
    assert errs and all(err == float("inf") for err in errs)
    assert first.model == second.model


def test_a_cache_hit_trusts_the_digest_checked_when_written_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit skips recomputing the digest of bytes that passed it; an edited file is a miss and
    fails as always, and a hit whose counts disagree with its seal is refused (then reloaded)."""
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    path = _sealed(tmp_path)
    first = load_matrix(path)
    entries = list((tmp_path / "cache" / "matrices").glob("*.json"))
    assert len(entries) == 1
    assert load_matrix(path) == first  # a hit
    edited = tmp_path / "edited.yaml"
    edited.write_text(path.read_text().replace("path: rejected", "path: native", 1))
    with pytest.raises(ArtifactError, match="edited after it was written"):
        load_matrix(edited)
    cached = json.loads(entries[0].read_text())
    cached["integrity"]["cells"] += 1  # a damaged entry: its counts no longer match its seal
    entries[0].write_text(json.dumps(cached))
    assert load_matrix(path) == first  # refused as a miss, loaded strictly from the YAML again


@pytest.mark.parametrize("name", ["aten.add\x1b[2J.Tensor", "aten.add\x07.Tensor", "aten.add\x9b.Tensor"])
def test_control_characters_in_names_are_refused(tmp_path: Path, name: str) -> None:
    data = yaml.safe_load(_sealed(tmp_path).read_text())
    del data["integrity"]
    first = next(iter(data["operators"]))
    data["operators"][name] = data["operators"].pop(first)
    with pytest.raises(Exception, match="not an ATen overload name"):
        Matrix.model_validate(data)
    data["operators"][first] = data["operators"].pop(name)
    data["backend"]["name"] = "ref\x1b]0;pwned\x07"
    with pytest.raises(Exception, match="control character"):
        Matrix.model_validate(data)


def test_an_adapter_whose_name_cannot_be_recorded_is_refused_before_probing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A foreign adapter named with terminal escapes: exit 2 naming the adapter, nothing written."""
    (tmp_path / "evil_adapter.py").write_text(
        "from opmatrix.backend.builtin import CpuAdapter\n\n\n"
        "class Evil(CpuAdapter):\n    name = 'cpu\\x1b]0;pwned\\x07'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = _cli(capsys, "probe", "--backend", "evil_adapter:Evil", "--ops", "abs", "--no-runtime",
                          "--out", str(tmp_path / "out"))
    assert code == 2 and "backend adapter evil_adapter.Evil cannot be recorded" in err, err
    assert "control character" in err and "\x1b" not in out + err
    assert not (tmp_path / "out").exists()


def test_gate_and_diff_never_print_raw_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          example_matrix_path: Path, example_contract_path: Path) -> None:
    contract = tmp_path / "c.yaml"
    contract.write_text(example_contract_path.read_text().replace("release: '2.1'", 'release: "2.1\\e[2J\\a"'))
    code, out, err = _cli(capsys, "gate", "--matrix", str(example_matrix_path), "--contract", str(contract),
                          "--today", "2026-12-01")  # a contract's names are refused like a matrix's
    assert code == 2 and "control character" in err and "\\x1b[2J" in err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert terminal_text("a\x1bb\x9bc\nd\te") == "a\\x1bb\\x9bc\nd\te"
    bad = tmp_path / "bad.yaml"
    bad.write_text(example_matrix_path.read_text().replace("aten.softmax.int:", '"aten.soft\\emax.int":'))
    code, out, err = _cli(capsys, "diff", str(example_matrix_path), str(bad))
    assert code == 2 and "\x1b" not in out + err


def test_contract_names_must_be_printable_and_free_text_may_break_lines(tmp_path: Path,
                                                                          example_contract_path: Path) -> None:
    from opmatrix.schema import load_contract

    data = yaml.safe_load(example_contract_path.read_text())
    data["requirements"][0]["description"] = "first line\nsecond line\twith a tab"
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(data))
    assert load_contract(ok).requirements[0].description == "first line\nsecond line\twith a tab"
    for field, value in (("backend", "ref\x1b]0;pwned\x07"), ("generation", "g2\n")):
        bad = tmp_path / f"{field}.yaml"
        bad.write_text(yaml.safe_dump({**data, field: value}))
        with pytest.raises(ArtifactError, match="control character"):
            load_contract(bad)


# -- the cases that held -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("!!python/object/apply:os.system ['echo pwned']\n", "is not allowed: opmatrix reads plain YAML only"),
        ("a: &x {b: 1}\nc: *x\n", "YAML aliases (*name) are not allowed"),
        ("backend: {name: a}\nbackend: {name: b}\n", "duplicate key 'backend' (first at line 1)"),
    ],
)
def test_unsafe_yaml_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and says in _one_line(err)


def test_binary_garbage_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(os.urandom(4096) + b"\xff\xfe")
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2 and str(path) in _one_line(err)
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"\x00\xff garbage\n" + os.urandom(64).replace(b"\n", b"") + b"\n{}\n")
    code, _, err = _cli(capsys, "merge", str(journal), "--out", str(tmp_path / "m"))
    assert code == 2 and f"{journal}:1:" in _one_line(err)


@pytest.mark.slow
def test_validate_reports_every_error_in_about_one_parse(tmp_path: Path) -> None:
    """All 50 errors of an invalid matrix, each with its line, in under 3x a valid file's time (best of 3)."""
    from bench.bench_validate import _matrix_text, _spoil, _time

    text, cells = _matrix_text(20_000)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(text)
    bad.write_text(_spoil(text, 50))
    goods, bads = [], []
    for _ in range(4):  # interleaved, best of each: other processes on the machine load both alike
        goods.append(_time(good, 1)[0])
        t_bad, errors = _time(bad, 1)
        bads.append(t_bad)
        assert errors == 50
    assert min(bads) < 3 * min(goods) + 0.5, (bads, goods)  # a lookup per error re-parsing the file: ~50x


# -- real runs (slow) ---------------------------------------------------------------------------


def _probe(out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "opmatrix", *PROBE, *args, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_records_outside_the_selection_never_reach_the_matrix(tmp_path: Path) -> None:
    """A journal from before run identities holding another op: resume keeps it out of the matrix."""
    legacy = JournalHeader(backend="refaccel", generation="g2", planned=2)
    mul = ('{"kind":"task","task":"mul|float32","source":"mul","dtype":"float32","outcome":"ok","cells":[{"op":'
           '"aten.mul.Tensor","dtype":"float32","rank":1,"layout":"contiguous","result":{"path":"native",'
           '"outcome":"ok","samples":{"probed":1,"passed":1}}}]}')
    _journal(tmp_path / "s", legacy, mul)
    proc = _probe(tmp_path / "s", "--ops", "add", "--resume")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    matrix = load_matrix(tmp_path / "s" / "matrix.yaml")
    assert "aten.add.Tensor" in matrix.operators and "aten.mul.Tensor" not in matrix.operators


@pytest.mark.slow
def test_sigterm_then_resume_and_a_concurrent_writer(tmp_path: Path) -> None:
    """SIGTERM leaves a consistent journal; a second probe meanwhile is refused; resume completes."""
    out = tmp_path / "s"
    # one worker that hangs in div (an injected fault) keeps the first run busy until it is stopped
    first = _probe(out, "--ops", "add,mul,div", "--workers", "1", "--timeout", "600",
                   env={"OPMATRIX_REFACCEL_FAULT": "hang:aten::div"})
    deadline = time.monotonic() + 300
    while not (out / "journal.jsonl").exists() or '"kind":"task"' not in (out / "journal.jsonl").read_text():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    second = run_cli(*PROBE, "--ops", "add", "--out", str(out))
    assert first.poll() is None, first.communicate()
    assert second.returncode == 2 and f"is being written by pid {first.pid}" in second.stderr
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    assert first.returncode == 130 and not (out / LOCK_FILE).exists()
    again = _probe(out, "--ops", "add,mul,div", "--resume")
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stdout + stderr
    lines = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    tasks = [r["task"] for r in lines[1:]]
    assert len(tasks) == len(set(tasks)) == lines[0]["planned"] and "add|float32" in tasks


def test_a_sealed_matrix_whose_defaults_are_written_out_still_proves_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loaders accept a document whose own digest is the seal without dumping the model; a
    document that differs from what was sealed only in spelling (a default written out) is judged
    by the model's digest, as before, and a real edit still fails."""
    monkeypatch.setenv("OPMATRIX_NO_CACHE", "1")
    path = _sealed(tmp_path)
    first = load_matrix(path)
    spelled = tmp_path / "spelled.yaml"
    spelled.write_text(path.read_text().replace("\n    outcome: ok\n", "\n    outcome: ok\n    flaky: false\n", 1))
    assert spelled.read_text() != path.read_text()
    assert load_matrix(spelled) == first
    edited = tmp_path / "edited.yaml"
    edited.write_text(path.read_text().replace("\n    outcome: ok\n", "\n    outcome: ok\n    flaky: true\n", 1))
    with pytest.raises(ArtifactError, match="edited after it was written"):
        load_matrix(edited)

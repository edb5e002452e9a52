"""``opmatrix query``, ``diff`` and ``merge``: output, exit codes, shards equal one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opmatrix.cli import main
from opmatrix.matrix.journal import dumps_records
from opmatrix.schema import JournalHeader, dump_model, load_matrix

from .conftest import run_cli
from .test_matrix_records import EVIDENCE, cells, softmax_records, task


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))


def _query(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert main(["query", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_query_json_answers_the_seed_softmax(capsys: pytest.CaptureFixture[str], example_matrix_path: Path):
    base = [str(example_matrix_path), "aten.softmax.int", "--dtype", "float32", "--rank", "3"]
    out = _query(capsys, *base, "--layout", "contiguous", "--arg", "dim=-1")
    assert {k: out[k] for k in ("op", "dtype", "rank", "layout", "mode", "path", "outcome", "conditions", "args")} == {
        "op": "aten.softmax.int", "dtype": "float32", "rank": 3, "layout": "contiguous", "mode": "eager",
        "path": "native", "outcome": "ok", "conditions": {"dim": "last"}, "args": {"dim": -1},
    }
    assert out["samples"] == {"probed": 24, "passed": 24, "by_path": {}}
    assert out["entry"]["ranks"] == {"min": 2, "max": 5}
    assert _query(capsys, *base, "--arg", "dim=0")["path"] == "composite"
    assert _query(capsys, *base, "--layout", "noncontiguous", "--arg", "dim=-1")["path"] == "composite"
    f64 = [str(example_matrix_path), "aten::softmax.int", "--dtype", "float64", "--rank", "3", "--arg", "dim=-1"]
    assert _query(capsys, *f64)["path"] == "rejected"
    assert _query(capsys, str(example_matrix_path), "aten.softmax.int", "--dtype", "float16", "--rank", "3")[
        "path"] == "unknown"


def test_query_without_a_full_cell_lists_the_entries(capsys: pytest.CaptureFixture[str], example_matrix_path: Path):
    assert main(["query", str(example_matrix_path), "aten.softmax.int", "--dtype", "float64"]) == 0
    headline = (
        "aten.softmax.int on refaccel g2 (generated from the matrix): Works: eager native for dim=last on contiguous "
        "input, composite otherwise (_softmax, contiguous, div, exp, sum) for bf16, fp32 at ranks 2-5; backward "
        "first-order native. Does not work: rejected for fp64. Compile: not probed.\n"
    )
    assert capsys.readouterr().out == headline + (
        "contract line: native for dim=last on contiguous input, "
        "composite otherwise (_softmax, contiguous, div, exp, sum); bf16, fp32; ranks 2-5; rejected for fp64; "
        "backward first-order ok; compile: not probed; fallback: none observed\n"
        "1 box entry (eager) match:\n"
        "aten.softmax.int float64 rank 1-5 contiguous eager: rejected (clean rejection), 10/10 samples\n"
    )


def test_query_with_no_cell_leads_with_what_works_and_lists_entries_with_all(
        capsys: pytest.CaptureFixture[str], example_matrix_path: Path):
    assert main(["query", str(example_matrix_path), "aten.softmax.int"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(": ", 1)[1].startswith("Works: eager native for dim=last") and "Does not work: rejected" in lines[0]
    assert lines[1] == "4 eager entries: --all lists them; --dtype/--rank/--layout ask for one cell"
    assert len(lines) == 2
    assert main(["query", str(example_matrix_path), "aten.softmax.int", "--all"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == lines[0] and listed[2] == "4 box entries (eager) match:" and len(listed) == 7


def test_query_text_is_one_line(capsys: pytest.CaptureFixture[str], example_matrix_path: Path):
    argv = ["query", str(example_matrix_path), "aten.softmax.int", "--dtype", "bfloat16", "--rank", "2"]
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        "aten.softmax.int bfloat16 2 contiguous eager: composite (ok) when dim=first, 12/12 samples passed, "
        "runs as aten.exp.default, aten.sum.dim_IntList, aten.div.Tensor; native (ok) when dim=last\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["aten.sofmax.int"], "unknown operator 'aten.sofmax.int'; did you mean aten.softmax.int?"),
        (["aten.softmax.int", "--dtype", "bf16", "--rank", "3"], "unknown dtype 'bf16'; did you mean 'bfloat16'?"),
        (["aten.softmax.int", "--dtype", "float32", "--rank", "3", "--layout", "strided"],
         "unknown layout 'strided'; did you mean 'noncontiguous'?"),
        (["aten.softmax.int", "--dtype", "float32", "--rank", "3", "--arg", "dim"], "--arg 'dim': expected NAME=VALUE"),
    ],
)
def test_bad_query_input_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str], example_matrix_path: Path,
                                              argv: list[str], message: str):
    assert main(["query", str(example_matrix_path), *argv, "--json"]) == 2
    assert message in capsys.readouterr().err


def test_unknown_op_exits_2_from_the_real_command(example_matrix_path: Path):
    proc = run_cli("query", str(example_matrix_path), "aten.sofmax.int", "--json")
    assert proc.returncode == 2
    assert "did you mean aten.softmax.int?" in proc.stderr and proc.stdout == ""


def test_diff_prints_a_table_and_json(capsys: pytest.CaptureFixture[str], example_matrix_path: Path, tmp_path: Path):
    model = load_matrix(example_matrix_path)
    ops = dict(model.operators)
    ops["aten.softmax.int"] = [e for e in ops["aten.softmax.int"] if e.path.value != "rejected"]
    other = tmp_path / "b.yaml"
    dump_model(model.model_copy(update={"operators": ops}), other)
    assert main(["diff", str(example_matrix_path), str(other)]) == 0
    out = capsys.readouterr().out
    # B holds no float64 softmax cell at all: not probed in B, not "removed"
    assert "cells: 0 worse, 0 better, 0 new, 0 removed, 5 not probed in B, 0 numerics" in out
    assert main(["diff", str(example_matrix_path), str(other), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["not_probed"] == 5


def _journal(path: Path, records: list, planned: int) -> Path:  # type: ignore[type-arg]
    header = JournalHeader(backend="refaccel", generation="g2", planned=planned, device_type="refaccel",
                           dispatch_key="PrivateUse1", evidence=EVIDENCE, command="opmatrix probe --backend refaccel")
    path.write_text(dumps_records([header, *records]))
    return path


def test_merged_shards_give_the_matrix_of_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    records = softmax_records() + [
        task("add", "float32", cells("aten.add.Tensor", "float32", [1, 2])),
        task("__radd__", "float32", cells("aten.add.Tensor", "float32", [2], path="composite")),
        task("sort", "int8", [], skipped="no samples"),
    ]
    whole = _journal(tmp_path / "whole.jsonl", records, len(records))
    shards = [_journal(tmp_path / f"s{i}.jsonl", records[i::3], len(records[i::3])) for i in range(3)]
    assert main(["merge", str(whole), "--out", str(tmp_path / "one")]) == 0
    assert main(["merge", *map(str, reversed(shards)), "--out", str(tmp_path / "many")]) == 0
    assert "merged 3 journal(s), 7 record(s)" in capsys.readouterr().out.splitlines()[-1]
    one, many = load_matrix(tmp_path / "one" / "matrix.yaml"), load_matrix(tmp_path / "many" / "matrix.yaml")
    assert many == one
    assert many.skipped == {"sort|int8": "no samples"}
    assert many.backend.dispatch_key == "PrivateUse1"
    body = (tmp_path / "many" / "journal.jsonl").read_text().splitlines()
    assert json.loads(body[0])["planned"] == len(records)
    assert body[1:] == (tmp_path / "one" / "journal.jsonl").read_text().splitlines()[1:]


def test_merge_refuses_journals_of_different_backends(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a = _journal(tmp_path / "a.jsonl", softmax_records()[:1], 1)
    b = tmp_path / "b.jsonl"
    b.write_text(dumps_records([JournalHeader(backend="cpu", planned=1)]))
    assert main(["merge", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "journals of different backends cannot merge into one matrix: cpu, refaccel/g2" in capsys.readouterr().err


def test_merge_refuses_journals_of_other_evidence_or_an_edited_generation(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]):
    """Shards of one run share an evidence key: journals measured on another driver do not merge
    (exit 2, naming the field), nor does a journal whose header's generation disagrees with the
    generation its evidence key was measured on (an edited header)."""
    key = "torch=2.13.0|backend_version=2.4.0|driver={}|gen={}|ops=1|code=2"

    def journal(name: str, driver: str, gen: str, header_gen: str) -> str:
        header = JournalHeader(backend="refaccel", generation=header_gen, planned=1, device_type="refaccel",
                               dispatch_key="PrivateUse1", evidence=EVIDENCE, command="opmatrix probe",
                               evidence_key=key.format(driver, gen))
        (tmp_path / name).write_text(dumps_records([header, *softmax_records()[:1]]))
        return str(tmp_path / name)

    a, b = journal("a.jsonl", "9.9.9", "g2", "g2"), journal("b.jsonl", "9.9.8", "g2", "g2")
    assert main(["merge", a, b, "--out", str(tmp_path / "o")]) == 2
    assert "journals measured on different evidence cannot merge (they differ in driver" in capsys.readouterr().err
    edited = journal("c.jsonl", "9.9.9", "g2", "g1")
    assert main(["merge", edited, "--out", str(tmp_path / "o2")]) == 2
    assert "its header says generation 'g1', its evidence key gen=g2" in capsys.readouterr().err
    assert main(["merge", a, "--out", str(tmp_path / "o3")]) == 0


def test_merge_fills_a_builtin_backend_identity_from_the_registry(tmp_path: Path):
    j = tmp_path / "cpu.jsonl"
    j.write_text(dumps_records([JournalHeader(backend="cpu", planned=1),
                                task("add", "float32", cells("aten.add.Tensor", "float32", [1]))]))
    assert main(["merge", str(j), "--out", str(tmp_path / "o")]) == 0
    m = load_matrix(tmp_path / "o" / "matrix.yaml")
    assert (m.backend.device_type, m.backend.dispatch_key) == ("cpu", "CPU")
    assert "journals carried no evidence block" in str(m.evidence.extra["note"])


def test_query_says_what_was_not_run_for_the_op_with_its_reason(capsys: pytest.CaptureFixture[str],
                                                               example_matrix_path: Path, tmp_path: Path):
    """A query of softmax at float16 names the softmax units that never ran and why, as probe and
    the site do; another op's or another dtype's units are not named"""
    reason = "not run: OpInfo's sample generation raised after 2 samples (RuntimeError: boom)"
    m = load_matrix(example_matrix_path).model_copy(update={"not_run": {
        "softmax.with_dtype|float16 samples after #1": reason, "bmm|float16 samples after #1": reason,
        "softmax|float32 samples after #1": reason}})
    path = tmp_path / "m.yaml"
    dump_model(m, path)
    assert main(["query", str(path), "aten.softmax.int", "--dtype", "float16", "--rank", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["not run (no cells, not counted): 1 unit of softmax.with_dtype (float16): "
                       "OpInfo's sample generation raised after 2 samples (RuntimeError: boom)"]
    assert _query(capsys, str(path), "aten.softmax.int", "--dtype", "float16", "--rank", "3")["not_run"] == [out[1].split(": ", 1)[1]]
    assert "not_run" not in _query(capsys, str(path), "aten.softmax.int", "--dtype", "bfloat16", "--rank", "3")

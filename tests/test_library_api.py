"""The library API: every command called from Python with typed options, no argparse.

Each command's options are a frozen dataclass declared once; the CLI's parser is built from them,
and the command line recorded in artifacts is written back from them, not read from ``sys.argv``.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest

import opmatrix
from opmatrix.cli import build_parser, options_for
from opmatrix.options import COMMANDS
from opmatrix.schema import UsageError, load_matrix
from opmatrix.schema.options import option_fields

from .conftest import EXAMPLES, ROOT


def test_the_api_takes_options_not_argparse() -> None:
    for name in ("probe", "merge", "gate", "report", "explain", "bench", "compat", "doctor", "query", "diff"):
        src = inspect.getsource(getattr(opmatrix, name))
        assert "Namespace" not in src and "argparse" not in src, name
    for pkg in ("probes", "ci", "matrix", "reports", "backend", "schema"):
        users = [str(p.relative_to(ROOT)) for p in (ROOT / pkg).rglob("*.py") if "Namespace" in p.read_text()]
        assert users == [], f"library code still takes an argparse.Namespace: {users}"


def test_options_are_checked_when_made_and_frozen() -> None:
    opts = opmatrix.ProbeOptions(backend="cpu", ops=["add"])  # a list becomes a tuple
    assert opts.ops == ("add",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.backend = "meta"  # type: ignore[misc]
    with pytest.raises(UsageError, match=r"^--ops: empty"):
        opmatrix.ProbeOptions(backend="cpu", ops=())
    with pytest.raises(UsageError, match=r"^--repetitions: must be at least 1, got 0$"):
        opmatrix.BenchOptions(backend="cpu", repetitions=0, out="x")
    with pytest.raises(UsageError, match=r"^--threads: expected an integer, got '2'$"):
        opmatrix.ProbeOptions(backend="cpu", threads="2")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^--backend: required"):
        opmatrix.ProbeOptions(backend=None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^--out 'site-\\xfe': not valid UTF-8"):
        opmatrix.ReportOptions(matrix="m.yaml", out="site-\udcfe")  # a byte the OS could not decode
    with pytest.raises(UsageError, match=r"^--ops: unknown|^--ops 'a\\xff': not valid UTF-8"):
        opmatrix.CompatOptions(torch=("2.13.0",), ops=("a\udcff",), out="o")


def test_every_option_is_declared_once_with_help_and_parses_back() -> None:
    """The parser is made from the dataclasses: every field is an argument with help text, and a
    command line written from options parses back to equal options."""
    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "verb").choices  # type: ignore[union-attr]
    for cls in COMMANDS:
        declared = {f.name for f in option_fields(cls)}
        actions = [a for a in subs[cls.verb]._actions if a.dest != "help"]
        assert {a.dest for a in actions} == declared, cls.verb
        assert all(a.help and a.help.strip() for a in actions), f"{cls.verb}: an option without help"
    samples = [
        opmatrix.ProbeOptions(backend="refaccel", generation="g2", ops=("add", "mm"), timeout=5.0, no_runtime=True,
                              workloads=("mlp",), compile="all"),
        opmatrix.GateOptions(matrix="m.yaml", contract="c.yaml", json="-", summary_file="s.md"),
        opmatrix.QueryOptions(matrix="m.yaml", op="aten.add.Tensor", arg=("alpha=2", "dim=-1"), rank=2),
        opmatrix.BenchOptions(backend="cpu", slowdown=1.5, modes=("eager",), out="o"),
        opmatrix.MergeOptions(journals=("a.jsonl", "b.jsonl"), out="o"),
    ]
    for opts in samples:
        argv = opts.command_line().split()[1:]
        assert options_for(argv[0], vars(parser.parse_args(argv))) == opts


def test_force_is_not_part_of_the_recorded_command() -> None:
    assert opmatrix.ReportOptions(matrix="m.yaml", out="site", force=True).command_line() == \
        "opmatrix report m.yaml --out site"


def test_gate_report_and_explain_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No argv: the site records the command made from its options."""
    monkeypatch.setattr(sys, "argv", ["jupyter-kernel", "--something-else"])
    matrix, contract = str(EXAMPLES / "softmax-matrix.yaml"), str(EXAMPLES / "refaccel-contract.yaml")
    result = opmatrix.gate(opmatrix.GateOptions(matrix=matrix, contract=contract, json=str(tmp_path / "g.json")))
    assert result.exit_code is opmatrix.ExitCode.BLOCKED and result.verdict.value == "blocked"
    assert '"verdict": "blocked"' in (tmp_path / "g.json").read_text()  # no runtime checks in it
    site = tmp_path / "site"
    assert opmatrix.report(opmatrix.ReportOptions(matrix=matrix, out=str(site))).index == site / "index.html"
    assert f"opmatrix report {matrix} --out {site}" in (site / "index.html").read_text()
    report = opmatrix.explain(opmatrix.ExplainOptions(matrix=matrix, model="mlp"))
    assert report.workload == "mlp" and report.nodes
    assert capsys.readouterr().out == ""


def test_the_library_returns_what_it_found_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """query returns the Answer (or the op's entries), diff the MatrixDiff; the CLI prints them."""
    from opmatrix.cli import main
    from opmatrix.matrix.verbs import OpEntries

    matrix = str(EXAMPLES / "softmax-matrix.yaml")
    cell = opmatrix.QueryOptions(matrix=matrix, op="aten.softmax.int", dtype="float32", rank=2, arg=("dim=-1",))
    answer = opmatrix.query(cell)
    assert isinstance(answer, opmatrix.Answer) and answer.known and answer.path.value == "native"
    entries = opmatrix.query(opmatrix.QueryOptions(matrix=matrix, op="aten.softmax.int"))
    assert isinstance(entries, OpEntries) and entries.op == "aten.softmax.int" and entries.entries
    same = opmatrix.diff(opmatrix.DiffOptions(a=matrix, b=matrix))
    assert same.empty and same.same_verdicts
    assert capsys.readouterr().out == ""
    assert main(["query", matrix, "aten.softmax.int", "--dtype", "float32", "--rank", "2", "--arg", "dim=-1"]) == 0
    assert capsys.readouterr().out == f"aten.softmax.int float32 2 contiguous eager with dim=-1: {answer.summary()}\n"


@pytest.mark.slow  # a real probe of refaccel in worker processes
def test_probe_from_python_records_the_command_of_its_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["jupyter-kernel", "--something-else"])
    out = tmp_path / "p"
    opts = opmatrix.ProbeOptions(backend="refaccel", generation="g2", ops=("add",), dtypes=("float32",),
                                 no_runtime=True, no_compile=True, quiet=True, workers=1, out=str(out))
    result = opmatrix.probe(opts)
    assert result.exit_code is opmatrix.ExitCode.OK and result.journal == out / "journal.jsonl"
    m = load_matrix(out / "matrix.yaml")
    assert result.matrix is not None and result.summary.recorded == result.summary.planned
    assert sorted(result.matrix.operators) == sorted(m.operators) and result.matrix.cell_count() == m.cell_count()
    assert m.evidence.command == opts.command_line()
    assert "aten.add.Tensor" in m.operators

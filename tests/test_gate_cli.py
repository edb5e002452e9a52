"""`opmatrix gate` in a real subprocess: exit codes, outputs, invalid input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from opmatrix.schema import dump_model

from .conftest import ROOT, run_cli
from .test_gate_support import g1_matrix, g2_matrix

CONTRACTS = ROOT / "ci" / "contracts"


def _write(tmp_path: Path, name: str, model) -> str:
    path = tmp_path / name
    dump_model(model, path, command="tests/test_gate_cli.py")
    return str(path)


def test_gate_passes_and_writes_outputs(tmp_path: Path) -> None:
    """g2 passes its contract: exit 0, verdict printed, JUnit / summary / JSON written."""
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", str(CONTRACTS / "refaccel-g2.yaml"),
                  "--junit", str(tmp_path / "j.xml"), "--summary", str(tmp_path / "s.md"),
                  "--json", str(tmp_path / "r.json"), "--today", "2026-12-01")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("opmatrix gate: PASS (refaccel g2, release 0.2, level 2 promised)")
    assert ET.parse(tmp_path / "j.xml").getroot().tag == "testsuites"
    assert (tmp_path / "s.md").read_text().startswith("## ✅ opmatrix gate: PASS")
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"


def test_gate_blocks_g1_naming_cells(tmp_path: Path) -> None:
    """g1 is blocked: exit 1, stdout says what blocks grouped, wrong values first; the summary has each cell."""
    m = _write(tmp_path, "g1.yaml", g1_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", str(CONTRACTS / "refaccel-g1.yaml"),
                  "--summary", str(tmp_path / "s.md"))
    assert out.returncode == 1, out.stdout + out.stderr
    said = out.stdout.split("blocking, worst first (4 reasons, 32 failing cells")[1].splitlines()[1:5]
    assert said[0] == "  - L2.ops.strided-inputs: mul.Tensor gives wrong values for float32 noncontiguous input"
    assert said[1].startswith("  - L2.ops.float-compute: add.Tensor, addmm, bmm, mm, … (7 in all) are rejected for bfloat16")
    summary = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "L2.ops.float-compute: aten.add.Tensor bfloat16 rank 0 contiguous eager: path rejected" in summary
    assert "L2.ops.strided-inputs: aten.mul.Tensor float32 rank 1 noncontiguous eager: outcome wrong" in summary


def test_a_matrix_and_contract_of_different_backends_are_a_usage_error(tmp_path: Path) -> None:
    """The wrong pair of files (g1's matrix, g2's contract; or a baseline of g1) exits 2 naming
    both, and writes none of the outputs."""
    g1, g2 = _write(tmp_path, "g1.yaml", g1_matrix()), _write(tmp_path, "g2.yaml", g2_matrix())
    for matrix, extra in ((g1, []), (g2, ["--baseline", g1])):
        out = run_cli("gate", "--matrix", matrix, "--contract", str(CONTRACTS / "refaccel-g2.yaml"), *extra,
                      "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"))
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"{g1}: the contract is for refaccel g2, the matrix is refaccel g1" in out.stderr
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "j.xml").exists()


def test_gate_json_to_stdout(tmp_path: Path) -> None:
    """``--json`` without a file prints only the JSON result."""
    m = _write(tmp_path, "g1.yaml", g1_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", str(CONTRACTS / "refaccel-g1.yaml"), "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["verdict"] == "blocked"


def test_misspelled_contract_field_exits_2_naming_the_field(tmp_path: Path) -> None:
    """``levle:`` instead of ``level:`` exits 2 with file:line: path: message."""
    text = (CONTRACTS / "refaccel-g2.yaml").read_text()
    assert "\nlevel: 2\n" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\nlevel: 2\n", "\nlevle: 2\n"))
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", str(bad))
    assert out.returncode == 2, out.stdout + out.stderr
    line = text.splitlines().index("level: 2") + 1
    assert f"{bad}:{line}: levle: unknown field 'levle'; did you mean 'level'?" in out.stderr
    assert ": level: required field is missing" in out.stderr
    assert out.stdout == ""


def test_invalid_matrix_and_today_exit_2(tmp_path: Path) -> None:
    """A missing matrix file or a malformed --today is invalid input."""
    contract = str(CONTRACTS / "refaccel-g2.yaml")
    missing = run_cli("gate", "--matrix", str(tmp_path / "nope.yaml"), "--contract", contract)
    assert missing.returncode == 2 and f"{tmp_path / 'nope.yaml'}: no such file" in missing.stderr
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    today = run_cli("gate", "--matrix", m, "--contract", contract, "--today", "tomorrow")
    assert today.returncode == 2 and "--today: 'tomorrow' is not a date; expected YYYY-MM-DD" in today.stderr


def test_gate_prints_the_units_not_run_as_probe_does(tmp_path: Path) -> None:
    """A matrix with units OpInfo never yielded: the gate still passes, and says which units no
    requirement could see and why, in the words probe prints (no fault is blamed)"""
    reason = "not run: OpInfo's sample generation raised after 2 samples (RuntimeError: from=1 >= to=1)"
    model = g2_matrix().model_copy(update={"not_run": {"bmm.triton_optimized|int32 samples after #1": reason,
                                                       "bmm.triton_optimized|int64 samples after #1": reason}})
    out = run_cli("gate", "--matrix", _write(tmp_path, "g2.yaml", model), "--contract", str(CONTRACTS / "refaccel-g2.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-2:] == [
        "2 units not run (OpInfo's sample generation raised before yielding them: 2): no cells, never counted as probed",
        "  - 2 units of bmm.triton_optimized (int32, int64): OpInfo's sample generation raised after 2 samples "
        "(RuntimeError: from=1 >= to=1)"]
    assert "fault" not in out.stdout.split("not run")[-1]

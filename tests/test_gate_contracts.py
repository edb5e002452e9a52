"""The refaccel contracts in ci/contracts against hand-built matrices of both generations.

The matrices follow the refaccel design (issue 9); once real probe runs exist the same contracts
are checked against them by the acceptance script (g2 passes, g1 blocked).
"""

from __future__ import annotations

from opmatrix.ci import Status, Verdict, evaluate_contract
from opmatrix.schema import load_contract

from .conftest import ROOT
from .test_gate_support import TODAY, g1_matrix, g2_matrix

G1 = ROOT / "ci" / "contracts" / "refaccel-g1.yaml"
G2 = ROOT / "ci" / "contracts" / "refaccel-g2.yaml"


def test_contracts_promise_the_same_level() -> None:
    """Both generations promise level 2 with level 0/1 checks and operator requirements."""
    g1, g2 = load_contract(G1), load_contract(G2)
    assert (g1.level, g1.generation, g2.level, g2.generation) == (2, "g1", 2, "g2")
    assert [(r.level, r.checks, r.operators) for r in g1.requirements] == [
        (r.level, r.checks, r.operators) for r in g2.requirements
    ]
    assert [r.level for r in g2.requirements] == [0, 1, 2] and g2.requirements[2].operators


def test_g2_meets_its_contract() -> None:
    """g2 passes; cumsum (unclaimed) is reported as an improvement."""
    result = evaluate_contract(g2_matrix(), load_contract(G2), today=TODAY)
    assert result.verdict is Verdict.passed, result.blocking
    assert all(r.status is Status.passed for r in result.requirements)
    assert any("aten.cumsum.default" in imp.requirement.ops for imp in result.improvements)


def test_g1_blocked_naming_bf16_and_defect_cells() -> None:
    """g1 is blocked by its missing bf16 kernels and by the wrong values on non-contiguous input."""
    result = evaluate_contract(g1_matrix(), load_contract(G1), today=TODAY)
    assert result.verdict is Verdict.blocked
    failed = {r.id for r in result.requirements if r.blocks}
    assert failed == {"L2.ops.float-compute", "L2.ops.linear", "L2.ops.softmax", "L2.ops.strided-inputs"}
    text = "\n".join(result.blocking)
    assert "aten.mm.default bfloat16 rank 2 contiguous eager: path rejected is worse than composite" in text
    assert "aten.mul.Tensor float32 rank 1 noncontiguous eager: outcome wrong on 4/4 samples" in text


def test_g1_matrix_against_g2_baseline_shows_regressions() -> None:
    """Gating g1 with g2 as a baseline reports the bf16 and defect cells as regressions."""
    result = evaluate_contract(g1_matrix(), load_contract(G1), baseline=g2_matrix(), today=TODAY)
    whats = {c.cell.label(): c.what for c in result.regressions}
    assert whats["aten.mm.default bfloat16 rank 2 contiguous eager"].startswith("path native -> rejected")
    assert whats["aten.mul.Tensor float32 rank 1 noncontiguous eager"].startswith("outcome ok -> wrong")


def test_softmax_output_dtype_group_is_not_promised() -> None:
    """Without ``conditions: {dtype: none}`` the rejected float64-output group would fail g2's softmax."""
    contract = load_contract(G2)
    level2 = contract.requirements[2]
    ops = [op.model_copy(update={"conditions": {}}) if op.name == "softmax" else op for op in level2.operators]
    strict = contract.model_copy(update={"requirements": [*contract.requirements[:2], level2.model_copy(update={"operators": ops})]})
    result = evaluate_contract(g2_matrix(), strict, today=TODAY)
    assert [r.id for r in result.requirements if r.blocks] == ["L2.ops.softmax"]
    assert "aten.softmax.int bfloat16 rank 1 contiguous eager [dtype=float64]: path rejected" in result.blocking[0]

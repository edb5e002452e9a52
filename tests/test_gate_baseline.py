"""The gate against the previous release's matrix: regressions, better cells, a shrunken run."""

from __future__ import annotations

from opmatrix.ci import CellStatus, Verdict, evaluate_contract
from opmatrix.schema import ToleranceOverride

from .test_gate_support import TODAY, contract, entry, matrix, op_req, waiver


def _ops(n: int) -> dict:
    """``n`` single-cell operators, all native and ok."""
    return {f"aten.op{i:03d}.default": [entry(("float32",), (1, 1))] for i in range(n)}


def _gate(current, baseline, **kw):
    return evaluate_contract(current, contract([op_req(["aten.op000.default"])], **kw), baseline=baseline, today=TODAY)


def test_empty_matrix_fails() -> None:
    """A matrix without probed cells never passes, even when the contract asks for no operators."""
    result = evaluate_contract(matrix({}), contract([]), today=TODAY)
    assert result.verdict is Verdict.blocked and result.cell_count == 0
    assert "cell count: the matrix holds no probed cells: a broken probe run must not pass" in result.blocking


def test_ten_percent_smaller_than_baseline_fails() -> None:
    """90 cells against a baseline of 100 blocks; 96 passes (the default allows 5% fewer)."""
    shrunk = _gate(matrix(_ops(90)), matrix(_ops(100)))
    assert shrunk.verdict is Verdict.blocked
    assert shrunk.blocking == [
        "cell count: 90 probed cells, 10.0% fewer than the baseline's 100 (at most 5% fewer allowed): "
        "was the probe run cut short?"
    ]
    assert len(shrunk.missing) == 10
    assert _gate(matrix(_ops(96)), matrix(_ops(100))).verdict is Verdict.passed


def test_min_cells_ratio_is_the_contracts() -> None:
    """A contract may tolerate a bigger drop."""
    assert _gate(matrix(_ops(90)), matrix(_ops(100)), min_cells_ratio=0.85).verdict is Verdict.passed


def _pair(before, after):
    base = _ops(3)
    now = dict(base)
    base["aten.mm.default"] = [before]
    now["aten.mm.default"] = [after]
    return matrix(now), matrix(base)


def test_path_drop_is_a_regression() -> None:
    """native -> fallback in a cell no requirement claims still blocks, naming the change."""
    now, base = _pair(entry(("float32",), (2, 2)), entry(("float32",), (2, 2), path="fallback", fallback="observed"))
    result = _gate(now, base)
    assert result.verdict is Verdict.blocked
    assert result.blocking == [
        "baseline: aten.mm.default float32 rank 2 contiguous eager: regression: path native -> fallback; "
        "backward path native -> fallback"
    ]


def test_outcome_wrong_and_numerics_growth_are_regressions() -> None:
    """ok -> wrong, and an error that grew by more than atol, are regressions."""
    now, base = _pair(entry(("float32",), (2, 2)), entry(("float32",), (2, 2), outcome="wrong"))
    assert [c.what for c in _gate(now, base).regressions] == ["outcome ok -> wrong"]
    now, base = _pair(entry(("float32",), (2, 2), max_abs_err=1e-6), entry(("float32",), (2, 2), max_abs_err=5e-5))
    (reg,) = _gate(now, base).regressions
    assert reg.what == "max_abs_err 1e-06 -> 5e-05 (grew by more than atol 1e-05)"
    now, base = _pair(entry(("float32",), (2, 2), max_abs_err=1e-6), entry(("float32",), (2, 2), max_abs_err=8e-6))
    assert _gate(now, base).regressions == []
    loose = [ToleranceOverride(op="aten.mm.*", atol=1e-3, rtol=0)]
    now, base = _pair(entry(("float32",), (2, 2), max_abs_err=1e-6), entry(("float32",), (2, 2), max_abs_err=5e-5))
    assert _gate(now, base, tolerances=loose).regressions == []


def test_better_cells_reported_not_blocking() -> None:
    """fallback -> native is better: reported, and the gate passes."""
    now, base = _pair(entry(("float32",), (2, 2), path="fallback", fallback="observed"), entry(("float32",), (2, 2)))
    result = _gate(now, base)
    assert result.verdict is Verdict.passed
    assert [c.what for c in result.better] == ["path fallback -> native; backward path fallback -> native"]


def test_regression_waived() -> None:
    """A valid waiver covering the regressed cell lets the release pass and is active."""
    now, base = _pair(entry(("float32",), (2, 2)), entry(("float32",), (2, 2), path="composite"))
    result = _gate(now, base, waivers=[waiver("aten.mm.*", path="composite")])
    assert result.verdict is Verdict.passed
    assert result.regressions[0].cell.status is CellStatus.waived
    assert result.waivers[0].state == "active"


def test_conditional_groups_compared_group_by_group() -> None:
    """softmax dim=last native -> composite regresses even though the worst group is unchanged."""
    before = [entry(("float32",), (2, 2), conditions={"dim": "last"}, autograd=False),
              entry(("float32",), (2, 2), path="composite", conditions={"dim": "first"}, autograd=False)]
    after = [entry(("float32",), (2, 2), path="composite", conditions={"dim": "last"}, autograd=False),
             entry(("float32",), (2, 2), path="composite", conditions={"dim": "first"}, autograd=False)]
    base, now = _ops(3), _ops(3)
    base["aten.softmax.int"], now["aten.softmax.int"] = before, after
    (reg,) = _gate(matrix(now), matrix(base)).regressions
    assert reg.cell.conditions == {"dim": "last"} and reg.what == "path native -> composite"

"""Waivers: active ones waive matching findings, expired ones block, unmatched ones are stale."""

from __future__ import annotations

import datetime as dt

from opmatrix.ci import CellStatus, Status, Verdict, WaiverState, evaluate_contract

from .test_gate_support import TODAY, checks, contract, entry, matrix, op_req, waiver

BF16_REJECTED = {"aten.mm.default": [entry(("float32",), (2, 2)), entry(("bfloat16",), (2, 2), path="rejected")]}
MM = [op_req(["aten.mm.default"], ("float32", "bfloat16"), name="mm")]


def test_active_waiver_waives_the_cell() -> None:
    """The failing bf16 cell is waived: requirement waived, gate passes, waiver active."""
    result = evaluate_contract(matrix(BF16_REJECTED), contract(MM, waivers=[waiver("aten.mm.*", dtype="bfloat16")]), today=TODAY)
    req = next(r for r in result.requirements if r.id == "L2.ops.mm")
    assert result.verdict is Verdict.passed and req.status is Status.waived and req.waived == 1
    assert [w.state for w in result.waivers] == [WaiverState.active]


def test_expired_waiver_blocks() -> None:
    """An expired waiver waives nothing, says so on the cell, and blocks by itself."""
    expired = waiver("aten.mm.*", expires=dt.date(2026, 11, 30), dtype="bfloat16")
    result = evaluate_contract(matrix(BF16_REJECTED), contract(MM, waivers=[expired]), today=TODAY)
    assert result.verdict is Verdict.blocked
    assert result.waivers[0].state is WaiverState.expired and result.waivers[0].matched == 1
    assert (
        "waivers: waiver #0 (aten.mm.*, owner kernels@example.com) expired on 2026-11-30 (judged on "
        f"{TODAY}, UTC): renew it or remove it"
        in result.blocking
    )
    cell = next(c for r in result.requirements for c in r.cells if c.status is CellStatus.failed)
    assert cell.reason.endswith("(waiver #0 expired on 2026-11-30)")


def test_expired_waiver_blocks_even_when_everything_passes() -> None:
    """Expiry forces the contract to be cleaned up even when the defect is gone."""
    ok = {"aten.mm.default": [entry(("float32", "bfloat16"), (2, 2))]}
    result = evaluate_contract(matrix(ok), contract(MM, waivers=[waiver("aten.mm.*", expires=dt.date(2026, 1, 1))]), today=TODAY)
    assert result.verdict is Verdict.blocked and result.blocking[0].startswith("waivers: waiver #0")


def test_waiver_valid_through_its_expiry_date() -> None:
    """A waiver expiring today still holds."""
    w = waiver("aten.mm.*", expires=TODAY, dtype="bfloat16")
    assert evaluate_contract(matrix(BF16_REJECTED), contract(MM, waivers=[w]), today=TODAY).passed


def test_stale_waiver_reported_not_blocking() -> None:
    """A waiver that matches nothing is stale: listed in the summary, the gate still passes."""
    ok = {"aten.mm.default": [entry(("float32", "bfloat16"), (2, 2))]}
    stale = waiver("aten.softmax.*", layout="transposed")
    result = evaluate_contract(matrix(ok), contract(MM, waivers=[stale]), today=TODAY)
    assert result.verdict is Verdict.passed
    assert result.waivers[0].state is WaiverState.stale and result.waivers[0].matched == 0


def test_waiver_fields_narrow_the_match() -> None:
    """A waiver for another rank or layout does not cover the failing cell."""
    for kw in ({"rank": 3}, {"layout": "transposed"}, {"mode": "compile"}, {"path": "fallback"}, {"dtype": "float32"}):
        result = evaluate_contract(matrix(BF16_REJECTED), contract(MM, waivers=[waiver("aten.mm.*", **kw)]), today=TODAY)
        assert result.verdict is Verdict.blocked, kw
        assert result.waivers[0].state is WaiverState.stale, kw


def test_runtime_check_waived_by_check_name() -> None:
    """``op: check:<name>`` waives a failing runtime check."""
    m = matrix(BF16_REJECTED, runtime_checks=checks(failed=["serialization"]))
    c = contract([op_req(["aten.mm.default"])], waivers=[waiver("check:serialization")])
    result = evaluate_contract(m, c, today=TODAY)
    assert result.verdict is Verdict.passed
    assert next(r for r in result.requirements if r.id == "L1.check.serialization").status is Status.waived


def test_a_waiver_never_stands_in_for_missing_evidence() -> None:
    """A waiver matching everything waives a known failure, never a cell with no evidence: an op
    pattern that selects nothing, a required dtype never probed, a check that did not run stay
    unwaived and block; the waiver that matched nothing else is stale."""
    wildcard = waiver("*")
    for req, m in (
        ([op_req(["aten.nonexistent_op.*"], ("float32",), name="none")], matrix(BF16_REJECTED)),
        ([op_req(["aten.mm.default"], ("float64",), name="f64")], matrix(BF16_REJECTED)),
    ):
        result = evaluate_contract(m, contract(req, waivers=[wildcard]), today=TODAY)
        assert result.verdict is Verdict.blocked, result.blocking
        cells = [c for r in result.requirements for c in r.cells if c.missing]
        assert cells and all(c.status is CellStatus.failed and c.waiver is None for c in cells)
        assert result.waivers[0].state is WaiverState.stale
    absent = contract([op_req(["aten.mm.default"], ("float32",))], waivers=[wildcard])
    absent = absent.model_copy(update={"requirements": [
        r.model_copy(update={"checks": ["serialization"]}) if r.level == 1 else r for r in absent.requirements]})
    result = evaluate_contract(matrix(BF16_REJECTED, runtime_checks=checks(missing=["serialization"])), absent,
                               today=TODAY)
    assert result.verdict is Verdict.blocked
    assert not [r for r in result.requirements if r.status is Status.waived], [(r.id, r.status) for r in result.requirements]


def test_a_gate_result_whose_verdict_was_edited_is_refused(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    """A blocked result with its verdict changed to pass (or a pass with its reasons cut): the
    report refuses it (exit 2) instead of showing "Ship" beside the blocking reasons."""
    import json

    import pytest

    from opmatrix.reports.gate import load_gate
    from opmatrix.schema import ArtifactError

    result = evaluate_contract(matrix(BF16_REJECTED), contract(MM), today=TODAY)
    assert result.verdict is Verdict.blocked and result.contradictions() is None
    forged = json.loads(result.model_dump_json())
    forged["verdict"] = "pass"
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    with pytest.raises(ArtifactError, match="contradicts itself: the verdict is pass, yet it lists 1 blocking"):
        load_gate(tmp_path / "forged.json")
    forged["blocking"] = []
    (tmp_path / "cut.json").write_text(json.dumps(forged))
    with pytest.raises(ArtifactError, match=r"blocking results \(L2.ops.mm\)"):
        load_gate(tmp_path / "cut.json")
    (tmp_path / "real.json").write_text(result.model_dump_json())
    assert load_gate(tmp_path / "real.json").passed is False

"""The gate's judgement of contract requirements against hand-built matrices."""

from __future__ import annotations

import yaml

from opmatrix.ci import CellStatus, GateResult, Status, Verdict, evaluate_contract
from opmatrix.schema import Contract, LevelRequirement, OperatorRequirement, RankRange, ToleranceOverride

from .test_gate_support import TODAY, checks, contract, entry, matrix, op_req


def _evaluate(m, c, **kw) -> GateResult:
    return evaluate_contract(m, c, today=TODAY, **kw)


def _req(result: GateResult, rid: str):
    return next(r for r in result.requirements if r.id == rid)


def test_everything_met_passes() -> None:
    """A matrix that meets every requirement passes with one result per requirement."""
    m = matrix({"aten.add.Tensor": [entry(("float32", "bfloat16"), (1, 3))]})
    result = _evaluate(m, contract([op_req(["aten.add.*"], ("float32", "bfloat16"), name="add")]))
    assert result.verdict is Verdict.passed, result.blocking
    assert [r.id for r in result.requirements] == [
        "L0.check.import", "L0.check.driver", "L0.check.enumerate",
        "L1.check.allocation", "L1.check.copy_h2d_d2h", "L1.check.serialization", "L2.ops.add",
    ]
    add = _req(result, "L2.ops.add")
    assert add.status is Status.passed and add.checked == 6 and add.failed == 0


def test_claimed_but_not_probed_fails() -> None:
    """A required cell that was never probed fails, as does a pattern that matched no probed op."""
    m = matrix({"aten.add.Tensor": [entry(("float32",), (1, 3))]})
    result = _evaluate(m, contract([op_req(["aten.add.Tensor", "aten.mm.*"], ("float32", "bfloat16"), name="x")]))
    req = _req(result, "L2.ops.x")
    assert result.verdict is Verdict.blocked and req.status is Status.failed
    reasons = {c.label(): c.reason for c in req.cells if c.status is CellStatus.failed}
    assert reasons == {
        "aten.add.Tensor bfloat16 contiguous eager": "not probed",
        "aten.mm.* eager": "pattern matched no probed operator",
    }
    assert req.not_probed == 2


def test_explicit_ranks_require_every_rank() -> None:
    """With ``ranks`` given, each rank in the range must have been probed."""
    m = matrix({"aten.mm.default": [entry(("float32",), (2, 2))]})
    result = _evaluate(m, contract([op_req(["aten.mm.default"], ranks=RankRange(min=2, max=3), name="mm")]))
    failed = [c.label() for c in _req(result, "L2.ops.mm").cells if c.status is CellStatus.failed]
    assert failed == ["aten.mm.default float32 rank 3 contiguous eager"]


def test_wrong_values_and_faults_fail() -> None:
    """Wrong numerics and faults fail the cell, naming the outcome and the error."""
    m = matrix({
        "aten.mul.Tensor": [entry(("float32",), (1, 1), outcome="wrong", max_abs_err=0.5),
                            entry(("float32",), (2, 2), outcome="crashed", error="SIGSEGV in kernel")],
    })
    cells = _req(_evaluate(m, contract([op_req(["aten.mul.Tensor"], name="mul")])), "L2.ops.mul").cells
    assert [c.reason for c in cells] == [
        "outcome wrong on 4/4 samples (max_abs_err 0.5 > atol 1e-05)",
        "outcome crashed on 4/4 samples (RuntimeError: SIGSEGV in kernel)",
    ]


def test_path_worse_than_worst_path_fails() -> None:
    """A rejected or host-fallback cell fails a requirement whose worst path is composite."""
    m = matrix({"aten.mm.default": [entry(("float32",), (2, 2)), entry(("bfloat16",), (2, 2), path="rejected")]})
    result = _evaluate(m, contract([op_req(["aten.mm.default"], ("float32", "bfloat16"), name="mm")]))
    (bad,) = [c for c in _req(result, "L2.ops.mm").cells if c.status is CellStatus.failed]
    assert bad.line() == (
        "aten.mm.default bfloat16 rank 2 contiguous eager: path rejected is worse than composite "
        "(RuntimeError: refaccel: not supported)"
    )
    assert any("bfloat16" in line for line in result.blocking)


def test_fallback_policy_forbidden_and_override() -> None:
    """Observed fallback fails under a forbidden policy; a requirement may allow it."""
    m = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1), path="composite", fallback="observed")]})
    forbidden = _evaluate(m, contract([op_req(["aten.add.Tensor"], name="add")], fallback="forbidden"))
    assert _req(forbidden, "L2.ops.add").cells[0].reason == (
        "host fallback observed (aten.sort.default); the contract forbids fallback"
    )
    allowed = _evaluate(m, contract([op_req(["aten.add.Tensor"], name="add", fallback="allowed")], fallback="forbidden"))
    assert _req(allowed, "L2.ops.add").status is Status.passed


def test_worst_conditional_group_decides_unless_narrowed() -> None:
    """softmax native for dim=last, composite otherwise: a native requirement fails on the worst
    group, and passes when the requirement narrows to ``conditions: {dim: last}``."""
    m = matrix({
        "aten.softmax.int": [entry(("float32",), (2, 2), conditions={"dim": "last"}),
                             entry(("float32",), (2, 2), path="composite", conditions={"dim": "first"})],
    })
    whole = _evaluate(m, contract([op_req(["aten.softmax.int"], worst_path="native", name="s")]))
    cell = _req(whole, "L2.ops.s").cells[0]
    assert cell.conditions == {"dim": "first"} and cell.reason == "path composite is worse than native"
    last = _evaluate(m, contract([op_req(["aten.softmax.int"], worst_path="native", conditions={"dim": "last"}, name="s")]))
    assert _req(last, "L2.ops.s").status is Status.passed


def test_autograd_required() -> None:
    """autograd: true fails cells whose backward was not probed."""
    m = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1), autograd=False)]})
    without = _evaluate(m, contract([op_req(["aten.add.Tensor"], name="add")]))
    with_grad = _evaluate(m, contract([op_req(["aten.add.Tensor"], autograd=True, name="add")]))
    assert _req(without, "L2.ops.add").status is Status.passed
    assert _req(with_grad, "L2.ops.add").cells[0].reason == "autograd required but backward was not probed"


def test_compile_required_needs_compile_cells() -> None:
    """compile: true needs ok compile-mode cells for every (op, dtype)."""
    eager_only = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1))]})
    both = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1)), entry(("float32",), (1, 1), mode="compile")]})
    req = [op_req(["aten.add.Tensor"], compile=True, name="add")]
    missing = _req(_evaluate(eager_only, contract(req)), "L2.ops.add")
    assert missing.status is Status.failed
    assert missing.cells[0].reason == "compile required but no compile-mode cell was probed"
    assert _req(_evaluate(both, contract(req)), "L2.ops.add").status is Status.passed


def test_compile_mode_requirement_accepts_decomposed() -> None:
    """An op rejected in eager but decomposed under compile meets a compile-mode requirement."""
    m = matrix({"aten.addcmul.default": [entry(("float32",), (1, 2), path="rejected"),
                                         entry(("float32",), (1, 2), path="decomposed", mode="compile")]})
    req = op_req(["aten.addcmul.*"], mode="compile", worst_path="decomposed", name="addcmul")
    assert _req(_evaluate(m, contract([req])), "L2.ops.addcmul").status is Status.passed


def test_min_pass_ratio_and_tolerance_override() -> None:
    """A wrong cell passes when enough samples pass, or when a contract tolerance accepts its error."""
    m = matrix({"aten.sum.default": [entry(("float32",), (1, 1), outcome="wrong", samples=(10, 9), max_abs_err=2e-4)]})
    strict = _evaluate(m, contract([op_req(["aten.sum.default"], name="sum")]))
    ratio = _evaluate(m, contract([op_req(["aten.sum.default"], name="sum", min_pass_ratio=0.9)]))
    tol = _evaluate(m, contract([op_req(["aten.sum.default"], name="sum")],
                                tolerances=[ToleranceOverride(op="aten.sum.*", atol=1e-3, rtol=0)]))
    assert _req(strict, "L2.ops.sum").status is Status.failed
    assert _req(ratio, "L2.ops.sum").status is Status.passed
    assert _req(tol, "L2.ops.sum").status is Status.passed


def test_flaky_policy() -> None:
    """Flaky required cells block under ``flaky: block`` and pass under ``allow``; both are listed."""
    m = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1), flaky=True)]})
    block = _evaluate(m, contract([op_req(["aten.add.Tensor"], name="add")], flaky="block"))
    allow = _evaluate(m, contract([op_req(["aten.add.Tensor"], name="add")], flaky="allow"))
    assert block.verdict is Verdict.blocked and "flaky" in _req(block, "L2.ops.add").cells[0].reason
    assert allow.verdict is Verdict.passed
    assert [c.label() for c in allow.flaky] == ["aten.add.Tensor float32 rank 1 contiguous eager"]


def test_tag_core_selects_core_aten_overloads() -> None:
    """``tag:core`` means PyTorch's core ATen opset: probed core ops are judged, the rest not probed."""
    m = matrix({"aten.add.Tensor": [entry(("float32",), (1, 1))], "aten.softmax.int": [entry(("float32",), (1, 1))]})
    req = _req(_evaluate(m, contract([op_req(["tag:core"], name="core")])), "L2.ops.core")
    ops = {c.op for c in req.cells}
    assert "aten.add.Tensor" in ops and "aten._softmax.default" in ops
    assert "aten.softmax.int" not in ops  # CompositeImplicit, not in the core opset
    passed = {c.op for c in req.cells if c.status is CellStatus.passed}
    assert passed == {"aten.add.Tensor"} and req.not_probed == len(ops) - 1 > 150


def test_runtime_checks_pass_fail_unknown() -> None:
    """Level 0/1 checks by name: failing ones fail, absent ones are unknown and block when promised."""
    m = matrix({"aten.add.Tensor": [entry()]}, runtime_checks=checks(failed=["serialization"], missing=["driver"]))
    result = _evaluate(m, contract([op_req(["aten.add.Tensor"])]))
    assert _req(result, "L0.check.driver").status is Status.unknown
    assert _req(result, "L1.check.serialization").status is Status.failed
    assert _req(result, "L0.check.import").status is Status.passed
    assert result.verdict is Verdict.blocked
    assert "L1.check.serialization: check:serialization: failed: serialization evidence" in result.blocking


def test_check_pattern_covers_the_level() -> None:
    """``checks: ["*"]`` requires every check of that level, and is unknown when none ran."""
    c = Contract(release="1", backend="refaccel", level=1,
                 requirements=[LevelRequirement(level=0, checks=["*"]), LevelRequirement(level=1, checks=["*"])])
    ok = _evaluate(matrix({"aten.add.Tensor": [entry()]}), c)
    assert ok.verdict is Verdict.passed
    assert [c.op for c in _req(ok, "L0.check.all").cells] == ["check:driver", "check:enumerate", "check:import"]
    failing = _evaluate(matrix({"aten.add.Tensor": [entry()]}, runtime_checks=checks(failed=["copy_h2d_d2h"])), c)
    assert failing.blocking == ["L1.check.all: check:copy_h2d_d2h: failed: copy_h2d_d2h evidence"]
    none = _evaluate(matrix({"aten.add.Tensor": [entry()]}, runtime_checks=[]), c)
    assert _req(none, "L1.check.all").status is Status.unknown and none.verdict is Verdict.blocked


def test_unknown_level3_fails_when_promised() -> None:
    """A level-3 requirement is unknown: it blocks a level-3 promise and is informational below it."""
    m = matrix({"aten.add.Tensor": [entry()]})
    l3 = LevelRequirement(level=3, workloads=["resnet50-inference"])
    promised = _evaluate(m, contract([op_req(["aten.add.Tensor"])], level=3, extra_levels=[l3]))
    informational = _evaluate(m, contract([op_req(["aten.add.Tensor"])], level=2, extra_levels=[l3]))
    r3 = _req(promised, "L3.workload.resnet50-inference")
    assert r3.status is Status.unknown and r3.blocking and promised.verdict is Verdict.blocked
    assert any(line.startswith("L3.workload.resnet50-inference (unknown)") for line in promised.blocking)
    info = _req(informational, "L3.workload.resnet50-inference")
    assert info.status is Status.unknown and not info.blocking and informational.verdict is Verdict.passed


def test_promised_level_without_requirements_is_unknown() -> None:
    """Promising level 4 with nothing stated for levels 3 and 4 cannot pass."""
    result = _evaluate(matrix({"aten.add.Tensor": [entry()]}), contract([op_req(["aten.add.Tensor"])], level=4))
    assert [r.id for r in result.requirements if r.blocks] == ["L3.level", "L4.level"]


def test_identity_mismatch_blocks() -> None:
    """A g1 matrix gated against a g2 contract is blocked and says so."""
    result = _evaluate(matrix({"aten.add.Tensor": [entry()]}, generation="g1"), contract([op_req(["aten.add.Tensor"])]))
    assert "identity: the contract is for refaccel g2, the matrix is refaccel g1" in result.blocking


def test_improvements_listed_with_contract_lines() -> None:
    """Working, unclaimed cells are improvements; pasting their lines into the contract claims them."""
    m = matrix({
        "aten.add.Tensor": [entry(("float32",), (1, 3))],
        "aten.cumsum.default": [entry(("float32", "bfloat16"), (1, 3)), entry(("float32",), (5, 5), ("transposed",))],
        "aten.mul.Tensor": [entry(("float32", "bfloat16"), (1, 3)), entry(("float64",), (1, 3), path="rejected")],
        "aten.sort.default": [entry(("float32",), (1, 3), path="fallback", fallback="observed")],
    })
    reqs = [op_req(["aten.add.Tensor"], name="add")]
    result = _evaluate(m, contract(reqs, fallback="forbidden"))
    assert result.verdict is Verdict.passed
    lines = yaml.safe_load(result.improvement_yaml)
    assert lines == [
        {"ops": ["aten.cumsum.default"], "dtypes": ["float32"], "ranks": {"min": 5, "max": 5},
         "layouts": ["transposed"], "worst_path": "native"},
        {"ops": ["aten.cumsum.default", "aten.mul.Tensor"], "dtypes": ["float32", "bfloat16"],
         "ranks": {"min": 1, "max": 3}, "worst_path": "native"},
    ]
    assert sum(i.cells for i in result.improvements) == 13
    claimed = contract(reqs + [OperatorRequirement.model_validate(line) for line in lines], fallback="forbidden")
    again = _evaluate(m, claimed)
    assert again.verdict is Verdict.passed and again.improvements == [] and again.improvement_yaml == ""


def _with_scope(e, scope: str | None):
    """``e`` with its error's fault scope set (None: not recorded)."""
    from opmatrix.schema import FaultScope

    return e.model_copy(update={"error": e.error.model_copy(update={"fault_scope": FaultScope(scope) if scope else None})})


def test_max_fault_scope_blocks_a_wider_fault() -> None:
    """A level bounding faults to one operation blocks a fault that poisoned the device, and an
    unrecorded scope (it cannot show it stayed within the bound); narrower faults pass."""
    narrow = _with_scope(entry(("float32",), (1, 1), outcome="error", error="launch failed"), "operation")
    wide = _with_scope(entry(("float32",), (2, 2), outcome="poisoned", error="device unusable"), "device")
    m = matrix({"aten.mul.Tensor": [narrow, wide], "aten.add.Tensor": [entry(("float32",), (1, 3))]})
    bounded = LevelRequirement(level=2, max_fault_scope="operation", operators=[op_req(["aten.mul.Tensor"])])
    c = contract([], extra_levels=[])
    c = c.model_copy(update={"requirements": [*c.requirements[:2], bounded]})
    result = _evaluate(m, c)
    req = _req(result, "L2.fault_scope")
    assert req.status is Status.failed and req.blocking and req.checked == 2 and req.failed == 1
    assert [c.reason for c in req.cells] == ["poisoned with fault scope device (allowed: operation or narrower)"]
    loose = LevelRequirement(level=2, max_fault_scope="device", operators=[op_req(["aten.mul.Tensor"])])
    ok = _req(_evaluate(m, c.model_copy(update={"requirements": [*c.requirements[:2], loose]})), "L2.fault_scope")
    assert ok.status is Status.passed and ok.message == "2 entries, 2 faulted, each fault within scope device"
    unrecorded = matrix({"aten.mul.Tensor": [_with_scope(wide, None)]})
    none = _req(_evaluate(unrecorded, c), "L2.fault_scope")
    assert none.status is Status.failed and "fault scope not recorded" in none.cells[0].reason
    elsewhere = matrix({"aten.add.Tensor": [entry(("float32",), (1, 3))]})  # the bound selects nothing probed
    empty = _req(_evaluate(elsewhere, c), "L2.fault_scope")
    assert empty.status is Status.unknown and empty.checked == 0 and "nothing shows" in empty.message

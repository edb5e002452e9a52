"""What a support contract states beyond OpInfo's samples: declared ranks, accumulation mode,
dynamic-shape compiled paths, fallback policy in performance runs (issue 44)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from opmatrix.backend import get_adapter
from opmatrix.backend.refaccel.accumulate import sequential_sum
from opmatrix.ci import Status, Verdict, evaluate_contract
from opmatrix.probes.ops.accumulation import classify
from opmatrix.probes.ops.engine import probe_task
from opmatrix.probes.ops.ranks import extend_samples, extend_values, rule_for
from opmatrix.probes.ops.source import select_ops
from opmatrix.schema import (
    Accumulation,
    CellSource,
    FallbackPolicy,
    LevelRequirement,
    Mode,
    Numerics,
    Outcome,
    Shapes,
)
from opmatrix.schema.perf import PerfRequirement

from .test_gate_support import TODAY, contract, entry, matrix, op_req
from .test_perf import _record, _samples


@pytest.fixture(scope="module")
def cpu():
    a = get_adapter("cpu")
    a.setup()
    return a


def _entry(name: str):
    (found,) = [e for e in select_ops([name]) if e.full_name == name]
    return found


ADDENDS = torch.tensor([1.0] + [2.0 ** -9] * 256, dtype=torch.bfloat16)


def test_refaccel_g1_sum_keeps_its_running_sum_in_bfloat16():
    """The g1 kernel's arithmetic: every partial sum rounded to bfloat16 (the CPU rounds once)."""
    assert float(sequential_sum(torch.ops.aten.sum.dim_IntList, ADDENDS, None)) == 1.0
    assert float(ADDENDS.sum()) == 1.5
    x = torch.randn(3, 4, 5).to(torch.bfloat16)
    out = sequential_sum(torch.ops.aten.sum.dim_IntList, x, [0, 2], True)
    assert out.shape == x.sum((0, 2), keepdim=True).shape
    torch.testing.assert_close(out.float(), x.float().sum((0, 2), keepdim=True), atol=0.1, rtol=0.05)


def test_designed_input_tells_float32_from_low_precision_accumulation():
    assert classify([1.5], ADDENDS)[0] is Accumulation.float32
    mode, evidence = classify([1.0], ADDENDS)
    assert mode is Accumulation.bfloat16 and "in order" in evidence and "the device gave 1" in evidence
    assert classify([1.4921875], ADDENDS)[0] is Accumulation.bfloat16  # a pairwise tree in bfloat16
    assert classify([1.25], ADDENDS)[0] is Accumulation.unknown
    assert classify([1.5, 1.0], ADDENDS)[0] is Accumulation.unknown


@pytest.mark.parametrize(("generation", "want"), [("g1", "bfloat16"), ("g2", "float32")])
def test_refaccel_sum_accumulation_is_measured_per_generation(generation: str, want: str):
    """Measured on the device (one generation per process), never read from the kernel table."""
    code = (
        "import torch\n"
        "from opmatrix.backend import get_adapter\n"
        "from opmatrix.probes.ops.accumulation import measure\n"
        "from opmatrix.probes.ops.source import select_ops\n"
        f"a = get_adapter('refaccel', generation={generation!r}); a.setup()\n"
        "(e,) = [e for e in select_ops(['sum']) if e.full_name == 'sum']\n"
        "print(measure(a, e, torch.bfloat16)[0].value)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == want


def test_rank_extension_keeps_the_axis_and_says_when_no_rule_applies():
    softmax = _entry("softmax")
    assert rule_for(softmax) is not None and rule_for(softmax).rule == "kept_axis"
    t = torch.randn(3, 4)
    values = extend_values(rule_for(softmax), (t, (0,), {}), 4)
    assert values is not None and values[0].shape == (2, 2, 3, 4) and tuple(values[1]) == (-2,)
    assert torch.equal(values[0][0, 0], t)  # the first batch element is the sample itself
    add = _entry("add")
    grown = extend_values(rule_for(add), (t, (torch.randn(4),), {}), 3)
    assert grown is not None and grown[0].shape == (2, 3, 4) and grown[1][0].shape == (4,)  # broadcasts as before
    extended, why = extend_samples(_entry("mm"), [SampleInput(t, args=(torch.randn(4, 2),))], (2, 5))
    assert extended == [] and why is not None and "no rank rule covers mm" in why


def test_probe_ranks_extends_softmax_to_declared_ranks_with_its_source(cpu):
    record = probe_task(cpu, "softmax", "float32", options={"ranks": "4-5", "layouts": ["contiguous"], "compile": "off"})
    extended = [c for c in record.cells if c.rank in (4, 5)]
    assert {c.rank for c in extended} == {4, 5}
    assert all(c.result.source is CellSource.rank_extension for c in extended)
    assert all(c.result.outcome is Outcome.ok and c.result.numerics is not None for c in extended)  # compared to the CPU
    assert all(c.result.source is None for c in record.cells if c.rank < 4)
    plain = probe_task(cpu, "softmax", "float32", options={"layouts": ["contiguous"], "compile": "off"})
    assert max(c.rank for c in plain.cells) < 4  # OpInfo alone never reaches them


def test_compiled_cells_are_probed_with_static_and_dynamic_shapes(cpu):
    record = probe_task(cpu, "add", "float32", options={"layouts": ["contiguous"]})
    compiled = [c for c in record.cells if c.mode is Mode.compile]
    assert {c.result.shapes for c in compiled} == {Shapes.static, Shapes.dynamic}
    (dynamic,) = [c for c in compiled if c.result.shapes is Shapes.dynamic]
    assert dynamic.result.outcome is Outcome.ok and "dynamic=True at" in (dynamic.result.note or "")
    assert all(c.result.shapes is None for c in record.cells if c.mode is Mode.eager)


def _low(acc: Accumulation, **kw):
    e = entry(("bfloat16",), (1, 2), **kw)
    assert e.numerics is not None
    return e.model_copy(update={"numerics": Numerics(**{**e.numerics.model_dump(), "accumulation": acc,
                                                        "accumulation_evidence": "designed input"})})


def test_gate_holds_a_required_accumulation_mode():
    req = op_req(["aten.sum.default"], ("bfloat16",), accumulation=Accumulation.float32, name="sum")
    ok = evaluate_contract(matrix({"aten.sum.default": [_low(Accumulation.float32)]}), contract([req]), today=TODAY)
    assert ok.verdict is Verdict.passed, ok.blocking
    low = evaluate_contract(matrix({"aten.sum.default": [_low(Accumulation.bfloat16)]}), contract([req]), today=TODAY)
    (res,) = [r for r in low.requirements if r.id == "L2.ops.sum"]
    assert res.status is Status.failed and "the contract requires float32" in res.cells[0].reason


def test_gate_can_require_dynamic_shape_compiled_cells():
    static = entry(mode="compile", autograd=False).model_copy(update={"shapes": Shapes.static})
    req = op_req(["aten.add.Tensor"], compile=True, dynamic_shapes=True, name="add")
    without = evaluate_contract(matrix({"aten.add.Tensor": [entry(), static]}), contract([req]), today=TODAY)
    (res,) = [r for r in without.requirements if r.id == "L2.ops.add"]
    assert res.status is Status.failed and any("no dynamic-shape compiled cell" in c.reason for c in res.cells)
    dynamic = static.model_copy(update={"shapes": Shapes.dynamic, "ranks": static.ranks.model_copy(update={"max": 2})})
    ok = evaluate_contract(matrix({"aten.add.Tensor": [entry(), static, dynamic]}), contract([req]), today=TODAY)
    assert ok.verdict is Verdict.passed, ok.blocking
    broken = dynamic.model_copy(update={"outcome": Outcome.wrong})
    bad = evaluate_contract(matrix({"aten.add.Tensor": [entry(), static, broken]}), contract([req]), today=TODAY)
    assert bad.verdict is Verdict.blocked
    assert any(c.reason.startswith("dynamic shapes: outcome wrong") for r in bad.requirements for c in r.cells)


def test_fallback_forbidden_in_perf_blocks_a_record_that_ran_a_required_op_on_the_host():
    req = op_req(["aten.sort.default"], fallback=FallbackPolicy.forbidden_in_perf, worst_path="fallback", name="sort")
    m = matrix({"aten.sort.default": [entry(path="fallback", fallback="observed")]})
    perf = LevelRequirement(level=6, perf=PerfRequirement(records=["*"], fallback=FallbackPolicy.allowed,
                                                          baseline_required=False))
    c = contract([req], level=6, extra_levels=[perf])
    host = {"workload.mlp.eager.float32": _record(_samples(1.0), fallback="observed", backend="refaccel")}
    result = evaluate_contract(m, c, records=host, today=TODAY)
    assert next(r for r in result.requirements if r.id == "L2.ops.sort").status is Status.passed  # eager: allowed
    (held,) = [r for r in result.requirements if r.id == "L6.perf.fallback"]
    assert held.status is Status.failed and held.blocking
    assert "record workload.mlp.eager.float32 observed host fallback of required aten.sort.default" in held.cells[0].reason
    clean = {"workload.mlp.eager.float32": _record(_samples(1.0), backend="refaccel")}
    again = evaluate_contract(m, c, records=clean, today=TODAY)
    assert next(r for r in again.requirements if r.id == "L6.perf.fallback").status is Status.passed


def test_headline_reads_a_working_host_fallback_as_working_and_names_a_refused_backward():
    from opmatrix.matrix.headline import headline
    from opmatrix.schema import Autograd, ExecPath

    host = entry(("float32", "bfloat16"), (0, 3), path="fallback", fallback="observed")
    compiled = entry(("float32",), (1, 1), path="fallback", fallback="observed", mode="compile", autograd=False)
    text = headline([host, compiled])
    assert text.startswith("Works: eager through host fallback for bf16, fp32 at ranks 0-3; backward first-order "
                           "through host fallback; compiled (static shapes) through host fallback for fp32.")
    assert "Nothing probed failed." in text and "not ok" not in text
    refused = entry(("float32",), (0, 0)).model_copy(update={"autograd": Autograd(path=ExecPath.rejected, outcome=Outcome.ok)})
    said = headline([refused, entry(("float32",), (1, 3))])
    assert "Does not work: backward refused cleanly (the device rejects it; forward works) for fp32 at rank 0" in said


def test_query_shapes_dynamic_needs_compile_mode(tmp_path, capsys):
    from opmatrix.cli import main
    from opmatrix.schema import dump_model

    m = matrix({"aten.add.Tensor": [entry()]})
    path = tmp_path / "m.yaml"
    dump_model(m.seal(), path, command="test")
    assert main(["query", str(path), "aten.add.Tensor", "--dtype", "float32", "--rank", "2", "--shapes", "dynamic"]) == 2
    assert "--shapes dynamic: only with --mode compile" in capsys.readouterr().err
    assert main(["query", str(path), "aten.add.Tensor", "--dtype", "float32", "--rank", "2", "--mode", "compile",
                 "--shapes", "dynamic"]) == 0
    assert "was not probed in compile mode with dynamic shapes" in capsys.readouterr().out

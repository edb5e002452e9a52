"""What ``opmatrix explain`` says: --ops that probe accepts, one list per op, a comparison in words."""

from __future__ import annotations

from pathlib import Path

from opmatrix.matrix.placement import NodePlacement, Placement, compare_observed
from opmatrix.probes.ops.opinfo_names import aten_base, candidate_names, opinfo_names
from opmatrix.probes.ops.source import select_ops


def test_candidate_names_reach_the_public_operator():
    assert aten_base("aten._softmax.default") == "_softmax" and aten_base("aten::gelu") == "gelu"
    names = candidate_names("_native_batch_norm_legit_no_training")
    assert names[0] == "_native_batch_norm_legit_no_training" and "batch_norm" in names
    assert candidate_names("gelu") == ["gelu"]


def test_suggestions_are_opinfo_names_that_probe_selects():
    wanted = ["aten.gelu.default", "aten.layer_norm.default", "aten._softmax.default", "aten._to_copy.default",
              "aten.embedding.default", "aten.sub.Tensor", "aten.scaled_dot_product_attention.default"]
    found = opinfo_names(wanted)
    assert found["aten.gelu.default"] == ["nn.functional.gelu"]
    assert found["aten.layer_norm.default"] == ["nn.functional.layer_norm"]
    assert found["aten._softmax.default"] == ["softmax"]
    assert found["aten.embedding.default"] == ["nn.functional.embedding"]
    for op, names in found.items():
        assert names, f"{op}: no OpInfo found"
        for name in names:
            assert select_ops([name]), f"probe refuses --ops {name}"  # raises UnknownOp if not


def test_an_op_no_opinfo_calls_is_said_not_suggested():
    assert opinfo_names(["aten.zzz_not_an_op.default"]) == {"aten.zzz_not_an_op.default": []}
    report = Placement("m", "float32", "eager", nodes=[NodePlacement("n", "aten.zzz_not_an_op.default", "unknown",
                                                                      "unknown", "never probed")])
    report.suggestions = opinfo_names(report.unknown_ops())
    text = report.text()
    assert "--ops" not in text and "no OpInfo entry calls aten.zzz_not_an_op.default" in text


def _report() -> Placement:
    nodes = [
        NodePlacement("bmm", "aten.bmm.default", "rejected", "rejected", "no bmm kernel", module="attn"),
        NodePlacement("bmm_1", "aten.bmm.default", "rejected", "rejected", "no bmm kernel", module="attn"),
        NodePlacement("bmm_2", "aten.bmm.default", "unknown", "unknown", "rank 4 never probed"),
        NodePlacement("cumsum", "aten.cumsum.default", "host", "fallback", "fallback (ok)"),
        NodePlacement("gelu", "aten.gelu.default", "unknown", "unknown", "never probed"),
        NodePlacement("mm", "aten.mm.default", "device", "native", "native (ok)"),
    ]
    return Placement("tinygpt", "float32", "eager", nodes=nodes,
                     suggestions={"aten.gelu.default": ["nn.functional.gelu"]})


def test_every_op_is_in_exactly_one_list():
    report = _report()
    assert report.op_groups() == {"aten.bmm.default": "rejected", "aten.cumsum.default": "host",
                                  "aten.gelu.default": "unknown"}
    assert report.unknown_ops() == ["aten.gelu.default"]
    text = report.text()
    assert "rejected aten.bmm.default x2 in attn (bmm, bmm_1): no bmm kernel" in text
    assert "aten.bmm.default also: unknown 1 node(s)" in text
    unknown_line = next(line for line in text.splitlines() if "not probed at a dtype, rank or layout" in line)
    assert "bmm" not in unknown_line
    assert "--ops nn.functional.gelu " in text


def test_the_comparison_says_what_was_compared_and_the_result_in_words():
    report = _report()
    report.compared_with = "the tinygpt run in this matrix (float32, eager), inference step"
    compare_observed(report, ["aten::cumsum.out"])
    assert report.verdict() == "the prediction matches: aten::cumsum on the host, as observed"
    text = report.text()
    assert "compared with the tinygpt run in this matrix (float32, eager), inference step" in text
    assert "agree -" not in text
    compare_observed(report, ["aten::sort.stable"])
    assert report.verdict().startswith("the prediction differs: observed on the host but not predicted: aten::sort")


def test_a_run_that_failed_is_not_compared(tmp_path: Path):
    report = _report()
    report.not_compared = "the tinygpt run in this matrix (float32, eager) did not complete its inference step (error)"
    assert "not compared: the tinygpt run" in report.text()
    assert report.to_json()["comparison_result"].startswith("the tinygpt run")

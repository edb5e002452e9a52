"""One operator vocabulary end to end: :class:`OpName` parses and prints every spelling, and the
probes, the query, the workload diff, the gate's op sets and the reports go through it.

The spellings are checked against PyTorch itself (its own ``str`` of an overload and its
dispatcher), so a caller that went back to writing names by hand (``.default`` kept in a
dispatcher name, a namespace cut at the first dot, ``::`` swapped for ``.``) fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from opmatrix.schema import OpName

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dotted, qualified", [
    ("aten._foo.out", "aten::_foo.out"),
    ("aten.__and__.Tensor", "aten::__and__.Tensor"),
    ("aten.add_.Tensor", "aten::add_.Tensor"),
    ("aten._softmax.default", "aten::_softmax"),
    ("aten.to.dtype_layout", "aten::to.dtype_layout"),
    ("torch_nn.linear_relu.default", "torch_nn::linear_relu"),
])
def test_odd_overload_names_round_trip_between_both_spellings(dotted: str, qualified: str):
    op = OpName.parse(dotted)
    assert OpName.parse(qualified) == op
    assert (str(op), op.qualified) == (dotted, qualified)
    assert op.event_name == qualified.partition(".")[0]


def test_the_default_overload_rule():
    """Written in the matrix spelling, never in the dispatcher's; a dispatcher name without one
    means it; a dotted name without one only where a person types it (shorthand)."""
    relu = OpName("aten", "relu")
    assert (str(relu), relu.qualified) == ("aten.relu.default", "aten::relu")
    assert OpName.parse("aten::relu") == OpName.parse("aten.relu.default") == relu
    with pytest.raises(ValueError, match="operator name 'aten.relu'"):
        OpName.parse("aten.relu")
    assert OpName.parse("aten.relu", shorthand=True) == relu
    assert OpName.parse(str(torch.ops.aten.relu), shorthand=True) == relu  # a packet prints aten.relu


def test_an_opinfo_cell_name_keeps_its_dots_and_is_no_operator():
    """A sample that calls several ops is filed under its OpInfo, whose name may hold dots; a
    two-part one (``opinfo.abs``) is not a shorthand for an ``opinfo.abs.default`` overload."""
    for name in ("opinfo.linalg.pinv.singular", "opinfo.abs", "opinfo.nn.functional.conv2d"):
        op = OpName.parse(name, shorthand=True)
        assert op.is_opinfo and str(op) == name and OpName.parse(str(op)) == op
        assert op.short == name
    assert OpName.opinfo("softmax.with_dtype") == OpName.parse("opinfo.softmax.with_dtype")
    assert not OpName.parse("aten.abs.default").is_opinfo
    with pytest.raises(ValueError, match="OpInfo name"):
        OpName.opinfo("nn..conv2d")


@pytest.mark.parametrize("bad", ["aten::foo.bar.baz", "aten::", "::relu", "aten.relu.", "aten.re lu.default", ""])
def test_malformed_names_are_refused_naming_the_input(bad: str):
    with pytest.raises(ValueError, match="operator name"):
        OpName.parse(bad, shorthand=True)


def test_every_aten_overload_prints_as_torch_does_and_its_dispatcher_name_is_accepted():
    """torch's own ``str`` of each overload is the matrix spelling, and the dispatcher accepts the
    qualified spelling (it refuses ``aten::relu.default``)."""
    from opmatrix.probes.ops.observe import overload_name

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    seen = 0
    for packet_name in ("relu", "add", "softmax", "_softmax", "abs", "mm", "to", "__and__", "native_batch_norm"):
        packet = getattr(torch.ops.aten, packet_name)
        for ov in packet.overloads():
            overload = getattr(packet, ov)
            op = OpName.parse(str(overload))
            assert overload_name(overload) == str(op) == str(overload)
            assert OpName.parse(overload.name()) == op  # torch's dispatcher spelling of it
            assert op.qualified == overload.name()
            try:
                has(op.qualified, "CPU")
            except RuntimeError as exc:  # only a TorchScript-only overload (aten::add.t) is unknown to it
                assert "does not exist" in str(exc), exc
            seen += 1
    assert seen > 40


def test_registrations_and_out_variants_are_looked_up_by_op_name():
    from opmatrix.probes.ops import observe

    abs_ = OpName.parse("aten.abs.default")
    assert observe.registration(abs_, "CPU").composite  # abs is CompositeExplicitAutograd over abs.out
    assert observe.out_variant(abs_) == OpName.parse("aten::abs.out")
    assert OpName.parse("aten.add.Tensor") in observe.overloads_of("aten::add")
    assert observe.overloads_of("ProfilerStep#1") == ()
    pinv = OpName.parse("opinfo.linalg.pinv.singular")
    reg = observe.registration(pinv, "CPU")
    assert not (reg.backend or reg.composite)
    assert observe.event_names(frozenset({"aten.add.Tensor", "aten._softmax.default"})) == {"aten::add", "aten::_softmax"}


def test_an_error_names_the_op_by_its_name_not_its_namespace():
    from opmatrix.probes.ops.values import error_info

    exc = RuntimeError('"_foo_cpu" not implemented for int8')
    assert error_info(exc, OpName.parse("aten::_foo.out"), "refaccel", "int8").actionable
    assert not error_info(exc, OpName.parse("aten::_bar.out"), "refaccel", "int8").actionable


def test_the_query_resolves_every_spelling_to_the_matrix_name(example_matrix_path: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    from opmatrix.matrix import MatrixIndex, UnknownOperatorError

    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path))
    m = MatrixIndex.load(example_matrix_path)
    for given in ("aten::softmax.int", " aten.softmax.int", torch.ops.aten.softmax.int):
        assert m.resolve(given) == "aten.softmax.int"
    # real operators the matrix did not probe: the default overload filled in, both spellings alike
    for given in ("aten::relu", "aten.relu", torch.ops.aten.relu, torch.ops.aten.relu.default):
        assert m.resolve(given) == "aten.relu.default"
    assert m.resolve("aten::_softmax.out") == m.resolve("aten._softmax.out") == "aten._softmax.out"
    with pytest.raises(UnknownOperatorError, match="did you mean aten.softmax.int"):
        m.resolve("aten::softmax")  # no default overload: which one?
    with pytest.raises(UnknownOperatorError, match="'aten.relu.nope'"):
        m.resolve("aten.relu.nope")


def test_workload_diff_gate_opsets_and_reports_print_through_op_name():
    from opmatrix.ci.opsets import tagged_overloads
    from opmatrix.matrix.workloads import base_name
    from opmatrix.probes.ops.opinfo_names import aten_base
    from opmatrix.reports.verdict import short_op

    assert base_name("aten::cumsum.out") == base_name("aten.cumsum.default") == base_name("aten.cumsum") == "aten::cumsum"
    assert base_name("cudaLaunchKernel") == "cudaLaunchKernel"
    assert aten_base("aten::_foo.out") == aten_base("aten._foo.out") == "_foo"
    assert aten_base("gelu.default") == aten_base("aten.gelu") == "gelu"
    assert (short_op("aten.mm.default"), short_op("aten.add.Tensor"), short_op("opinfo.linalg.pinv")) == \
        ("mm", "add.Tensor", "opinfo.linalg.pinv")
    core = tagged_overloads("core")
    assert "aten.relu.default" in core and all(OpName.parse(n) for n in core)


#: what a hand-written conversion of an operator name reaches for
_NAME_PARTS = {"::", ".default", "opinfo.", "aten."}
_STRING_SURGERY = {"partition", "rpartition", "split", "rsplit", "replace", "startswith", "endswith", "removeprefix",
                   "removesuffix"}


def test_no_module_outside_schema_names_takes_operator_names_apart_by_hand():
    """The modules that name operators split no name at ``::``, test no ``.default`` or
    ``opinfo.`` prefix or suffix themselves: :class:`OpName` does (schema/names.py)."""
    hits = []
    for top in ("probes", "matrix", "ci", "reports", "opmatrix"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                        and node.func.attr in _STRING_SURGERY:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and first.value in _NAME_PARTS:
                        hits.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.func.attr}({first.value!r})")
    assert hits == [], f"operator names taken apart by hand (use OpName): {hits}"

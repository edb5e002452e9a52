"""Operator probes on real backends (cpu, meta): paths, layouts, conditions, numerics."""

from __future__ import annotations

import pytest
import torch

from opmatrix.backend import get_adapter
from opmatrix.probes.ops.cells import SampleResult, cells_from_samples
from opmatrix.probes.ops.engine import probe_task
from opmatrix.probes.ops.layouts import make_variant, to_device, transform_sample
from opmatrix.probes.ops.numerics import compare, tolerance_for
from opmatrix.probes.ops.source import UnknownOp, select_ops
from opmatrix.schema import ExecPath, Layout, Mode, Outcome, Shapes


@pytest.fixture(scope="module")
def cpu():
    a = get_adapter("cpu")
    a.setup()
    return a


def _cells(record, op=None, layout=None, rank=None):
    return [
        c for c in record.cells
        if (op is None or c.op == op) and (layout is None or c.layout == layout) and (rank is None or c.rank == rank)
    ]


def test_layout_variants_have_the_strides_they_name():
    t = torch.arange(24.0).view(2, 3, 4)
    assert make_variant(t, Layout.contiguous).view.is_contiguous()
    nc = make_variant(t, Layout.noncontiguous).view
    assert not nc.is_contiguous() and torch.equal(nc, t) and nc.stride()[-1] == 2
    tr = make_variant(t, Layout.transposed).view
    assert tr.stride()[-2:] == (1, 3) and torch.equal(tr, t)
    so = make_variant(t, Layout.storage_offset).view
    assert so.storage_offset() == 3 and torch.equal(so, t)
    ex = make_variant(t, Layout.expanded).view
    assert ex.stride()[0] == 0
    assert make_variant(t, Layout.channels_last) is None  # rank 3
    cl = make_variant(torch.randn(2, 3, 4, 5), Layout.channels_last).view
    assert cl.is_contiguous(memory_format=torch.channels_last)
    assert make_variant(torch.tensor(1.0), Layout.noncontiguous) is None


def test_device_copy_keeps_sizes_strides_and_offset():
    t = torch.arange(12.0).view(3, 4)
    for layout in (Layout.noncontiguous, Layout.transposed, Layout.storage_offset, Layout.expanded):
        v = make_variant(t, layout)
        d = to_device(v, "meta")
        assert (d.shape, d.stride(), d.storage_offset()) == (v.view.shape, v.view.stride(), v.view.storage_offset())


def test_transform_skips_layouts_that_do_not_apply_to_the_primary_tensor():
    values = (torch.randn(3), (torch.randn(3),), {})
    assert transform_sample(values, Layout.transposed) is None
    assert transform_sample(values, Layout.noncontiguous) is not None


def test_select_ops_by_name_pattern_and_unknown():
    names = [o.full_name for o in select_ops(["softmax"])]
    assert names == ["softmax", "softmax.with_dtype"]
    assert {o.full_name for o in select_ops(["nn.functional.rel*"])} >= {"nn.functional.relu"}
    with pytest.raises(UnknownOp, match="did you mean softmax"):
        select_ops(["sofmax"])


def test_cpu_add_is_native_and_matches_itself(cpu):
    rec = probe_task(cpu, "add", "float32")
    cells = _cells(rec, op="aten.add.Tensor")
    assert cells and rec.outcome is Outcome.ok
    assert {c.result.path for c in cells} == {ExecPath.native}
    assert {c.result.outcome for c in cells} == {Outcome.ok}
    assert {c.layout for c in cells} >= {Layout.contiguous, Layout.noncontiguous, Layout.transposed, Layout.expanded}
    grads = [c.result.autograd for c in cells if c.result.autograd]
    assert grads and all(g.outcome is Outcome.ok for g in grads)


def test_cpu_softmax_alias_is_native_through_the_softmax_kernel(cpu):
    rec = probe_task(cpu, "softmax", "float32")
    cells = [c for c in _cells(rec, op="aten.softmax.int") if c.mode is Mode.eager]
    # softmax.int is CompositeImplicitAutograd, but one native kernel (_softmax) did all the work
    assert cells and all(c.result.path is ExecPath.native for c in cells)
    assert all(c.result.note == "served by the aten._softmax.default kernel" for c in cells)
    # dim variants: rank-3 contiguous samples exist for both the first and the last axis
    assert sum(c.result.samples.probed for c in _cells(rec, op="aten.softmax.int", layout=Layout.contiguous, rank=3)) >= 3


def test_cpu_softmax_with_dtype_records_the_dtype_condition(cpu):
    rec = probe_task(cpu, "softmax.with_dtype", "float32")
    assert rec.cells and all(c.result.conditions.get("dtype") == "float64" for c in rec.cells)


def test_one_representative_sample_per_op_is_compiled_and_matches_eager(cpu):
    rec = probe_task(cpu, "add", "float32")
    compiled = [c for c in rec.cells if c.mode is Mode.compile and c.result.shapes is Shapes.static]
    assert len(compiled) == 1 and compiled[0].result.outcome is Outcome.ok
    assert compiled[0].result.path is ExecPath.native
    # and one dynamic-shape check (dynamic=True at two sizes) beside it
    assert len([c for c in rec.cells if c.result.shapes is Shapes.dynamic]) == 1
    assert not [c for c in probe_task(cpu, "add", "int64").cells if c.mode is Mode.compile]


def test_map_values_keeps_the_structure_and_maps_every_leaf() -> None:
    from opmatrix.probes.ops.values import map_tensors

    x = torch.ones(2)
    values = (x, (x, 2, [x, None, torch.float32]), {"alpha": 2, "other": [x, (x,)]})
    mapped = map_tensors(values, lambda t: "T")
    assert mapped == ("T", ("T", 2, ["T", None, torch.float32]), {"alpha": 2, "other": ["T", ("T",)]})


def test_int_dtype_compares_exactly_and_float_upcast_for_half(cpu):
    rec = probe_task(cpu, "mul", "int32")
    assert all(c.result.numerics and c.result.numerics.atol == 0 for c in rec.cells)
    rec16 = probe_task(cpu, "mul", "bfloat16")
    kinds = {c.result.numerics.reference.value for c in rec16.cells if c.result.numerics}
    assert kinds <= {"cpu_upcast", "cpu_same_dtype"} and kinds


def test_meta_runs_shapes_only_and_never_claims_numerics():
    meta = get_adapter("meta")
    rec = probe_task(meta, "add", "float32", options={"compile": "off"})
    assert rec.cells
    assert all(c.result.numerics is None for c in rec.cells)
    assert {c.result.path for c in rec.cells} == {ExecPath.native}


def test_unknown_source_and_dtype_without_samples_are_skipped_with_a_reason(cpu):
    rec = probe_task(cpu, "no_such_op", "float32")
    assert rec.skipped and "no OpInfo named" in rec.skipped


def test_compare_reports_errors_and_tolerances():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert compare(a, a.clone(), 1e-6, 1e-6).ok
    bad = compare(a + torch.tensor([0, 0, 1e-3]), a, 1e-6, 1e-6)
    assert not bad.ok and abs(bad.max_abs - 1e-3) < 1e-6 and "1 of 3" in bad.detail
    nan = torch.tensor([float("nan"), 1.0])
    assert compare(nan, nan.clone(), 0, 0).ok
    assert not compare(torch.tensor([1, 2]), torch.tensor([1, 3]), 0, 0).ok
    assert tolerance_for("aten.mm.default", torch.float32) == (1e-4, 1e-4)
    assert tolerance_for("aten.add.Tensor", torch.float64) == (1e-7, 1e-7)


def _s(path, dim, rank=3):
    return SampleResult(op="aten.softmax.int", rank=rank, layout=Layout.contiguous, mode=Mode.eager,
                        path=path, outcome=Outcome.ok, features={"dim": dim})


def test_a_separating_argument_feature_becomes_the_condition():
    cells = cells_from_samples([_s(ExecPath.native, "last"), _s(ExecPath.composite, "first"),
                                _s(ExecPath.composite, "middle"), _s(ExecPath.native, "last")], "float32")
    by_cond = {tuple(c.result.conditions.items()): c.result for c in cells}
    assert by_cond[(("dim", "last"),)].path is ExecPath.native
    assert by_cond[(("dim", "first"),)].path is ExecPath.composite
    assert by_cond[(("dim", "last"),)].samples.probed == 2


def test_paths_no_feature_separates_are_marked_mixed_with_counts():
    a, b = _s(ExecPath.native, "last"), _s(ExecPath.fallback, "last")
    (cell,) = cells_from_samples([a, b], "float32")
    assert cell.result.mixed and cell.result.path is ExecPath.fallback
    assert cell.result.samples.by_path == {ExecPath.native: 1, ExecPath.fallback: 1}


def test_a_sample_composed_in_python_is_keyed_by_its_opinfo_not_its_first_op(cpu):
    rec = probe_task(cpu, "nn.functional.normalize", "float32", options={"compile": "off"})
    ops = {c.op for c in rec.cells}
    assert "opinfo.nn.functional.normalize" in ops
    assert "aten.linalg_vector_norm.default" not in ops
    cell = next(c for c in rec.cells if c.op == "opinfo.nn.functional.normalize")
    assert cell.result.path is ExecPath.composite and "aten.div.Tensor" in cell.result.components


def test_an_output_of_the_wrong_dtype_is_wrong_even_if_the_values_match():
    from opmatrix.probes.ops.judging import Reference, judge

    ref = Reference(same=torch.ones(3, dtype=torch.float16), upcast=torch.ones(3, dtype=torch.float32))
    judged = judge(ref, torch.ones(3, dtype=torch.float64), "aten.x.default", torch.float16, True)
    assert not judged.ok and "dtype float64, reference float16" in (judged.comparison.detail or "")


def test_conjugate_views_keep_their_values_in_every_layout(cpu):
    # OpInfo's complex samples include conj() views; a layout rebuilt over the storage must not
    # drop the conjugate bit (that once turned CPU-vs-CPU addmm into "wrong")
    rec = probe_task(cpu, "addmm", "complex64", options={"compile": "off", "autograd": False})
    assert rec.cells and {c.result.outcome for c in rec.cells} == {Outcome.ok}


def test_outputs_defined_up_to_sign_are_compared_as_opinfo_compares_them() -> None:
    """A device's SVD may flip singular-vector signs: valid, so not wrong (output_process_fn_grad)."""
    from opmatrix.probes.ops.judging import Reference, judge, post, reference
    from opmatrix.probes.ops.source import generate_samples
    from opmatrix.probes.ops.units import Unit
    from opmatrix.probes.ops.values import to_cpu

    (entry,) = [e for e in select_ops(["linalg.svd"]) if e.full_name == "linalg.svd"]
    checked = caught = 0
    for sample in generate_samples(entry, torch.float64):
        a = sample.input
        if a.dim() != 2 or min(a.shape) < 2:
            continue
        unit = Unit("0", Layout.contiguous, ((a,), (), dict(sample.kwargs)), None, 2, "aten.linalg_svd.default",
                            {}, post=sample.output_process_fn_grad)
        unit.cpu_values = (a, (), dict(sample.kwargs))
        ref = reference(entry.info.op, unit.cpu_values, torch.float64, unit.post)
        u, s, vh = torch.linalg.svd(a, **sample.kwargs)
        signs = torch.tensor([(-1.0) ** i for i in range(s.shape[-1])], dtype=a.dtype)
        k = s.shape[-1]
        flipped = (u[:, :k] * signs, s, vh[:k] * signs[:, None])  # another valid SVD
        if u.shape[1] > k:
            flipped = (torch.cat([flipped[0], u[:, k:]], 1), s, torch.cat([flipped[2], vh[k:]], 0) if vh.shape[0] > k else flipped[2])
        raw_ok = judge(Reference(to_cpu(torch.linalg.svd(a, **sample.kwargs)), None),
                       flipped, str(unit.overload), torch.float64, True).ok
        post_ok = judge(ref, post(unit, flipped)[0], str(unit.overload), torch.float64, True).ok
        assert not raw_ok and post_ok
        wrong = (flipped[0], s * 1.01, flipped[2])
        caught += not judge(ref, post(unit, wrong)[0], str(unit.overload), torch.float64, True).ok
        checked += 1
    # each sample compares one aspect (U, S, Vh or U @ Vh with S): wrong singular values are caught
    assert checked >= 4 and caught >= checked // 2


def test_opinfo_declared_random_or_undefined_outputs_are_not_compared() -> None:
    """svd_lowrank is randomised, shifts past the bit width are undefined; sdpa is only per sample."""
    from opmatrix.probes.ops.source import values_undefined

    def entry(name: str):  # noqa: ANN202
        return next(e for e in select_ops([name]) if e.full_name == name)

    assert "non-deterministic" in (values_undefined(entry("svd_lowrank"), torch.float32) or "")
    assert "undefined" in (values_undefined(entry("bitwise_left_shift"), torch.int64) or "")
    assert values_undefined(entry("add"), torch.float32) is None
    assert values_undefined(entry("nn.functional.scaled_dot_product_attention"), torch.float32) is None
    record = probe_task(get_adapter("cpu"), "svd_lowrank", "float32", options={"compile": "off", "layouts": ["contiguous"]})
    assert record.cells and all(c.result.outcome is Outcome.ok for c in record.cells)
    assert all("values not compared" in (c.result.note or "") for c in record.cells)


def test_a_miscompiled_result_is_wrong_and_says_what_differs(cpu):
    """A compiler backend that returns other values (here one that adds 1 to every output, as a
    vendor compiler with a bad lowering would): the compiled cell is wrong, with its error and the
    count of differing values, like an eager cell."""
    from torch._dynamo import list_backends, register_backend

    if "opmatrix_off_by_one" not in list_backends(exclude_tags=()):
        @register_backend(name="opmatrix_off_by_one")
        def off_by_one(gm, example_inputs):  # noqa: ANN001, ANN202 - dynamo's backend signature
            def run(*args):  # noqa: ANN002, ANN202
                out = gm(*args)
                return type(out)(o + 1 if isinstance(o, torch.Tensor) else o for o in out)
            return run

    rec = probe_task(cpu, "add", "float32", options={"compile_backend": "opmatrix_off_by_one"})
    (compiled,) = [c for c in rec.cells if c.mode is Mode.compile and c.result.shapes is Shapes.static]
    assert compiled.result.outcome is Outcome.wrong
    (dynamic,) = [c for c in rec.cells if c.result.shapes is Shapes.dynamic]
    assert dynamic.result.outcome is Outcome.wrong  # the same bad lowering with symbolic shapes
    assert compiled.result.numerics is not None and compiled.result.numerics.max_abs_err == 1.0
    assert compiled.result.numerics.mismatched and "values outside" in (compiled.result.note or ""), compiled.result.note

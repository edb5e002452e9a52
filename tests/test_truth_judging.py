"""The judging parts of truth, round 3, without a device: comparisons that run for every dtype,
errors of wrong integer results, random draws judged by their distribution, the refusal table,
views that keep their storage, empty-input-only support split off its cell, and outputs an op
does not define uniquely (tied indices, unordered results) compared by what it does define."""

from __future__ import annotations

import torch

from opmatrix.backend.base import REFUSALS, refusal_of
from opmatrix.probes.ops.cells import SampleResult, cells_from_samples
from opmatrix.probes.ops.defined import canonical, canonical_gradients
from opmatrix.probes.ops.layouts import make_variant, to_device
from opmatrix.probes.ops.numerics import compare, moments_differ
from opmatrix.schema import ErrorInfo, ExecPath, Layout, Mode, Outcome


def test_complexhalf_and_float8_outputs_compare() -> None:
    """torch.equal has no ComplexHalf or float8 kernel on the CPU: the comparison upcasts first."""
    c = torch.randn(4, dtype=torch.complex64).to(torch.complex32)
    assert compare(c, c.clone(), 1e-3, 1e-5).ok
    off = c.clone()
    off[0] = off[0] + 1
    res = compare(off, c, 1e-3, 1e-5)
    assert not res.ok and res.mismatched == 1 and res.max_abs is not None and res.max_abs > 0.5
    f8 = torch.randn(5).to(torch.float8_e4m3fn)
    assert compare(f8, f8.clone(), 0.0, 0.0).ok


def test_a_wrong_integer_result_carries_its_error_and_count() -> None:
    """Exact dtypes: the error in a wide type (never 0.0 when values differ) and how many differ."""
    expected = torch.arange(25, dtype=torch.int64)
    actual = expected.clone()
    actual[::5] += 3
    res = compare(actual, expected, 0.0, 0.0)
    assert not res.ok and res.max_abs == 3.0 and res.mismatched == 5, res
    big = torch.tensor([2**62, -(2**62)], dtype=torch.int64)
    far = compare(-big, big, 0.0, 0.0)  # an int64 difference that would overflow in int64
    assert far.max_abs is not None and far.max_abs > 2**62


def test_random_draws_are_judged_by_their_moments() -> None:
    """Two draws of one distribution agree; another scale, another mean or a constant do not."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4000, generator=g), torch.randn(4000, generator=g)
    assert moments_differ(a, b) is None
    assert moments_differ(a * 3, b) is not None
    assert moments_differ(a + 1, b) is not None
    assert moments_differ(torch.zeros(4000), b) is not None
    assert moments_differ(torch.rand(8), torch.rand(8)) is None  # too few values to say anything


def test_the_refusal_table_names_what_is_unsupported() -> None:
    """Messages naming what is unsupported are refusals whatever the exception type; an internal
    error or Python's own operator errors are not."""
    for text in ("abs: only supports float type", "device memory cannot hold complex64",
                 "\"add_stub\" not implemented for 'ComplexHalf'", "Could not run 'aten::foo' with arguments",
                 "float64 is not supported on this device",
                 # a kernel stating the layout or the rank it needs, in a vendor's words
                 "TA_E_LAYOUT(0x31): mul kernel requires contiguous input", "QX: input must be contiguous",
                 "conv kernel only accepts channels_last tensors", "npu_mm expects a 2-D input, got 3-D",
                 "TA_E_RANK: reduce kernel takes only 4 dims", "kernel requires rank <= 4 (got rank 5)",
                 "matrix engine expects 2D operands", "vector unit needs 1-dimensional input",
                 # other common wordings, libtorch's among them
                 "heaviside is not yet implemented for complex tensors", "ChannelsLast2d doesn't support size 5",
                 "bf16 isn't supported by the vector unit", "sparse inputs aren't supported",
                 "this op is not currently supported on the toy device", "has not been implemented for rank > 4",
                 "No implementation for aten::foo on toyaccel", "the kernel cannot handle non-contiguous input",
                 "expected input to be contiguous", "input should be contiguous",
                 "only contiguous tensors are allowed"):
        assert refusal_of(RuntimeError(text)) is not None, text
    assert refusal_of(NotImplementedError("")) is not None
    for text in ("internal error 0x1f", "INTERNAL ASSERT FAILED: not supported", "'<' not supported between instances"
                 " of 'Tensor' and 'NoneType'",
                 # a shape or size check and a view that no stride allows are not refusals of a layout or rank
                 "Expected size 5 but got size 3 for tensor number 1 in the list",
                 "view size is not compatible with input tensor's size and stride (at least one dimension spans "
                 "across two contiguous subspaces). Use .reshape(...) instead.",
                 "expected scalar type Float but found Double", "Expected all tensors to be on the same device",
                 "Dimension out of range (expected to be in range of [-1, 0], but got 2)",
                 "mat1 and mat2 shapes cannot be multiplied (5x3 and 4x5)"):
        assert refusal_of(RuntimeError(text)) is None, text
    assert all(r.pattern and r.names for r in REFUSALS)


def test_a_view_into_a_larger_storage_keeps_that_storage() -> None:
    """The contiguous variant of a partial view copies the whole storage and rebuilds the same
    view over it: as_strided of the staged tensor reads what the CPU's reads."""
    base = torch.arange(10.0)
    view = base[2:6]
    variant = make_variant(view, Layout.contiguous)
    assert variant is not None
    staged = to_device(variant, torch.device("cpu"))
    assert staged.storage_offset() == 2 and staged.untyped_storage().nbytes() == base.untyped_storage().nbytes()
    assert torch.equal(torch.as_strided(staged, (3,), (2,), 1), torch.as_strided(view, (3,), (2,), 1))


def _sample(path: ExecPath, outcome: Outcome, empty: bool) -> SampleResult:
    return SampleResult(op="aten.softmax.int", rank=3, layout=Layout.contiguous, mode=Mode.eager, path=path,
                        outcome=outcome, features={"input": "empty" if empty else "nonempty"})


def test_support_for_empty_inputs_alone_splits_the_cell() -> None:
    """Only the empty sample runs: input=empty and input=nonempty are separate results; when
    nonempty samples run too, nothing splits."""
    cells = cells_from_samples([_sample(ExecPath.native, Outcome.ok, True),
                                _sample(ExecPath.rejected, Outcome.ok, False),
                                _sample(ExecPath.rejected, Outcome.ok, False)], "int16")
    split = {c.result.conditions.get("input"): c.result.path for c in cells}
    assert split == {"empty": ExecPath.native, "nonempty": ExecPath.rejected}, split
    together = cells_from_samples([_sample(ExecPath.native, Outcome.ok, True),
                                   _sample(ExecPath.native, Outcome.ok, False)], "int16")
    assert len(together) == 1 and not together[0].result.conditions


def test_a_sample_is_filed_under_its_own_dtype() -> None:
    """A sample whose first tensor is float32 in an int16 task is a float32 cell, never int16."""
    s = _sample(ExecPath.native, Outcome.ok, False)
    s.dtype = "float32"
    (cell,) = cells_from_samples([s], "int16")
    assert cell.dtype.value == "float32"


def test_out_of_memory_in_any_words_is_oom() -> None:
    """torch's OutOfMemoryError, Python's MemoryError (a numpy-backed kernel) and a runtime's
    "out of memory" RuntimeError are oom, whatever dtype the message names."""
    from opmatrix.backend.base import Adapter

    adapter = Adapter()
    for exc in (torch.OutOfMemoryError("CUDA out of memory"),
                MemoryError("Unable to allocate 512. TiB for an array with shape (2**47,) and data type float64"),
                RuntimeError("toy allocator: out of memory. Tried to allocate 2.00 GiB")):
        assert adapter.classify_exception(exc).outcome == "oom", exc


def test_a_cells_error_is_that_of_a_sample_with_its_outcome() -> None:
    """A cell whose worst outcome is one sample's error shows that error, not the refusal another
    sample of the cell gave (torch_xla's cumprod: one empty sample refused, another failing)."""
    refused = _sample(ExecPath.rejected, Outcome.ok, False)
    refused.error = ErrorInfo(type="RuntimeError", message="QX: cumprod of an empty input is not supported",
                              actionable=True)
    failed = _sample(ExecPath.native, Outcome.error, False)
    failed.error = ErrorInfo(type="RuntimeError", message="Check failed: tensor_data:", actionable=False)
    for order in ([refused, failed], [failed, refused]):
        (cell,) = cells_from_samples(order, "float32")
        assert cell.result.outcome is Outcome.error
        assert cell.result.error is not None and cell.result.error.message == "Check failed: tensor_data:"


def test_a_tensor_where_the_cpu_returns_a_value_is_a_difference() -> None:
    """A device ``equal`` that returns a tensor where the CPU returns a bool: the outputs differ
    (before, comparing them raised and the cell read ok with "opmatrix's comparison failed")."""
    from opmatrix.probes.ops.numerics import compare

    got = compare(torch.tensor([True, True]), True, 0.0, 0.0)
    assert not got.ok and "is a tensor, expected bool" in got.detail, got
    assert compare(torch.tensor(3), torch.tensor(3), 0.0, 0.0).ok


def test_tied_sort_indices_are_judged_by_the_values_they_select() -> None:
    """8,000 equal values: the CPU sorts the expanded view in place order, a device that sorts a
    contiguous copy returns another order; both select the same values, so both are right."""
    x = torch.zeros(1).expand(8000)
    cpu, device = tuple(torch.sort(x)), tuple(torch.sort(x.contiguous()))
    assert not torch.equal(cpu[1], device[1])  # the tie order really differs
    same = canonical("aten.sort.default", (x, (), {}), device, cpu)
    assert same.rewritten and same.problem is None and compare(same.out, same.ref, 0.0, 0.0).ok


def test_indices_that_select_wrong_values_or_repeat_are_wrong() -> None:
    """Reversed indices of distinct values select the wrong values; indices that repeat a tied
    element select the right values yet are no permutation: both are said."""
    x = torch.arange(10.0)
    cpu = tuple(torch.sort(x))
    reversed_ = canonical("aten.sort.default", (x, (), {}), (cpu[0], cpu[1].flip(0)), cpu)
    assert not compare(reversed_.out, reversed_.ref, 0.0, 0.0).ok
    ties = torch.zeros(6)
    repeated = canonical("aten.sort.default", (ties, (), {}), (ties, torch.zeros(6, dtype=torch.long)),
                         tuple(torch.sort(ties)))
    assert repeated.problem == "output 1: 5 indices along dim -1 repeat an element (they must be distinct)"


def test_a_stable_sort_compares_its_indices_exactly() -> None:
    """With stable=True the order of ties is defined (input order): the indices are not rewritten."""
    x = torch.zeros(5)
    cpu = tuple(torch.sort(x, stable=True))
    other = canonical("aten.sort.stable", (x, (), {"stable": True}), (cpu[0], cpu[1].flip(0)), cpu)
    assert not other.rewritten and not compare(other.out, other.ref, 0.0, 0.0).ok


def test_reductions_with_an_index_keep_dim_or_drop_it() -> None:
    """max.dim's index of a tie (keepdim or not) is right when it selects the maximum."""
    x = torch.tensor([[3.0, 1.0, 3.0], [2.0, 2.0, 0.0]])
    for keepdim in (False, True):
        cpu = tuple(torch.max(x, 1, keepdim))
        other = (cpu[0], torch.tensor([[2], [1]]) if keepdim else torch.tensor([2, 1]))
        same = canonical("aten.max.dim", (x, (1, keepdim), {}), other, cpu)
        assert same.problem is None and compare(same.out, same.ref, 0.0, 0.0).ok
        wrong = canonical("aten.max.dim", (x, (1, keepdim), {}), (cpu[0], cpu[1] * 0 + 1), cpu)
        assert not compare(wrong.out, wrong.ref, 0.0, 0.0).ok


def test_unsorted_topk_and_unique_compare_as_sets() -> None:
    """topk(sorted=False) and unique(sorted=False) promise no order: another order is right, other
    values are not."""
    x = torch.tensor([5.0, 1.0, 4.0, 2.0])
    cpu = tuple(torch.topk(x, 2, sorted=False))
    flipped = (cpu[0].flip(0), cpu[1].flip(0))
    same = canonical("aten.topk.default", (x, (2, -1, True, False), {}), flipped, cpu)
    assert compare(same.out, same.ref, 0.0, 0.0).ok
    u = torch.tensor([3, 1, 3, 2])
    ref = (torch.tensor([1, 2, 3]), torch.tensor([2, 0, 2, 1]), torch.tensor([1, 1, 2]))
    dev = (torch.tensor([3, 1, 2]), torch.tensor([0, 1, 0, 2]), torch.tensor([2, 1, 1]))
    same = canonical("aten._unique2.default", (u, (False, True, True), {}), dev, ref)
    assert compare(same.out, same.ref, 0.0, 0.0).ok
    bad = canonical("aten._unique2.default", (u, (False, True, True), {}), (dev[0], dev[1], ref[2]), ref)
    assert not compare(bad.out, bad.ref, 0.0, 0.0).ok


def test_gradients_through_tied_selections_compare_per_tie_group() -> None:
    """Sorting ties on another order sends each upstream gradient to another equal element: the
    sum over each group of equal inputs is what is defined, and a gradient off that sum is wrong."""
    x = torch.tensor([1.0, 2.0, 1.0, 1.0])
    cpu_grad, device_grad = torch.tensor([1.0, 5.0, 2.0, 3.0]), torch.tensor([3.0, 5.0, 1.0, 2.0])
    a, e = canonical_gradients("aten.sort.default", (x, (), {}), (True,), [device_grad], [cpu_grad])
    assert compare(a, e, 0.0, 0.0).ok
    a, e = canonical_gradients("aten.sort.default", (x, (), {}), (True,), [device_grad + 1], [cpu_grad])
    assert not compare(a, e, 0.0, 0.0).ok
    a, e = canonical_gradients("aten.sort.stable", (x, (), {"stable": True}), (True,), [device_grad], [cpu_grad])
    assert not compare(a, e, 0.0, 0.0).ok  # a stable sort's gradient is defined element by element

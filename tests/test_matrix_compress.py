"""Compression of cells into entries: exact, deterministic, close to minimal."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from opmatrix.matrix.compress import Box, compress_cells, cover
from opmatrix.schema import DType, Layout, Mode

from .test_matrix_records import result

F32, BF16, F64 = DType.float32, DType.bfloat16, DType.float64
C, NC, T, CL = Layout.contiguous, Layout.noncontiguous, Layout.transposed, Layout.channels_last


def test_a_full_block_is_one_box():
    cells = [(d, r, lay) for d in (F32, BF16) for r in range(2, 6) for lay in (NC, T)]
    assert cover(cells) == [Box((BF16, F32), 2, 5, (NC, T))]


def test_a_rank_hole_splits_the_range():
    cells = [(F32, r, C) for r in (0, 1, 2, 4, 5)]
    assert cover(cells) == [Box((F32,), 0, 2, (C,)), Box((F32,), 4, 5, (C,))]


def test_channels_last_only_at_rank_four_costs_one_extra_box():
    cells = [(d, r, C) for d in (F32, BF16) for r in range(1, 6)] + [(d, 4, CL) for d in (F32, BF16)]
    assert cover(cells) == [Box((BF16, F32), 1, 5, (C,)), Box((BF16, F32), 4, 4, (CL,))]


def test_layouts_first_wins_when_it_is_smaller():
    # ranks first: f32 {C} 1-3, f32 {NC} 1-2, f64 {C,NC} 1-2 = 3 boxes; layouts first finds 2
    cells = [(F32, r, C) for r in (1, 2, 3)] + [(F32, r, NC) for r in (1, 2)] + [(F64, r, x) for r in (1, 2) for x in (C, NC)]
    assert cover(cells) == [Box((F32, F64), 1, 2, (C, NC)),
                            Box((F32,), 3, 3, (C,))]


# -- property: expansion gives back exactly the probed cells -----------------------------------

_OPS = ("aten.add.Tensor", "aten.softmax.int")
_CONDS = ((), (("dim", "last"),), (("dim", "first"),))
_KEY = st.tuples(
    st.sampled_from(_OPS),
    st.sampled_from(list(Mode)),
    st.tuples(st.sampled_from([F32, BF16, F64, DType.int64]), st.integers(0, 6), st.sampled_from([C, NC, T, CL])),
    st.sampled_from(_CONDS),
)
_RESULT = st.tuples(
    st.sampled_from(["native", "composite", "fallback", "rejected"]),
    st.sampled_from(["ok", "ok", "wrong", "crashed"]),
    st.integers(1, 9),
    st.sampled_from([None, 1e-7, 3e-6]),
)


def _results(draw_map: dict) -> dict:  # type: ignore[type-arg]
    return {
        key: result(path, outcome, probed=probed, err=err, conditions=dict(key[3]))
        for key, (path, outcome, probed, err) in draw_map.items()
    }


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_KEY, _RESULT, max_size=120))
def test_expanding_entries_gives_back_exactly_the_probed_cells(drawn):
    cells = _results(drawn)
    ops = compress_cells(cells)
    expanded = Counter()
    for op, entries in ops.items():
        for e in (box for entry in entries for box in entry.boxes()):
            for dtype, rank, layout, mode in e.cells():
                key = (op, mode, (dtype, rank, layout), tuple(sorted(e.conditions.items())))
                expanded[key] += 1
                want = cells[key]  # KeyError: an entry claims a cell that was not probed
                assert (e.path, e.outcome, e.conditions) == (want.path, want.outcome, want.conditions)
    assert set(expanded) == set(cells)
    assert set(expanded.values()) <= {1}  # entries of one group never overlap
    # samples are conserved, and the result is independent of insertion order
    assert sum(e.samples.probed for es in ops.values() for e in es) == sum(r.samples.probed for r in cells.values())
    assert compress_cells(dict(reversed(list(cells.items())))) == ops


def test_identical_results_over_a_dense_block_make_one_entry_per_group():
    cells = _results({
        ("aten.add.Tensor", Mode.eager, (d, r, lay), ()): ("native", "ok", 2, None)
        for d in (F32, BF16, F64) for r in range(0, 5) for lay in (C, NC, T)
    })
    (entry,) = compress_cells(cells)["aten.add.Tensor"]
    assert (entry.ranks.min, entry.ranks.max, len(entry.dtypes), len(entry.layouts)) == (0, 4, 3, 3)
    assert entry.samples.probed == 2 * 45

"""diff_matrices: better / worse / new / removed / numerics, the table and the JSON."""

from __future__ import annotations

import json

from opmatrix.matrix import build_matrix, diff_matrices
from opmatrix.matrix.diff import DIFFERING_CONDITIONS
from opmatrix.schema import BackendId, DType, ExecPath, Layout, Matrix

from .test_matrix_records import BACKEND, EVIDENCE, cells, task


def _matrix(generation: str, records: list) -> Matrix:  # type: ignore[type-arg]
    backend = BackendId(**{**BACKEND.model_dump(), "generation": generation})
    return build_matrix(records, backend=backend, evidence=EVIDENCE)


def _g1() -> Matrix:
    return _matrix("g1", [
        task("mm", "float32", cells("aten.mm.default", "float32", [2], ("contiguous", "transposed"), err=1e-6)),
        task("mm", "bfloat16", cells("aten.mm.default", "bfloat16", [2], path="rejected")),
        task("sum", "float32", cells("aten.sum.default", "float32", [1, 2], err=1e-6)),
        task("sort", "float32", cells("aten.sort.default", "float32", [1])),
    ])


def _g2() -> Matrix:
    return _matrix("g2", [
        task("mm", "float32", [
            *cells("aten.mm.default", "float32", [2], err=1e-6),
            *cells("aten.mm.default", "float32", [2], ("transposed",), outcome="wrong", passed=0, err=0.5),
        ]),
        task("mm", "bfloat16", cells("aten.mm.default", "bfloat16", [2])),
        task("sum", "float32", cells("aten.sum.default", "float32", [1, 2], err=9e-6)),
        task("cumsum", "float32", cells("aten.cumsum.default", "float32", [1, 2, 3])),
    ])


def test_changes_are_sorted_into_kinds():
    d = diff_matrices(_g1(), _g2())
    assert d.counts() == {"worse": 1, "better": 1, "new": 3, "removed": 0, "not_probed": 1, "numerics": 2}
    (worse,) = d.worse
    assert (worse.op, worse.dtype, worse.layout) == ("aten.mm.default", DType.float32, Layout.transposed)
    assert worse.before is not None and worse.after is not None
    assert (worse.before.label(), worse.after.label()) == ("native", "native/wrong")
    (better,) = d.better
    assert (better.dtype, better.before and better.before.path, better.after and better.after.path) == (
        DType.bfloat16, ExecPath.rejected, ExecPath.native)
    # g2 holds nothing of sort: its run did not look, which is not the same as sort's cells going away
    assert {c.op for c in d.new} == {"aten.cumsum.default"} and {c.op for c in d.not_probed} == {"aten.sort.default"}
    assert {(c.op, c.rank) for c in d.numerics} == {("aten.sum.default", 1), ("aten.sum.default", 2)}


def test_same_matrix_has_no_changes_and_small_error_growth_is_not_numerics():
    assert diff_matrices(_g1(), _g1()).empty
    assert diff_matrices(_g1(), _g2(), error_growth=1.0).counts()["numerics"] == 0  # 8e-6 < 1.0 x atol 1e-5


def test_table_groups_cells_into_rows():
    table = diff_matrices(_g1(), _g2()).render_table()
    lines = table.splitlines()
    assert lines[:3] == [
        "A: refaccel g1 (torch 2.13.0)",
        "B: refaccel g2 (torch 2.13.0)",
        "cells: 1 worse, 1 better, 3 new, 0 removed, 1 not probed in B, 2 numerics",
    ]
    assert lines[4].split() == ["change", "op", "dtypes", "ranks", "layouts", "mode", "conditions", "A", "B"]
    rows = [line.split() for line in lines[6:]]
    assert ["worse", "aten.mm.default", "float32", "2", "transposed", "eager", "any", "native", "native/wrong"] in rows
    assert ["new", "aten.cumsum.default", "float32", "1-3", "contiguous", "eager", "any", "-", "native"] in rows
    numerics = [r for r in rows if r[0] == "numerics"]
    assert numerics == [["numerics", "aten.sum.default", "float32", "1-2", "contiguous", "eager", "any",
                         "native", "err", "1e-06", "native", "err", "9e-06"]]


def test_json_has_counts_and_rows():
    data = json.loads(diff_matrices(_g1(), _g2()).to_json())
    assert data["counts"]["worse"] == 1
    assert {"kind": "better", "op": "aten.mm.default", "mode": "eager", "conditions": {}, "dtypes": ["bfloat16"],
            "ranks": {"min": 2, "max": 2}, "layouts": ["contiguous"], "before": "rejected",
            "after": "native"} in data["rows"]


def test_condition_groups_compare_group_by_group_or_worst_against_worst():
    plain = _matrix("g1", [task("softmax", "float32", cells("aten.softmax.int", "float32", [2], path="composite"))])
    split = _matrix("g2", [task("softmax", "float32", [
        *cells("aten.softmax.int", "float32", [2], conditions={"dim": "last"}),
        *cells("aten.softmax.int", "float32", [2], path="fallback", conditions={"dim": "first"}),
    ])])
    (change,) = diff_matrices(plain, split).changes()
    assert (change.kind, change.conditions) == ("worse", DIFFERING_CONDITIONS)  # composite -> worst group fallback
    better = _matrix("g3", [task("softmax", "float32", [
        *cells("aten.softmax.int", "float32", [2], conditions={"dim": "last"}),
        *cells("aten.softmax.int", "float32", [2], path="composite", conditions={"dim": "first"}),
    ])])
    (change,) = diff_matrices(split, better).changes()
    assert (change.kind, change.conditions) == ("better", (("dim", "first"),))


def test_a_fixed_cell_that_lost_its_kernel_is_worse_as_the_gate_sees_it():
    from opmatrix.matrix.diff import CellState, _classify
    from opmatrix.schema import ExecPath, Outcome

    before = CellState(ExecPath.native, Outcome.wrong)
    after = CellState(ExecPath.fallback, Outcome.ok)
    assert _classify(before, after, 0.25) == "worse"
    assert _classify(after, CellState(ExecPath.native, Outcome.ok), 0.25) == "better"


def test_a_backward_only_change_says_so_in_the_table():
    """A cell whose forward stayed native but whose backward improved never reads "native -> native"."""
    from opmatrix.schema import Autograd, Outcome

    rejected = Autograd(path=ExecPath.rejected, outcome=Outcome.ok)
    native = Autograd(path=ExecPath.native, outcome=Outcome.ok)
    a = _matrix("g1", [task("mm", "float32", cells("aten.mm.default", "float32", [2], autograd=rejected))])
    b = _matrix("g2", [task("mm", "float32", cells("aten.mm.default", "float32", [2], autograd=native))])
    table = diff_matrices(a, b).render_table()
    assert "native, backward rejected" in table and "native, backward native" in table
    assert "better" in table


def test_a_cell_gone_from_an_operator_b_probed_is_removed_not_unprobed():
    """B probed sum at float32 but no longer at rank 2: that cell is removed; a dtype B never probed is not."""
    a = build_matrix([task("sum", "float32", cells("aten.sum.default", "float32", range(1, 3))),
                      task("sum", "int32", cells("aten.sum.default", "int32", range(1, 2)))], backend=BACKEND, evidence=EVIDENCE)
    b = build_matrix([task("sum", "float32", cells("aten.sum.default", "float32", range(1, 2)))],
                     backend=BACKEND, evidence=EVIDENCE)
    d = diff_matrices(a, b)
    assert [(c.dtype.value, c.rank) for c in d.removed] == [("float32", 2)]
    assert [(c.dtype.value, c.rank) for c in d.not_probed] == [("int32", 1)]
    assert "1 removed, 1 not probed in B" in d.render_table()

"""pandas views: one row per cell, path counts per dtype, the op x dtype pivot."""

from __future__ import annotations

from opmatrix.matrix import MatrixIndex, build_matrix
from opmatrix.matrix.frame import COLUMNS, coverage_text

from .test_matrix_records import BACKEND, EVIDENCE, cells, softmax_records, task


def _matrix() -> MatrixIndex:
    records = softmax_records() + [
        task("add", "float32", cells("aten.add.Tensor", "float32", [1, 2], path="fallback", err=2e-6)),
        task("add", "bfloat16", cells("aten.add.Tensor", "bfloat16", [1])),
    ]
    return MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))


def test_one_row_per_cell_and_condition_group():
    m = _matrix()
    df = m.to_frame()
    assert tuple(df.columns) == COLUMNS
    assert len(df) == m.model.cell_count() == 2 * (4 + 4 + 8) + 5 + 3
    row = df[(df.op == "aten.softmax.int") & (df.dtype == "float32") & (df["rank"] == 3)
             & (df.layout == "contiguous") & (df.conditions == "dim=last")].iloc[0]
    assert (row.path, row.outcome, row.samples_probed) == ("native", "ok", 32)
    assert df.path.cat.ordered and df.path.max() == "rejected"


def test_coverage_counts_paths_per_dtype_and_pivots_the_worst_path():
    cov = _matrix().coverage()
    assert cov.by_dtype.loc["float32"].to_dict() == {
        "native": 4, "composite": 12, "decomposed": 0, "fallback": 2, "rejected": 0, "unknown": 0}
    assert list(cov.by_dtype.index) == ["float64", "float32", "bfloat16"]
    assert cov.pivot.loc["aten.add.Tensor"].dropna().to_dict() == {"float32": "fallback", "bfloat16": "native"}
    assert cov.pivot.isna().loc["aten.add.Tensor", "float64"]  # not probed: empty, never a path
    assert cov.pivot.loc["aten.softmax.int", "float64"] == "rejected"


def test_coverage_text_names_the_backend_and_counts():
    text = coverage_text(_matrix().model)
    assert text.startswith("refaccel g2: 2 operators, 40 cells (eager only), 0 skipped tasks\n")
    assert "cells per dtype and path, eager (40 cells):" in text
    assert "float64" in text and "rejected" in text

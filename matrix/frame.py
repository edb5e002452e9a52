"""pandas views of a matrix: one row per probed cell, and coverage summaries.

::

    df = MatrixIndex.load("out/cpu/matrix.yaml").to_frame()
    df[(df.path == "fallback") & (df.dtype == "bfloat16")].op.unique()
    cov = coverage(model)
    cov.by_dtype          # dtype x path: cell counts
    cov.pivot             # op x dtype: worst path over the op's cells of that dtype
    print(coverage_text(model))

pandas is imported only when these are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from opmatrix.schema import DType, ExecPath, Matrix, describe

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "Coverage", "coverage", "coverage_text", "to_frame"]

#: columns of :func:`to_frame`, in order
COLUMNS = (
    "op", "dtype", "rank", "layout", "mode", "conditions", "path", "outcome", "mixed", "flaky",
    "samples_probed", "samples_passed", "max_abs_err", "max_rel_err", "atol", "fallback", "fallback_ops",
    "components", "backward_path", "backward_outcome",
)
_PATHS = [p.value for p in ExecPath]


def _rows(model: Matrix) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for op, entries in model.boxes().items():
        for e in entries:
            num, ag = e.numerics, e.autograd
            common = (
                describe(e.conditions) if e.conditions else "", e.path.value, e.outcome.value, e.mixed, e.flaky,
                e.samples.probed, e.samples.passed,
                num.max_abs_err if num else None, num.max_rel_err if num else None, num.atol if num else None,
                e.fallback.state.value, ",".join(e.fallback.ops), ",".join(e.components),
                ag.path.value if ag else None, ag.outcome.value if ag else None,
            )
            for dtype, rank, layout, mode in e.cells():
                rows.append((op, dtype.value, rank, layout.value, mode.value, *common))
    rows.sort(key=lambda r: r[:6])  # type: ignore[arg-type]
    return rows


def to_frame(model: Matrix) -> pd.DataFrame:
    """One row per probed cell and condition group; ``path`` is an ordered categorical.

    Samples and errors are those of the entry the cell belongs to (entries aggregate them).
    """
    import pandas as pd

    df = pd.DataFrame(_rows(model), columns=list(COLUMNS))
    df["path"] = pd.Categorical(df["path"], categories=_PATHS, ordered=True)
    return df


@dataclass(frozen=True)
class Coverage:
    """Path counts per dtype, and the op x dtype pivot of worst paths."""

    by_dtype: pd.DataFrame
    pivot: pd.DataFrame


def coverage(model: Matrix, mode: str = "eager") -> Coverage:
    """Coverage of ``mode`` cells: counts per (dtype, path); worst path per (op, dtype), NaN if not probed."""
    import pandas as pd

    df = to_frame(model)
    df = df[df["mode"] == mode]
    dtype_order = [d.value for d in DType if d.value in set(df["dtype"])]
    by_dtype = (
        pd.crosstab(df["dtype"], df["path"]).reindex(index=dtype_order, columns=_PATHS, fill_value=0)
        if len(df) else pd.DataFrame(0, index=pd.Index([], name="dtype"), columns=_PATHS)
    )
    by_dtype.columns.name = "path"
    pivot = df.groupby(["op", "dtype"], observed=True)["path"].max().unstack("dtype")
    pivot = pivot.reindex(columns=[d for d in dtype_order if d in pivot.columns])
    return Coverage(by_dtype=by_dtype, pivot=pivot)


def coverage_text(model: Matrix, mode: str | None = None) -> str:
    """A short plain-text coverage summary (what ``make demo`` prints): one table per mode (or only
    ``mode``), each labelled, with the totals of :func:`opmatrix.schema.count_matrix`."""
    from opmatrix.schema import count_matrix

    counted = count_matrix(model)
    b = model.backend
    head = (f"{b.name}{' ' + b.generation if b.generation else ''}: {len(model.operators)} operators, "
            f"{counted.cells} cells ({counted.modes_text()}), {len(model.skipped)} skipped tasks")
    parts = [head]
    import pandas as pd

    for m in counted.cells_by_mode:
        if mode is not None and m.value != mode:
            continue
        dtypes = [d for d in DType if counted.count(mode=m, dtype=d)]
        table = pd.DataFrame([[counted.count(ExecPath(p), mode=m, dtype=d) for p in _PATHS] for d in dtypes],
                             index=pd.Index([d.value for d in dtypes], name="dtype"),
                             columns=pd.Index(list(_PATHS), name="path"))
        parts.append(f"cells per dtype and path, {m.value} ({counted.cells_by_mode[m]} cells):\n{table.to_string()}")
    return "\n".join(parts) + "\n"

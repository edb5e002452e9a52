"""opmatrix.matrix: journal records -> the support matrix, and everything that reads it.

Journal records roll up per cell (:mod:`.rollup`), compress into entries (:mod:`.compress`) and
become a schema :class:`~opmatrix.schema.Matrix` (:func:`build_matrix`). :class:`MatrixIndex` wraps one
with a precompiled index for capability queries::

    >>> from opmatrix.matrix import MatrixIndex
    >>> m = MatrixIndex.load("schema/examples/softmax-matrix.yaml")
    >>> m.query("aten::softmax.int", dtype="float32", rank=3, layout="contiguous", args={"dim": -1}).path
    <ExecPath.native: 'native'>

Also: ``m.operator_support()`` for ``torch.fx`` partitioners (:mod:`.fx`), ``m.to_frame()`` and
``m.coverage()`` (:mod:`.frame`), and :func:`diff_matrices` between releases (:mod:`.diff`).
"""

from .answer import UNKNOWN, Answer
from .build import build_matrix, read_journal
from .compress import compress_cells
from .diff import CellChange, MatrixDiff, diff_matrices
from .journal import merge_records
from .query import MatrixIndex, UnknownOperatorError
from .rollup import rollup

__all__ = [
    "UNKNOWN",
    "Answer",
    "CellChange",
    "MatrixDiff",
    "MatrixIndex",
    "UnknownOperatorError",
    "build_matrix",
    "compress_cells",
    "diff_matrices",
    "merge_records",
    "read_journal",
    "rollup",
]


def __getattr__(name: str) -> object:
    """``opmatrix.matrix.Matrix``, the query facade's old name, still imports (with a warning):
    callers written before it became :class:`MatrixIndex` keep working for one release."""
    if name == "Matrix":
        import warnings

        warnings.warn("opmatrix.matrix.Matrix is now opmatrix.matrix.MatrixIndex (the artifact is "
                      "opmatrix.schema.Matrix); the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return MatrixIndex
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

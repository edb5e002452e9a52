"""opmatrix: evidence for "this accelerator supports PyTorch".

The public API re-exports the pieces users touch; heavy parts (torch) load only when used.
Every command is a function of its typed options (:mod:`opmatrix.api`)::

    >>> import opmatrix
    >>> opmatrix.probe(opmatrix.ProbeOptions(backend="refaccel", generation="g2", ops=("softmax",),
    ...                                      out="out/refaccel-g2"))  # needs a probe of refaccel: not run  # doctest: +SKIP
    >>> m = opmatrix.load_matrix("out/refaccel-g2/matrix.yaml")  # needs a probe of refaccel: not run  # doctest: +SKIP
    >>> opmatrix.MatrixIndex.load("out/refaccel-g2/matrix.yaml").query(  # needs a probe of refaccel: not run  # doctest: +SKIP
    ...     "aten.softmax.int", dtype="bfloat16", rank=3, layout="contiguous").path
"""

from __future__ import annotations

import importlib
from typing import Any

from opmatrix.schema import (
    ArtifactError,
    Contract,
    Entry,
    ExecPath,
    ExitCode,
    Layout,
    Mode,
    Outcome,
    load_contract,
    load_matrix,
)
from opmatrix.schema.version import __version__

_LAZY = {
    "MatrixIndex": "opmatrix.matrix",
    "Answer": "opmatrix.matrix",
    "evaluate_contract": "opmatrix.ci",
    **{verb: "opmatrix.api" for verb in ("probe", "merge", "gate", "report", "explain", "bench", "compat", "doctor",
                                                 "query", "diff")},
    **{name: "opmatrix.options" for name in (
        "ProbeOptions", "MergeOptions", "GateOptions", "ReportOptions", "ExplainOptions", "BenchOptions",
        "CompatOptions", "DoctorOptions", "QueryOptions", "DiffOptions")},
}

__all__ = [
    "__version__", "ArtifactError", "Contract", "Entry", "ExecPath", "ExitCode", "Layout", "Mode", "Outcome",
    "load_contract", "load_matrix", *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'opmatrix' has no attribute {name!r}")

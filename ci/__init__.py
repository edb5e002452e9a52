"""opmatrix.ci: the release gate.

A vendor's contract promises a support level; the gate judges a probed matrix (and the previous
release's matrix) against it and says whether the release may ship, with every reason::

    from opmatrix.ci import evaluate_contract
    result = evaluate_contract(matrix, contract, baseline=previous)
    print(render_verdict(result))        # what `opmatrix gate` prints

Modules: ``evaluate`` (the verdict), ``requirements`` (one requirement), ``cells`` (matrix ->
cells), ``opsets`` (op patterns, ``tag:core``), ``waivers``, ``baseline``, ``improvements``,
``result`` (the models), ``junit`` / ``summary`` (renderings), ``gate`` (the gate verb), ``options`` (its options).
Contracts for the reference accelerator live in ``ci/contracts/``, an example CI workflow in
``ci/workflows/``.
"""

from opmatrix.schema.gate import (
    BaselineChange,
    CellRef,
    CellStatus,
    GateCheck,
    GateResult,
    Improvement,
    RequirementResult,
    Status,
    Verdict,
    WaiverReport,
    WaiverState,
)

from .evaluate import LEVEL_NAMES, evaluate_contract

__all__ = [
    "LEVEL_NAMES",
    "BaselineChange",
    "CellRef",
    "CellStatus",
    "GateCheck",
    "GateResult",
    "Improvement",
    "RequirementResult",
    "Status",
    "Verdict",
    "WaiverReport",
    "WaiverState",
    "evaluate_contract",
]

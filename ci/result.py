"""The gate's result models; they live in :mod:`opmatrix.schema.gate` (every reader shares them).

Re-exported here for the gate's own modules and for code that imported them from ``opmatrix.ci``.
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

__all__ = [
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
]

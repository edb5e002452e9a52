"""opmatrix.schema: the data model of every artifact and its safe YAML IO.

This package is the shared language of opmatrix and imports nothing else of it. A matrix maps
ATen overloads to entries of cells with identical results::

    >>> from opmatrix.schema import ExecPath
    >>> ExecPath.native < ExecPath.fallback
    True
"""

from .base import Model, RankRange
from .conditions import TENSOR, describe, features_of, matches
from .contract import Contract, LevelRequirement, OperatorRequirement, ToleranceOverride, Waiver, WaiverMatch
from .counts import BACKWARD_FAULTS, MatrixCounts, cell_fault, count_matrix
from .devices import DeviceCheck, DeviceOutcome
from .enums import (
    DEFAULT_DTYPES,
    PROCESS_FAULTS,
    Accumulation,
    ApiService,
    CellSource,
    CheckResult,
    DType,
    ExecPath,
    FallbackPolicy,
    FallbackState,
    FaultOutcome,
    FaultScope,
    FlakyPolicy,
    Layout,
    Mode,
    Outcome,
    ReferenceKind,
    Shapes,
)
from .exitcode import ExitCode
from .gate import GateResult
from .gcpause import gc_paused
from .io import (
    ArtifactError,
    UsageError,
    dump_model,
    dump_yaml,
    dumps_model,
    load_contract,
    load_document,
    load_matrix,
    load_model,
    loads_yaml,
    model_to_data,
    validate_data,
    validate_file,
    write_text_atomic,
)
from .journal import CellRecord, DeviceCells, JournalHeader, RuntimeRecord, TaskRecord
from .jsonschema import json_schema
from .matrix import (
    SCHEMA_VERSION,
    ApiCoverage,
    Autograd,
    BackendId,
    CellResult,
    DeviceInfo,
    Entry,
    EntryPart,
    ErrorInfo,
    Evidence,
    FallbackEvidence,
    Matrix,
    Numerics,
    OpSource,
    Runtime,
    RuntimeCheck,
    Samples,
)
from .names import CellKey, OpName, TaskId, UnitId
from .workloads import WorkloadRecord, WorkloadRequirement, WorkloadResult, WorkloadStep

__all__ = [
    "SCHEMA_VERSION", "DEFAULT_DTYPES", "PROCESS_FAULTS", "TENSOR", "CellKey", "ExitCode", "FaultOutcome", "FaultScope", "GateResult", "OpName",
    "ApiCoverage", "ApiService", "ArtifactError", "Autograd", "BackendId", "CellRecord", "CellResult",
    "CheckResult", "Contract", "DType", "DeviceInfo", "Entry", "EntryPart", "ErrorInfo", "Evidence", "ExecPath",
    "FallbackEvidence", "FallbackPolicy", "FallbackState", "FlakyPolicy", "JournalHeader", "Layout",
    "LevelRequirement", "Matrix", "Mode", "Model", "Numerics", "OpSource", "OperatorRequirement",
    "Outcome", "RankRange", "ReferenceKind", "Runtime", "RuntimeCheck", "RuntimeRecord", "Samples",
    "TaskRecord", "ToleranceOverride", "UsageError", "Waiver", "WaiverMatch",
    "BACKWARD_FAULTS", "MatrixCounts", "cell_fault", "count_matrix", "describe", "dump_model", "dump_yaml",
    "dumps_model", "features_of", "json_schema", "load_contract",
    "WorkloadRecord", "WorkloadRequirement", "WorkloadResult", "WorkloadStep",
    "load_document", "load_matrix", "load_model", "loads_yaml", "matches", "model_to_data",
    "validate_data", "validate_file", "write_text_atomic", "gc_paused",
    "TaskId",
    "UnitId",
    "DeviceCells",
    "DeviceCheck",
    "DeviceOutcome",
    "Accumulation",
    "CellSource",
    "Shapes",
]

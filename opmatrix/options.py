"""Every command's options, in one registry the CLI builds its parser from.

Each class declares its command's options once (:mod:`opmatrix.schema.options`); the classes of
the verbs whose work lives in a subpackage are declared there and gathered here::

    >>> from opmatrix.options import COMMANDS
    >>> [cls.verb for cls in COMMANDS][:3]
    ['probe', 'merge', 'validate']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from opmatrix.ci.options import CompatOptions, GateOptions
from opmatrix.matrix.options import DiffOptions, QueryOptions
from opmatrix.probes.options import BenchOptions, DoctorOptions, ProbeOptions
from opmatrix.reports.options import ReportOptions
from opmatrix.schema.options import Options, option

__all__ = [
    "COMMANDS", "BenchOptions", "CompatOptions", "DiffOptions", "DoctorOptions", "ExplainOptions", "GateOptions",
    "MergeOptions", "Options", "ProbeOptions", "QueryOptions", "ReportOptions", "SchemaOptions", "ValidateOptions",
]


@dataclass(frozen=True, kw_only=True)
class MergeOptions(Options):
    """``opmatrix merge``: merge shard journals -> one matrix."""

    verb: ClassVar[str] = "merge"
    summary: ClassVar[str] = "merge shard journals -> one matrix"

    journals: tuple[str, ...] = option(positional=True, metavar="JOURNAL", help="the shards' journal.jsonl files")
    out: str = option(help="output directory")
    force: bool = option(False, recorded=False, help="write into a non-empty --out that opmatrix did not make")


@dataclass(frozen=True, kw_only=True)
class ValidateOptions(Options):
    """``opmatrix validate``: validate matrix or contract files; exit 2 if invalid."""

    verb: ClassVar[str] = "validate"
    summary: ClassVar[str] = "validate matrix or contract files; exit 2 if invalid"

    files: tuple[str, ...] = option(positional=True, metavar="FILE", help="matrix or contract YAML files")
    strict: bool = option(False, help="also refuse a matrix without an integrity block (unless --allow-unsealed)")
    allow_unsealed: bool = option(False, help="with --strict: accept unsealed matrices, saying so")


@dataclass(frozen=True, kw_only=True)
class ExplainOptions(Options):
    """``opmatrix explain``: predict where a model runs (host fallback, transfers) from a matrix."""

    verb: ClassVar[str] = "explain"
    summary: ClassVar[str] = "predict where a model runs (host fallback, transfers) from a matrix"

    matrix: str = option(positional=True, metavar="MATRIX", help="the backend's matrix")
    model: str = option(positional=True, metavar="WORKLOAD",
                        help="a catalog workload (mlp, tinygpt, ...) or pkg.mod:factory returning (model, inputs)")
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"),
                        help="float32, bfloat16 or float16 (fp32/bf16/fp16)")
    mode: str = option("eager", choices=("eager", "compile"), help="eager or compile")
    json: bool = option(False, help="print one JSON object")


@dataclass(frozen=True, kw_only=True)
class SchemaOptions(Options):
    """``opmatrix schema``: print the JSON Schema of an artifact."""

    verb: ClassVar[str] = "schema"
    summary: ClassVar[str] = "print the JSON Schema of an artifact"

    kind: str = option(positional=True, metavar="KIND", choices=("matrix", "contract", "perfrecord", "compatreport"),
                       help="matrix, contract, perfrecord or compatreport")


#: every verb, in the order ``opmatrix --help`` lists them
COMMANDS: tuple[type[Options], ...] = (
    ProbeOptions, MergeOptions, ValidateOptions, QueryOptions, ReportOptions, GateOptions, DiffOptions,
    DoctorOptions, ExplainOptions, BenchOptions, CompatOptions, SchemaOptions,
)

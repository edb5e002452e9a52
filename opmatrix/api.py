"""The library API: every command as a function of its typed options, no argparse needed.

    >>> import opmatrix
    >>> opts = opmatrix.ProbeOptions(backend="cpu", ops=("add",), dtypes=("float32",), no_runtime=True,
    ...                              out="out/cpu-add")
    >>> opmatrix.probe(opts).exit_code  # runs a probe / needs a contract: not run  # doctest: +SKIP
    <ExitCode.OK: 0>
    >>> opmatrix.gate(opmatrix.GateOptions(matrix="out/cpu-add/matrix.yaml",
    ...                                    contract="my-contract.yaml")).verdict  # runs a probe / needs a contract: not run  # doctest: +SKIP

Each function checks every option before it does any work and raises
:class:`~opmatrix.schema.UsageError` or :class:`~opmatrix.schema.ArtifactError` naming the
option or file and the fix (the CLI prints that one line and exits 2). Each returns what the
command found (``probe`` a ``ProbeResult``, ``gate`` a ``GateResult``, ``doctor`` the runtime
report, ``query`` the ``Answer``, ``diff`` the ``MatrixDiff``, ``report`` the written site) with
its ``exit_code`` where it has one, and prints nothing: the CLI (:mod:`opmatrix.commands`)
renders the result. ``merge``, ``bench`` and ``compat`` print their lines and return the
:class:`~opmatrix.schema.ExitCode`. The options make the command line recorded in the artifacts
(``options.command_line()``), whether the call came from the CLI or from Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opmatrix.ci.options import CompatOptions, GateOptions
    from opmatrix.matrix.answer import Answer
    from opmatrix.matrix.diff import MatrixDiff
    from opmatrix.matrix.options import DiffOptions, QueryOptions
    from opmatrix.matrix.placement import Placement
    from opmatrix.matrix.verbs import OpEntries
    from opmatrix.options import ExplainOptions, MergeOptions
    from opmatrix.pipeline import ProbeResult
    from opmatrix.probes import BenchOptions, DoctorOptions, DoctorReport, ProbeOptions
    from opmatrix.reports.options import ReportOptions
    from opmatrix.reports.site import SiteResult
    from opmatrix.schema import ExitCode, GateResult

__all__ = ["bench", "compat", "diff", "doctor", "explain", "gate", "merge", "probe", "query", "report"]


def probe(options: ProbeOptions) -> ProbeResult:
    """Probe a backend into ``options.out`` (journal.jsonl, matrix.yaml): the paths, the runner's summary,
    the matrix and the exit code (OK when every task was recorded; FAILED when the run aborted or a cell
    crashed, hung or poisoned its worker; INTERRUPTED: ``resume=True`` continues)."""
    from opmatrix.pipeline import probe as run_probe

    return run_probe(options)


def merge(options: MergeOptions) -> ExitCode:
    """Merge the shard journals of one run into ``options.out`` (journal.jsonl, matrix.yaml)."""
    from opmatrix.pipeline import merge as run_merge

    return run_merge(options)


def gate(options: GateOptions) -> GateResult:
    """Judge the evidence against the contract: ``.verdict``, every reason, ``.exit_code`` (OK: the
    release may ship; BLOCKED). Writes the ``junit``/``summary_file``/``json`` files it is given."""
    from opmatrix.ci.gate import gate as run_gate

    return run_gate(options)


def report(options: ReportOptions) -> SiteResult:
    """Render the HTML support site into ``options.out``; ``.index`` is its index page."""
    from opmatrix.reports.publish import report as run_report

    return run_report(options)


def explain(options: ExplainOptions) -> Placement:
    """Where the model would run on the matrix's backend: each node's path, host fallback, transfers.

    The model is a catalog workload or ``pkg.mod:factory`` (returning ``(model, inputs)``); it is
    traced on fake tensors, so no device is needed."""
    from opmatrix.explanation import placement

    return placement(options)


def bench(options: BenchOptions) -> ExitCode:
    """Measure workloads and hot ops into ``options.out`` (one performance record per subject)."""
    from opmatrix.probes import bench as run_bench

    return run_bench(options)


def compat(options: CompatOptions) -> ExitCode:
    """Probe the op set under each torch version of ``options.torch`` into ``options.out``/compat.yaml."""
    from opmatrix.ci.compatrun import compat as run_compat
    from opmatrix.probes import UnknownOp, checked_adapter, select_ops
    from opmatrix.schema import UsageError

    checked_adapter(options.backend, options.generation)  # what the per-version probes would refuse, refused first
    try:
        select_ops(list(options.ops))
    except UnknownOp as exc:
        raise UsageError(str(exc)) from None
    return run_compat(options)


def doctor(options: DoctorOptions) -> DoctorReport:
    """The level 0/1 checks (level 5: and the distributed suite): the runtime report, ``.exit_code``
    OK when none fails."""
    from opmatrix.probes import doctor as run_doctor

    return run_doctor(options)


def query(options: QueryOptions) -> Answer | OpEntries:
    """How an op runs for one cell of a matrix (an ``Answer``: ``.path``, ``.outcome``, the deciding
    entry), or the op's entries (:class:`~opmatrix.matrix.verbs.OpEntries`) when dtype or rank is not given."""
    from opmatrix.matrix.verbs import query as run_query

    return run_query(options)


def diff(options: DiffOptions) -> MatrixDiff:
    """The cells better / worse / new / removed from matrix A to matrix B (and workload, distributed changes)."""
    from opmatrix.matrix.verbs import diff as run_diff

    return run_diff(options)

"""What each verb prints: the CLI calls the library (:mod:`opmatrix.api`) and renders its result.

The library returns what a command found (a :class:`~opmatrix.pipeline.ProbeResult`, a
``GateResult``, an ``Answer`` ...) and prints nothing; each function here is one verb of the
command line: it calls the library, prints the result as ``opmatrix VERB`` always has, and
returns the :class:`~opmatrix.schema.ExitCode`::

    opmatrix gate --matrix out/refaccel-g2/matrix.yaml --contract ci/contracts/refaccel-g2.yaml
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from opmatrix import api
from opmatrix.schema import ExitCode, count_matrix

if TYPE_CHECKING:
    from opmatrix.ci.options import GateOptions
    from opmatrix.matrix.options import DiffOptions, QueryOptions
    from opmatrix.pipeline import ProbeResult
    from opmatrix.probes import DoctorOptions, ProbeOptions
    from opmatrix.reports.options import ReportOptions

__all__ = ["diff", "doctor", "gate", "probe", "query", "render_probe", "report"]


#: how many reproduction commands the summary prints (the op pages hold every one)
_REPRODUCE_SHOWN = 8


def probe(options: ProbeOptions) -> ExitCode:
    """``opmatrix probe``: the run's tasks, cells and faults, where the journal and matrix are."""
    result = api.probe(options)
    render_probe(result)
    return result.exit_code


def render_probe(result: ProbeResult) -> None:
    """The lines ``opmatrix probe`` prints after a run (nothing after an interrupt: the runner said it)."""
    summary, matrix = result.summary, result.matrix
    if matrix is None:
        return
    if matrix.distributed is not None:
        from opmatrix.probes import distributed_line

        print(distributed_line(matrix.distributed))
    identity = result.backend
    faults = {k: v for k, v in sorted(summary.faults.items()) if v}
    who = f"{identity.name}{'/' + identity.generation if identity.generation else ''}"
    if summary.planned or matrix.operators:
        print(f"{who}: {summary.recorded}/{summary.planned} tasks ({summary.reused} reused), {len(matrix.skipped)} "
              f"skipped task(s), {summary.seconds:.1f} s")
        print(f"matrix: {count_matrix(matrix).line()}")
    else:  # a run of suites without runner tasks (distributed only): no empty task or cell line
        print(f"{who}: no operator, runtime or workload task in this run")
    if faults:
        print("faulted cells: " + ", ".join(f"{k} {v}" for k, v in faults.items()))
        shown = summary.reproduce[:_REPRODUCE_SHOWN]
        for line in shown:
            print(f"  reproduce: {line}")
        if len(summary.reproduce) > len(shown):
            print(f"  ... {len(summary.reproduce) - len(shown)} more faulted tasks: see their cells' notes in the matrix")
    from opmatrix.matrix.notrun import not_run_lines
    from opmatrix.probes import summary_lines

    for line in not_run_lines(matrix.not_run):  # the same facts, in the same words, as the site and the gate
        print(line)
    for line in summary_lines(matrix.workloads):
        print(line)
    print(f"journal: {result.journal}")
    print(f"matrix:  {result.matrix_path}")
    if summary.aborted:
        print(f"aborted: {summary.message}", file=sys.stderr)


def gate(options: GateOptions) -> ExitCode:
    """``opmatrix gate``: the verdict (or ``--json -``); BLOCKED when the release may not ship."""
    from opmatrix.ci.gate import show

    result = api.gate(options)
    show(result, options, sys.stdout)
    return result.exit_code


def report(options: ReportOptions) -> ExitCode:
    """``opmatrix report``: the site's index path on stdout, what was written on stderr."""
    from opmatrix.reports.publish import show

    show(api.report(options), options.out, sys.stdout, sys.stderr)
    return ExitCode.OK


def doctor(options: DoctorOptions) -> ExitCode:
    """``opmatrix doctor``: the checks' table in bring-up order (or ``--json``)."""
    from opmatrix.probes import show_doctor

    result = api.doctor(options)
    show_doctor(result, options.json, sys.stdout)
    return result.exit_code


def query(options: QueryOptions) -> ExitCode:
    """``opmatrix query``: one cell's answer, or the op's entries."""
    from opmatrix.matrix.verbs import show_query

    show_query(options, sys.stdout)
    return ExitCode.OK


def diff(options: DiffOptions) -> ExitCode:
    """``opmatrix diff``: the table of changed cells (or ``--json``)."""
    from opmatrix.matrix.verbs import show_diff

    show_diff(api.diff(options), options.json, sys.stdout)
    return ExitCode.OK

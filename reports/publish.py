"""``opmatrix report MATRIX [--baseline MATRIX] [--gate RESULT.json] [--compat FILE] --out DIR``."""

from __future__ import annotations

from typing import TextIO

from opmatrix.schema import ArtifactError, Matrix, count_matrix, load_matrix, load_model
from opmatrix.schema.outdir import claim_dir
from opmatrix.schema.perf import CompatReport

from .compat import CompatView, compat_view
from .gate import load_gate
from .options import ReportOptions
from .perf import load_record_dir, perf_view
from .site import SiteResult, render_site

__all__ = ["report", "show"]


def _compat(path: str, matrix: Matrix) -> CompatView:
    """The compat report's view; one for another backend than the matrix's is refused (exit 2)."""
    report = load_model(path, CompatReport)
    if report.backend != matrix.backend.name:
        raise ArtifactError([f"{path}: a compat report for backend {report.backend!r}; the matrix is "
                             f"{matrix.backend.name!r} (run opmatrix compat --backend {matrix.backend.name})"])
    return compat_view(report)


def report(args: ReportOptions) -> SiteResult:
    """Render the support site; the result names its index page (``.index``). Prints nothing
    (:func:`show` is what the CLI prints); bad input raises ArtifactError."""
    matrix = load_matrix(args.matrix)
    baseline = load_matrix(args.baseline) if args.baseline else None
    gate = load_gate(args.gate, matrix) if args.gate else None
    compat = _compat(args.compat, matrix) if args.compat else None
    if args.baseline_records and not args.records:
        raise ArtifactError(["--baseline-records needs --records (the records to compare with it)"])
    perf = (perf_view(load_record_dir(args.records),
                      load_record_dir(args.baseline_records) if args.baseline_records else None)
            if args.records else None)
    command = args.command_line()  # written into every page: the line that regenerates the site
    with claim_dir(args.out, kind="site", command=command, force=args.force) as claim:
        result = render_site(matrix, args.out, baseline=baseline, gate=gate, compat=compat, perf=perf, command=command,
                             source=args.matrix)
    result.notes[:0] = claim.notes
    result.counts = count_matrix(matrix).line()
    return result


def show(result: SiteResult, out: str, stdout: TextIO, stderr: TextIO) -> None:
    """What ``opmatrix report`` prints: notes and counts on stderr, the index's path on stdout."""
    for note in result.notes:
        print(note, file=stderr)
    print(f"matrix: {result.counts}", file=stderr)
    print(
        f"wrote {len(result.written)} files ({result.unchanged} unchanged"
        f"{f', {len(result.removed)} removed' if result.removed else ''}) to {out}",
        file=stderr,
    )
    print(result.index, file=stdout)

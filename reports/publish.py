"""``opmatrix report MATRIX [--baseline MATRIX] [--gate RESULT.json] [--compat FILE] --out DIR``."""

from __future__ import annotations

import sys

from opmatrix.schema import ArtifactError, ExitCode, Matrix, count_matrix, load_matrix, load_model
from opmatrix.schema.outdir import claim_dir
from opmatrix.schema.perf import CompatReport

from .compat import CompatView, compat_view
from .gate import load_gate
from .options import ReportOptions
from .perf import load_record_dir, perf_view
from .site import render_site

__all__ = ["report"]


def _compat(path: str, matrix: Matrix) -> CompatView:
    """The compat report's view; one for another backend than the matrix's is refused (exit 2)."""
    report = load_model(path, CompatReport)
    if report.backend != matrix.backend.name:
        raise ArtifactError([f"{path}: a compat report for backend {report.backend!r}; the matrix is "
                             f"{matrix.backend.name!r} (run opmatrix compat --backend {matrix.backend.name})"])
    return compat_view(report)


def report(args: ReportOptions) -> int:
    """Render the support site; prints the index path. Exit 2 (via ArtifactError) on bad input."""
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
        for note in claim.notes:
            print(note, file=sys.stderr)
        result = render_site(matrix, args.out, baseline=baseline, gate=gate, compat=compat, perf=perf, command=command,
                             source=args.matrix)
    print(f"matrix: {count_matrix(matrix).line()}", file=sys.stderr)
    print(
        f"wrote {len(result.written)} files ({result.unchanged} unchanged"
        f"{f', {len(result.removed)} removed' if result.removed else ''}) to {args.out}",
        file=sys.stderr,
    )
    print(result.index)
    return ExitCode.OK

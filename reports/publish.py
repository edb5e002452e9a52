"""``opmatrix report MATRIX [--baseline MATRIX] [--gate RESULT.json] --out DIR``."""

from __future__ import annotations

import argparse
import shlex
import sys

from opmatrix.schema import ArtifactError, Matrix, count_matrix, load_matrix, load_model
from opmatrix.schema.outdir import claim_dir
from opmatrix.schema.perf import CompatReport

from .compat import CompatView, compat_view
from .gate import load_gate
from .site import render_site

__all__ = ["report", "report_command"]


def report_command(args: argparse.Namespace) -> str:
    """The command line that regenerates this site, written into every page."""
    parts = ["opmatrix", "report", args.matrix]
    if getattr(args, "baseline", None):
        parts += ["--baseline", args.baseline]
    if getattr(args, "gate", None):
        parts += ["--gate", args.gate]
    if getattr(args, "compat", None):
        parts += ["--compat", args.compat]
    parts += ["--out", args.out]
    return shlex.join(parts)


def _compat(path: str, matrix: Matrix) -> CompatView:
    """The compat report's view; one for another backend than the matrix's is refused (exit 2)."""
    report = load_model(path, CompatReport)
    if report.backend != matrix.backend.name:
        raise ArtifactError([f"{path}: a compat report for backend {report.backend!r}; the matrix is "
                             f"{matrix.backend.name!r} (run opmatrix compat --backend {matrix.backend.name})"])
    return compat_view(report)


def report(args: argparse.Namespace) -> int:
    """Render the support site; prints the index path. Exit 2 (via ArtifactError) on bad input."""
    matrix = load_matrix(args.matrix)
    baseline = load_matrix(args.baseline) if getattr(args, "baseline", None) else None
    gate = load_gate(args.gate, matrix) if getattr(args, "gate", None) else None
    compat = _compat(args.compat, matrix) if getattr(args, "compat", None) else None
    command = report_command(args)
    with claim_dir(args.out, kind="site", command=command, force=getattr(args, "force", False)) as claim:
        for note in claim.notes:
            print(note, file=sys.stderr)
        result = render_site(matrix, args.out, baseline=baseline, gate=gate, compat=compat, command=command,
                             source=args.matrix)
    print(f"matrix: {count_matrix(matrix).line()}", file=sys.stderr)
    print(
        f"wrote {len(result.written)} files ({result.unchanged} unchanged"
        f"{f', {len(result.removed)} removed' if result.removed else ''}) to {args.out}",
        file=sys.stderr,
    )
    print(result.index)
    return 0

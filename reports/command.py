"""``opmatrix report MATRIX [--baseline MATRIX] [--gate RESULT.json] --out DIR``."""

from __future__ import annotations

import argparse
import shlex
import sys

from opmatrix.schema import count_matrix, load_matrix
from opmatrix.schema.outdir import claim_dir

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
    parts += ["--out", args.out]
    return shlex.join(parts)


def report(args: argparse.Namespace) -> int:
    """Render the support site; prints the index path. Exit 2 (via ArtifactError) on bad input."""
    matrix = load_matrix(args.matrix)
    baseline = load_matrix(args.baseline) if getattr(args, "baseline", None) else None
    gate = load_gate(args.gate, matrix) if getattr(args, "gate", None) else None
    command = report_command(args)
    with claim_dir(args.out, kind="site", command=command, force=getattr(args, "force", False)) as claim:
        for note in claim.notes:
            print(note, file=sys.stderr)
        result = render_site(matrix, args.out, baseline=baseline, gate=gate, command=command, source=args.matrix)
    print(f"matrix: {count_matrix(matrix).line()}", file=sys.stderr)
    print(
        f"wrote {len(result.written)} files ({result.unchanged} unchanged"
        f"{f', {len(result.removed)} removed' if result.removed else ''}) to {args.out}",
        file=sys.stderr,
    )
    print(result.index)
    return 0

"""``opmatrix gate``: load the artifacts, evaluate, print the verdict, write the outputs.

    opmatrix gate --matrix out/refaccel-g2/matrix.yaml --contract ci/contracts/refaccel-g2.yaml \\
        [--baseline previous/matrix.yaml] [--junit junit.xml] [--summary summary.md] [--json [F]] \\
        [--today 2026-12-01]

Exit 0: the release may ship; 1: blocked; 2: invalid input. Invalid artifacts raise
:class:`~opmatrix.schema.ArtifactError` (file:line: path: message), which the CLI prints before
exiting 2. Output files are written atomically.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from opmatrix.schema import ArtifactError, Contract, load_contract, load_matrix, write_text_atomic
from opmatrix.schema.gate import GateResult
from opmatrix.schema.text import terminal_text

from .evaluate import evaluate_contract, identity_mismatch
from .junit import render_junit
from .summary import render_markdown, render_verdict

__all__ = ["gate", "parse_today"]


def parse_today(text: str | None) -> dt.date | None:
    """``--today YYYY-MM-DD`` as a date (None when absent)."""
    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ArtifactError([f"--today: {text!r} is not a date; expected YYYY-MM-DD"]) from None


def _levels_6_7(args: argparse.Namespace, contract: Contract, result: GateResult | None,
                today: dt.date | None) -> GateResult:
    """Judge the perf (level 6) and compat (level 7) requirements when the contract has them."""
    from .compat import load_compat
    from .levels67 import apply_levels_6_7, has_levels_6_7
    from .perf import load_records

    if not has_levels_6_7(contract):
        if result is None:
            raise ArtifactError([f"{args.contract}: states no perf or compat requirement; give --matrix"])
        return result
    records = load_records(args.records) if getattr(args, "records", None) else None
    baseline = load_records(args.baseline_records) if getattr(args, "baseline_records", None) else None
    compat = load_compat(args.compat) if getattr(args, "compat", None) else None
    return apply_levels_6_7(result, contract, records=records, baseline=baseline, compat=compat, today=today)


def gate(args: argparse.Namespace) -> int:
    """Run the gate for parsed CLI arguments; 0 pass, 1 blocked (2 comes from ArtifactError)."""
    today = parse_today(args.today)
    contract = load_contract(args.contract)
    result = None
    if args.matrix:
        matrix = load_matrix(args.matrix)
        baseline = load_matrix(args.baseline) if args.baseline else None
        for path, judged in ((args.matrix, matrix), (args.baseline, baseline)):
            wrong = identity_mismatch(judged, contract) if judged is not None else None
            if wrong is not None:  # the wrong pair of files: nothing to judge
                raise ArtifactError([f"opmatrix gate: {path}: {wrong} ({args.contract}); gate a matrix of the "
                                     "contract's backend, or use that backend's contract"])
        result = evaluate_contract(matrix, contract, baseline=baseline, today=today)
        # the verdict names the very matrix it judged: `report --gate` refuses it beside another matrix
        result = result.model_copy(update={"matrix_digest": matrix.digest()})
    elif not (getattr(args, "records", None) or getattr(args, "compat", None)):
        raise ArtifactError(["opmatrix gate: give --matrix (levels 0-2), or --records / --compat (levels 6-7)"])
    result = _levels_6_7(args, contract, result, today)

    json_text = result.model_dump_json(indent=2) + "\n"
    if args.junit:
        write_text_atomic(args.junit, render_junit(result))
    if args.summary:
        write_text_atomic(args.summary, render_markdown(result))
    if args.json == "-":
        sys.stdout.write(json_text)
    else:
        if args.json:
            write_text_atomic(args.json, json_text)
        sys.stdout.write(terminal_text(render_verdict(result)))
    return 0 if result.passed else 1

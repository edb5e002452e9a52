"""``opmatrix gate``: load the artifacts, evaluate, write the outputs; the CLI prints the verdict (:func:`show`).

    opmatrix gate --matrix out/refaccel-g2/matrix.yaml --contract ci/contracts/refaccel-g2.yaml \\
        [--baseline previous/matrix.yaml] [--junit junit.xml] [--summary summary.md] [--json [F]] \\
        [--today 2026-12-01] [--records DIR --baseline-records DIR] [--compat FILE] [--allow-unsealed]

:func:`gate` returns the :class:`~opmatrix.schema.GateResult`; its ``exit_code`` is OK when the
release may ship, BLOCKED otherwise; invalid input exits 2 (USAGE). Invalid artifacts raise
:class:`~opmatrix.schema.ArtifactError` (file:line: path: message), which the CLI prints before
exiting 2: so do evidence of another subject (:mod:`.evidence`), an unsealed matrix (unless
``--allow-unsealed``, which the verdict then says) and an output that names an input. Output files
are written atomically; ``-``, ``/dev/stdout`` or a FIFO are streamed.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TextIO

from opmatrix.matrix.notrun import not_run_lines
from opmatrix.schema import ArtifactError, GateResult, Matrix, load_contract, load_matrix
from opmatrix.schema.files import refuse_inputs_as_outputs, refuse_unwritable, write_output
from opmatrix.schema.gate import GateCheck, Status
from opmatrix.schema.text import terminal_text

from .evaluate import evaluate_contract
from .evidence import identity_problems
from .junit import render_junit
from .options import GateOptions
from .summary import render_markdown, render_verdict

__all__ = ["gate", "parse_today", "show"]


def parse_today(text: str | None) -> dt.date | None:
    """``--today YYYY-MM-DD`` as a date (None when absent)."""
    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ArtifactError([f"--today: {text!r} is not a date; expected YYYY-MM-DD"]) from None


def _record_files(directory: str | None) -> list[tuple[str, str]]:
    if not directory or not os.path.isdir(directory):
        return []
    return [("records", str(p)) for p in sorted(Path(directory).glob("*.yaml"))]


def _refuse_clobbering(args: GateOptions) -> None:
    """Every output names a file of its own: never an input of this run, never another output."""
    inputs = [("--matrix", args.matrix), ("--contract", args.contract), ("--baseline", args.baseline),
              ("--compat", args.compat),
              *_record_files(args.records), *_record_files(args.baseline_records)]
    outputs = [("--junit", args.junit), ("--summary", args.summary_file), ("--json", args.json)]
    refuse_inputs_as_outputs(outputs, inputs)
    refuse_unwritable(outputs)


def _sealed(path: str, matrix: Matrix, allow_unsealed: bool) -> GateCheck:
    """The seal check of one matrix file: sealed passes; unsealed is refused unless --allow-unsealed."""
    if matrix.integrity is not None:
        seal = matrix.integrity
        return GateCheck(name="seal", status=Status.passed,
                         message=f"{path}: integrity verified ({seal.cells} cells, {seal.operators} operators)")
    if not allow_unsealed:
        raise ArtifactError([f"opmatrix gate: {path}: unsealed matrix (no integrity block): nothing shows it was not "
                             "edited or cut short; regenerate it with opmatrix probe/merge, or pass --allow-unsealed "
                             "to judge it anyway"])
    return GateCheck(name="seal", status=Status.waived,
                     message=f"{path}: UNSEALED (no integrity block), judged only because --allow-unsealed was given: "
                     "its content is not proven unedited")


def gate(args: GateOptions) -> GateResult:
    """Judge the evidence against the contract; the result (``.verdict``, ``.exit_code``).

    Writes the outputs asked for by path (``--junit``, ``--summary``, ``--json FILE``); prints
    nothing: :func:`show` is what the CLI prints (``--json -`` streams the JSON there)."""
    from .compat import load_compat
    from .perf import load_records

    today = parse_today(args.today)
    _refuse_clobbering(args)
    contract = load_contract(args.contract)
    allow_unsealed = args.allow_unsealed
    matrix = load_matrix(args.matrix) if args.matrix else None
    baseline = load_matrix(args.baseline) if args.baseline else None
    if baseline is not None and matrix is None:
        raise ArtifactError(["opmatrix gate: --baseline is the previous release's matrix: give --matrix too"])
    seals = [_sealed(path, m, allow_unsealed) for path, m in ((args.matrix, matrix), (args.baseline, baseline))
             if path is not None and m is not None]
    records = load_records(args.records) if args.records else None
    baseline_records = load_records(args.baseline_records) if args.baseline_records else None
    compat = load_compat(args.compat) if args.compat else None
    if matrix is None and records is None and compat is None:
        raise ArtifactError(["opmatrix gate: give --matrix (levels 0-5), or --records / --compat (levels 6-7)"])
    wrong = identity_problems(contract, matrix=matrix, baseline=baseline, records=records,
                              baseline_records=baseline_records, compat=compat)
    if wrong:  # the wrong pair of files: nothing to judge
        paths = {"matrix": args.matrix, "baseline": args.baseline, "records": args.records,
                 "baseline_records": args.baseline_records, "compat": args.compat}
        raise ArtifactError([f"opmatrix gate: {paths[which]}: {line} ({args.contract}); gate evidence of the "
                             "contract's subject, or use that subject's contract" for which, line in wrong])
    result = evaluate_contract(matrix, contract, baseline=baseline, records=records,
                               baseline_records=baseline_records, compat=compat, today=today)
    if seals:
        result = result.model_copy(update={"checks": [*seals, *result.checks]})

    if args.junit:
        write_output(args.junit, render_junit(result))
    if args.summary_file:
        write_output(args.summary_file, render_markdown(result))
    if args.json and args.json != "-":
        write_output(args.json, _json_text(result))
    return result


def _json_text(result: GateResult) -> str:
    return result.model_dump_json(indent=2) + "\n"


def show(result: GateResult, args: GateOptions, out: TextIO) -> None:
    """What ``opmatrix gate`` prints: the JSON result for ``--json -``, else the readable verdict."""
    if args.json == "-":
        out.write(_json_text(result))
        return
    out.write(terminal_text(render_verdict(result)))
    matrix = load_matrix(args.matrix) if args.matrix else None
    for line in not_run_lines(matrix.not_run if matrix is not None else {}):  # what no requirement saw, as probe says it
        out.write(terminal_text(line) + "\n")

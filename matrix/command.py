"""The ``opmatrix merge``, ``query`` and ``diff`` verbs (arguments are declared in ``opmatrix.cli``).

::

    opmatrix merge shard1/journal.jsonl shard2/journal.jsonl --out out/merged   # -> matrix.yaml, journal.jsonl
    opmatrix query out/refaccel-g2/matrix.yaml aten.softmax.int --dtype float32 --rank 3 --arg dim=-1 --json
    opmatrix diff out/refaccel-g1/matrix.yaml out/refaccel-g2/matrix.yaml [--json]

Each handler takes the parsed ``argparse.Namespace`` and returns the exit code; invalid input
raises :class:`opmatrix.cli.UsageError` or :class:`~opmatrix.schema.ArtifactError` (exit 2).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from opmatrix.schema import (
    TENSOR,
    ArtifactError,
    BackendId,
    Evidence,
    JournalHeader,
    Runtime,
    UsageError,
    dump_model,
    load_matrix,
    model_to_data,
    write_text_atomic,
)

from .build import build_matrix
from .diff import diff_matrices
from .journal import dumps_records, merge_records, read_journal
from .query import Matrix, UnknownOperatorError, parse_dtype, parse_layout

__all__ = ["diff", "merge", "parse_arg", "query"]


def _command_line() -> str:
    return "opmatrix " + " ".join(shlex.quote(a) for a in sys.argv[1:])


# -- merge -----------------------------------------------------------------------------------


def _backend(headers: list[JournalHeader]) -> BackendId:
    names = {(h.backend, h.generation) for h in headers}
    if len(names) != 1:
        shown = ", ".join(f"{n}{'/' + g if g else ''}" for n, g in sorted(names, key=str))
        raise ArtifactError([f"journals of different backends cannot merge into one matrix: {shown}"])
    name, generation = names.pop()
    device_type = next((h.device_type for h in headers if h.device_type), None)
    dispatch_key = next((h.dispatch_key for h in headers if h.dispatch_key), None)
    if device_type is None or dispatch_key is None:
        from opmatrix.backend.registry import get_adapter

        try:
            known = get_adapter(name, generation=generation).identity()
        except (ImportError, ValueError) as exc:  # UnknownBackend is a ValueError
            raise ArtifactError(
                [f"journal header names backend {name!r} without device_type/dispatch_key, "
                 f"and it is not a known backend ({exc}); record them in the header"]
            ) from None
        device_type = device_type or known.device_type
        dispatch_key = dispatch_key or known.dispatch_key
    return BackendId(name=name, device_type=device_type, dispatch_key=dispatch_key, generation=generation)


def _evidence(headers: list[JournalHeader]) -> Evidence:
    """The first shard's evidence, spanning every shard's start and finish."""
    blocks = sorted((h.evidence for h in headers if h.evidence is not None), key=lambda e: e.model_dump_json())
    starts = [t for t in [*(h.started for h in headers), *(e.started for e in blocks)] if t]
    finishes = [e.finished for e in blocks if e.finished]
    if blocks:
        base = blocks[0]
    else:
        base = Evidence(
            opmatrix_version=metadata.version("opmatrix"),
            torch_version=metadata.version("torch"),
            python=platform.python_version(),
            platform=platform.platform(terse=True),
            command=headers[0].command,
            extra={"note": "the journals carried no evidence block: versions are those of the merging host"},
        )
    return base.model_copy(
        update={"started": min(starts) if starts else None, "finished": max(finishes) if finishes else None}
    )


def _runtime(headers: list[JournalHeader]) -> Runtime | None:
    blocks = sorted((h.runtime for h in headers if h.runtime is not None), key=lambda r: r.model_dump_json())
    return blocks[0] if blocks else None


def merge(args: argparse.Namespace) -> int:
    """Join shard journals into DIR/journal.jsonl and build DIR/matrix.yaml from them."""
    journals = [read_journal(path) for path in args.journals]
    records = merge_records(journals)
    headers = [r for r in records if isinstance(r, JournalHeader)]
    if not headers:
        raise ArtifactError([f"{args.journals[0]}: no header line; a journal starts with a kind=header record"])
    model = build_matrix(records, backend=_backend(headers), evidence=_evidence(headers), runtime=_runtime(headers))
    out = Path(args.out)
    command = _command_line()
    header = headers[0].model_copy(
        update={"planned": sum(h.planned for h in headers), "command": command, "started": model.evidence.started}
    )
    bodies = [r for r in records if not isinstance(r, JournalHeader)]
    write_text_atomic(out / "journal.jsonl", dumps_records([header, *bodies]))
    dump_model(model, out / "matrix.yaml", command=command)
    print(
        f"merged {len(args.journals)} journal(s), {len(bodies)} record(s): {len(model.operators)} operators, "
        f"{model.cell_count()} cells, {len(model.skipped)} skipped task(s) -> {out / 'matrix.yaml'}"
    )
    return 0


# -- query -----------------------------------------------------------------------------------


def parse_arg(text: str) -> tuple[str, Any]:
    """``dim=-1`` -> ``("dim", -1)``; values: ints, floats, true/false, none, tensor, else text."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise UsageError(f"--arg {text!r}: expected NAME=VALUE, e.g. --arg dim=-1")
    raw = raw.strip()
    words: dict[str, Any] = {"true": True, "false": False, "none": None, "tensor": TENSOR}
    if raw.lower() in words:
        return name, words[raw.lower()]
    for kind in (int, float):
        try:
            return name, kind(raw)
        except ValueError:
            continue
    return name, raw


def query(args: argparse.Namespace) -> int:
    """Print how OP runs for one cell (or the op's entries when dtype or rank is not given)."""
    m = Matrix.load(args.matrix)
    try:
        op = m.resolve(args.op)
        dtype = parse_dtype(args.dtype) if args.dtype is not None else None
        layout = parse_layout(args.layout) if args.layout is not None else None
    except UnknownOperatorError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.rank is not None and args.rank < 0:
        raise UsageError(f"--rank must be >= 0, got {args.rank}")
    values = dict(parse_arg(a) for a in args.arg)
    if dtype is None or args.rank is None:
        return _print_entries(m, op, dtype, args.rank, layout, args.mode, args.json)
    answer = m.query(op, dtype, args.rank, layout or "contiguous", args.mode, args=values or None)
    cell = {"op": op, "dtype": dtype, "rank": args.rank, "layout": layout or "contiguous", "mode": args.mode}
    if args.json:
        print(json.dumps({**cell, "args": values, **answer.to_dict()}, sort_keys=True))
    else:
        where = " ".join(str(v) for v in cell.values())
        given = f" with {', '.join(f'{k}={v}' for k, v in values.items())}" if values else ""
        print(f"{where}{given}: {answer.summary()}")
    return 0


def _print_entries(m: Matrix, op: str, dtype: str | None, rank: int | None, layout: str | None,
                   mode: str, as_json: bool) -> int:
    entries = [
        e for e in m.operators.get(op, [])
        if e.mode.value == mode
        and (dtype is None or dtype in e.dtypes)
        and (rank is None or rank in e.ranks)
        and (layout is None or layout in e.layouts)
    ]
    if as_json:
        print(json.dumps({"op": op, "mode": mode, "entries": [model_to_data(e) for e in entries]}, sort_keys=True))
        return 0
    if not entries:
        print(f"{op} ({mode}): no probed entry matches; path unknown")
    for e in entries:
        ranks = f"{e.ranks.min}" if e.ranks.min == e.ranks.max else f"{e.ranks.min}-{e.ranks.max}"
        conds = f" when {', '.join(f'{k}={v}' for k, v in sorted(e.conditions.items()))}" if e.conditions else ""
        print(
            f"{op} {','.join(d.value for d in e.dtypes)} rank {ranks} {','.join(x.value for x in e.layouts)} "
            f"{e.mode.value}{conds}: {e.path.value} ({e.outcome.value}), {e.samples.passed}/{e.samples.probed} samples"
        )
    return 0


# -- diff ------------------------------------------------------------------------------------


def diff(args: argparse.Namespace) -> int:
    """Print the cells better / worse / new / removed from matrix A to matrix B (exit 0)."""
    from .distributed import diff_distributed, render_distributed

    a, b = load_matrix(args.a), load_matrix(args.b)
    result, dist = diff_matrices(a, b), diff_distributed(a, b)
    if args.json:
        data = {**result.to_dict(), **({"distributed": [c.to_dict() for c in dist]} if dist else {})}
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(result.render_table() + (render_distributed(dist) if a.distributed or b.distributed else ""))
    return 0

"""The ``opmatrix query`` and ``diff`` verbs, and the pieces of ``merge`` that read only journals
(the merge itself is orchestrated by ``opmatrix.pipeline``; arguments are declared in ``opmatrix.cli``).

::

    opmatrix query out/refaccel-g2/matrix.yaml aten.softmax.int --dtype float32 --rank 3 --arg dim=-1 --json
    opmatrix diff out/refaccel-g1/matrix.yaml out/refaccel-g2/matrix.yaml [--json]

Each handler takes its options (:mod:`.options`) and returns the exit code; invalid input
raises :class:`opmatrix.cli.UsageError` or :class:`~opmatrix.schema.ArtifactError` (exit 2).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from opmatrix.schema import (
    TENSOR,
    ArtifactError,
    BackendId,
    Entry,
    Evidence,
    JournalHeader,
    Runtime,
    UsageError,
    load_matrix,
    model_to_data,
)
from opmatrix.schema.text import terminal_text
from opmatrix.schema.yamlload import dumps_json

from .contract_line import contract_line
from .diff import diff_matrices
from .headline import headline
from .keys import parse_dtype, parse_layout
from .options import DiffOptions, QueryOptions
from .query import MatrixIndex, UnknownOperatorError

__all__ = ["diff", "merge_backend", "merge_evidence", "merge_runtime", "parse_arg", "query"]


# -- merge -----------------------------------------------------------------------------------


def merge_backend(headers: list[JournalHeader],
                  known: Callable[[str, str | None], BackendId]) -> BackendId:
    """The one backend of ``headers``; ``known(name, generation)`` fills in what they lack."""
    names = {(h.backend, h.generation) for h in headers}
    if len(names) != 1:
        shown = ", ".join(f"{n}{'/' + g if g else ''}" for n, g in sorted(names, key=str))
        raise ArtifactError([f"journals of different backends cannot merge into one matrix: {shown}"])
    name, generation = names.pop()
    device_type = next((h.device_type for h in headers if h.device_type), None)
    dispatch_key = next((h.dispatch_key for h in headers if h.dispatch_key), None)
    if device_type is None or dispatch_key is None:
        found = known(name, generation)
        device_type = device_type or found.device_type
        dispatch_key = dispatch_key or found.dispatch_key
    return BackendId(name=name, device_type=device_type, dispatch_key=dispatch_key, generation=generation)


def merge_evidence(headers: list[JournalHeader]) -> Evidence:
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


def merge_runtime(headers: list[JournalHeader]) -> Runtime | None:
    """The runtime block of the shards (the first, in a stable order)."""
    blocks = sorted((h.runtime for h in headers if h.runtime is not None), key=lambda r: r.model_dump_json())
    return blocks[0] if blocks else None


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


def query(args: QueryOptions) -> int:
    """Print how OP runs for one cell (or the op's entries when dtype or rank is not given)."""
    m = MatrixIndex.load(args.matrix)
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
    if args.shapes == "dynamic" and args.mode != "compile":
        raise UsageError("--shapes dynamic: only with --mode compile (eager cells have no compiled shapes)")
    values = dict(parse_arg(a) for a in args.arg)
    if dtype is None or args.rank is None:
        return _print_entries(m, op, dtype, args.rank, layout, args, args.all or dtype is not None or args.rank is not None)
    answer = m.query(op, dtype, args.rank, layout or "contiguous", args.mode, args=values or None, shapes=args.shapes)
    cell = {"op": op, "dtype": dtype, "rank": args.rank, "layout": layout or "contiguous", "mode": args.mode}
    if args.mode == "compile":
        cell["shapes"] = args.shapes
    if args.json:
        print(dumps_json({**cell, "args": values, **answer.to_dict()}, sort_keys=True))
    else:
        where = " ".join(str(v) for v in cell.values())
        given = f" with {', '.join(f'{k}={v}' for k, v in values.items())}" if values else ""
        print(f"{where}{given}: {answer.summary()}")
    return 0


def _print_entries(m: MatrixIndex, op: str, dtype: str | None, rank: int | None, layout: str | None,
                   args: QueryOptions, listed: bool) -> int:
    """The operator's headline (what works and on which path, then what does not); its box entries
    with ``--all`` or when a dtype or rank narrows them."""
    mode = args.mode
    entries = [
        e for e in m.model.boxes().get(op, [])
        if e.mode.value == mode
        and (mode != "compile" or (e.shapes.value if e.shapes else "static") == args.shapes)
        and (dtype is None or dtype in e.dtypes)
        and (rank is None or rank in e.ranks)
        and (layout is None or layout in e.layouts)
    ]
    line = contract_line(m.operators.get(op, []))
    head = headline(m.operators.get(op, []))
    if args.json:
        print(dumps_json({"op": op, "mode": mode, "contract": line, "headline": head,
                          "entries": [model_to_data(e) for e in entries]}, sort_keys=True))
        return 0
    b = m.model.backend
    print(f"{op} on {b.name}{' ' + b.generation if b.generation else ''} (generated from the matrix): {head}")
    if not listed:
        print(f"{len(entries)} {mode} entr{'y' if len(entries) == 1 else 'ies'}: --all lists them; "
              f"--dtype/--rank/--layout ask for one cell")
        return 0
    print(f"contract line: {line}")
    print(f"{len(entries)} box entr{'y' if len(entries) == 1 else 'ies'} ({mode}) match:")
    if not entries:
        print(f"{op} ({mode}): no probed entry matches; path unknown")
    for e in entries:
        ranks = f"{e.ranks.min}" if e.ranks.min == e.ranks.max else f"{e.ranks.min}-{e.ranks.max}"
        conds = f" when {', '.join(f'{k}={v}' for k, v in sorted(e.conditions.items()))}" if e.conditions else ""
        print(
            f"{op} {','.join(d.value for d in e.dtypes)} rank {ranks} {','.join(x.value for x in e.layouts)} "
            f"{e.mode.value}{_shapes(e)}{conds}: {e.path.value} ({e.outcome.value}), {e.samples.passed}/"
            f"{e.samples.probed} samples{_extended(e)}"
        )
    return 0


def _shapes(e: Entry) -> str:
    return f" ({e.shapes.value} shapes)" if e.shapes is not None else ""


def _extended(e: Entry) -> str:
    return f"; {e.source.value}" if e.source is not None else ""


# -- diff ------------------------------------------------------------------------------------


def diff(args: DiffOptions) -> int:
    """Print the cells better / worse / new / removed from matrix A to matrix B (exit 0)."""
    a, b = load_matrix(args.a), load_matrix(args.b)
    result = diff_matrices(a, b)
    from .distributed import diff_distributed, render_distributed
    from .workloads import diff_workloads, render_workload_diff

    changes, dist = diff_workloads(a.workloads, b.workloads), diff_distributed(a, b)
    if args.json:
        import json

        data = json.loads(result.to_json())
        if a.workloads or b.workloads:
            data["workloads"] = changes
        if dist:
            data["distributed"] = [c.to_dict() for c in dist]
        sys.stdout.write(dumps_json(data, indent=2, sort_keys=True) + "\n")
    else:
        text = result.render_table() + render_workload_diff(changes)
        text += render_distributed(dist) if a.distributed or b.distributed else ""
        sys.stdout.write(terminal_text(text))
    return 0

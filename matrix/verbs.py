"""The ``opmatrix query`` and ``diff`` verbs, and the pieces of ``merge`` that read only journals
(the merge itself is orchestrated by ``opmatrix.pipeline``; arguments are declared in ``opmatrix.cli``).

::

    opmatrix query out/refaccel-g2/matrix.yaml aten.softmax.int --dtype float32 --rank 3 --arg dim=-1 --json
    opmatrix diff out/refaccel-g1/matrix.yaml out/refaccel-g2/matrix.yaml [--json]

``query`` and ``diff`` take their options (:mod:`.options`) and return what they found (an
``Answer`` or the op's entries, a ``MatrixDiff``); ``show_query`` and ``show_diff`` print that for the
CLI. Invalid input raises :class:`~opmatrix.schema.UsageError` or :class:`~opmatrix.schema.ArtifactError` (exit 2).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, TextIO

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

from .answer import Answer, path_words
from .contract_line import contract_line
from .diff import MatrixDiff, diff_matrices
from .headline import headline
from .keys import parse_dtype, parse_layout
from .notrun import not_run_for
from .options import DiffOptions, QueryOptions
from .query import MatrixIndex, UnknownOperatorError

__all__ = ["OpEntries", "diff", "merge_backend", "merge_evidence", "merge_runtime", "parse_arg", "query", "show_diff",
           "show_query"]


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


@dataclass(frozen=True)
class OpEntries:
    """The answer to a query that names no single cell (no dtype or no rank): the op's matching
    entries in one mode, with the contract line the matrix supports."""

    op: str
    mode: str
    contract: str
    #: what works and on which path, then what does not (:func:`~.headline.headline`)
    headline: str
    entries: tuple[Entry, ...]
    #: the backend as the matrix names it (``refaccel g2``)
    backend: str = ""
    #: units of this op the probe never ran, in its own words (no cells, not counted)
    not_run: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Cell:
    """A query's arguments, parsed once: the index, the op's full name, dtype, layout, argument values."""

    index: MatrixIndex
    op: str
    dtype: str | None
    layout: str | None
    values: dict[str, Any]


def _parse_query(args: QueryOptions) -> _Cell:
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
    return _Cell(m, op, dtype, layout, dict(parse_arg(a) for a in args.arg))


def _answer(cell: _Cell, args: QueryOptions) -> Answer | OpEntries:
    if cell.dtype is None or args.rank is None:
        return _entries(cell.index, cell.op, cell.dtype, args.rank, cell.layout, args.mode, args.shapes)
    return cell.index.query(cell.op, cell.dtype, args.rank, cell.layout or "contiguous", args.mode,
                            args=cell.values or None, shapes=args.shapes)


def query(args: QueryOptions) -> Answer | OpEntries:
    """How OP runs for one cell (an :class:`Answer`), or the op's entries when dtype or rank is not given."""
    return _answer(_parse_query(args), args)


def show_query(args: QueryOptions, out: TextIO) -> None:
    """What ``opmatrix query`` prints: the cell's answer (or the op's headline and entries), as text or ``--json``."""
    cell = _parse_query(args)
    result = _answer(cell, args)
    if isinstance(result, OpEntries):
        listed = args.all or cell.dtype is not None or args.rank is not None
        return _print_entries(result, args.json, listed, out)
    shown: dict[str, Any] = {"op": cell.op, "dtype": cell.dtype, "rank": args.rank,
                             "layout": cell.layout or "contiguous", "mode": args.mode}
    if args.mode == "compile":
        shown["shapes"] = args.shapes
    unseen = [g.line() for g in not_run_for(cell.index.model.not_run, cell.op, cell.dtype)]  # the probe's own words
    if args.json:
        print(dumps_json({**shown, "args": cell.values, **result.to_dict(), **({"not_run": unseen} if unseen else {})},
                         sort_keys=True), file=out)
    else:
        where = " ".join(str(v) for v in shown.values())
        given = f" with {', '.join(f'{k}={v}' for k, v in cell.values.items())}" if cell.values else ""
        print(f"{where}{given}: {result.summary()}", file=out)
        for line in unseen:
            print(f"not run (no cells, not counted): {line}", file=out)
    return None


def _entries(m: MatrixIndex, op: str, dtype: str | None, rank: int | None, layout: str | None,
             mode: str, shapes: str) -> OpEntries:
    entries = [
        e for e in m.model.boxes().get(op, [])
        if e.mode.value == mode
        and (mode != "compile" or (e.shapes.value if e.shapes else "static") == shapes)
        and (dtype is None or dtype in e.dtypes)
        and (rank is None or rank in e.ranks)
        and (layout is None or layout in e.layouts)
    ]
    b = m.model.backend
    return OpEntries(op=op, mode=mode, contract=contract_line(m.operators.get(op, [])),
                     headline=headline(m.operators.get(op, [])), entries=tuple(entries),
                     backend=f"{b.name}{' ' + b.generation if b.generation else ''}",
                     not_run=tuple(g.line() for g in not_run_for(m.model.not_run, op, dtype)))


def _print_entries(found: OpEntries, as_json: bool, listed: bool, out: TextIO) -> None:
    """The operator's headline (what works and on which path, then what does not); its box entries
    when ``listed`` (``--all``, or a dtype or rank narrows them)."""
    op, mode, entries = found.op, found.mode, found.entries
    if as_json:
        print(dumps_json({"op": op, "mode": mode, "contract": found.contract, "headline": found.headline,
                          "entries": [model_to_data(e) for e in entries]}, sort_keys=True), file=out)
        return
    print(f"{op} on {found.backend} (generated from the matrix): {found.headline}", file=out)
    if not listed:
        print(f"{len(entries)} {mode} entr{'y' if len(entries) == 1 else 'ies'}: --all lists them; "
              f"--dtype/--rank/--layout ask for one cell", file=out)
        return
    print(f"contract line: {found.contract}", file=out)
    print(f"{len(entries)} box entr{'y' if len(entries) == 1 else 'ies'} ({mode}) match:", file=out)
    if not entries:
        print(f"{op} ({mode}): no probed entry matches; path unknown", file=out)
    for e in entries:
        ranks = f"{e.ranks.min}" if e.ranks.min == e.ranks.max else f"{e.ranks.min}-{e.ranks.max}"
        conds = f" when {', '.join(f'{k}={v}' for k, v in sorted(e.conditions.items()))}" if e.conditions else ""
        print(
            f"{op} {','.join(d.value for d in e.dtypes)} rank {ranks} {','.join(x.value for x in e.layouts)} "
            f"{e.mode.value}{_shapes(e)}{conds}: {path_words(e.path, e.outcome)}, {e.samples.passed}/"
            f"{e.samples.probed} samples{_extended(e)}",
            file=out,
        )
    for line in found.not_run:
        print(f"not run (no cells, not counted): {line}", file=out)


def _shapes(e: Entry) -> str:
    return f" ({e.shapes.value} shapes)" if e.shapes is not None else ""


def _extended(e: Entry) -> str:
    return f"; {e.source.value}" if e.source is not None else ""


# -- diff ------------------------------------------------------------------------------------


def diff(args: DiffOptions) -> MatrixDiff:
    """The cells better / worse / new / removed from matrix A to matrix B, with the workload and
    distributed changes."""
    a, b = load_matrix(args.a), load_matrix(args.b)
    from .distributed import diff_distributed
    from .workloads import diff_workloads

    return replace(diff_matrices(a, b), workloads=diff_workloads(a.workloads, b.workloads),
                   distributed=tuple(diff_distributed(a, b)),
                   has_distributed=a.distributed is not None or b.distributed is not None,
                   has_workloads=bool(a.workloads or b.workloads))


def show_diff(result: MatrixDiff, as_json: bool, out: TextIO) -> None:
    """What ``opmatrix diff`` prints: the table of changes, or ``--json``."""
    from .distributed import render_distributed
    from .workloads import render_workload_diff

    if as_json:
        import json

        data = json.loads(result.to_json())
        if result.has_workloads:
            data["workloads"] = result.workloads
        if result.distributed:
            data["distributed"] = [c.to_dict() for c in result.distributed]
        out.write(dumps_json(data, indent=2, sort_keys=True) + "\n")
    else:
        text = result.render_table() + render_workload_diff(result.workloads)
        text += render_distributed(list(result.distributed)) if result.has_distributed else ""
        out.write(terminal_text(text))

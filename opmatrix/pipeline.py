"""The probe -> journal -> matrix pipeline: the one place that joins ``probes`` and ``matrix``.

    opmatrix probe --backend refaccel --generation g2 --ops softmax,add --out out/refaccel-g2
    opmatrix merge shard1/journal.jsonl shard2/journal.jsonl --out out/merged

``probes`` plans and runs tasks into a journal; ``matrix`` turns journals into a matrix; neither
imports the other (nor does ``matrix`` import ``backend``): this module, on top, wires them.
Every argument is checked before a worker starts, the output directory is locked while it is
written (:mod:`opmatrix.schema.outdir`), and ``--resume`` continues only the run its journal
header names (:class:`~opmatrix.schema.journal.RunIdentity`).

Exit codes (probe): 0 when every planned task was recorded (cells that are wrong or raised are
results); 1 when the run aborted (restart cap) or a cell crashed, hung or poisoned its worker;
2 invalid input, or the machine stopped the run (a full disk, the OOM killer; ``--resume``
continues); 130 interrupted (``--resume`` continues).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from opmatrix.schema import (
    PROCESS_FAULTS,
    ArtifactError,
    BackendId,
    ExitCode,
    JournalHeader,
    Matrix,
    UsageError,
    dump_model,
    gc_paused,
    write_text_atomic,
)
from opmatrix.schema.files import refuse_inputs_as_outputs
from opmatrix.schema.journalfile import Record, scan_journal
from opmatrix.schema.outdir import DirClaim, check_out_path, claim_dir

if TYPE_CHECKING:
    from opmatrix.options import MergeOptions
    from opmatrix.probes import Executor, ProbeOptions, ProbePlan, RunSummary

__all__ = ["ProbeResult", "merge", "probe"]

#: outcomes that mean a process died or a context broke: the probe exits 1
_PROCESS_FAULTS = frozenset(f.value for f in PROCESS_FAULTS)
JOURNAL = "journal.jsonl"


def _say(notes: list[str]) -> None:
    for note in notes:
        print(note, file=sys.stderr)


# -- probe -----------------------------------------------------------------------------------


def _check_journals(plan: ProbePlan, resume: bool) -> None:
    """Before any worker: the journals in ``--out`` read cleanly, and ``--resume`` is this run's."""
    journal = plan.out / JOURNAL
    for path in (journal, journal.with_name(JOURNAL + ".prev")):
        if not path.exists():
            continue
        scan = scan_journal(path)  # a corrupt middle line: ArtifactError naming file, line, fix
        _say([n for n in [scan.note()] if n and path == journal])
        if path != journal:
            continue
        if not resume:
            _say([f"note: {journal} ({len(scan.by_task)} records) moves to {JOURNAL}.prev; records whose evidence "
                  "key is unchanged are reused, not probed again"])
            continue
        header = scan.header
        if header is None:
            continue
        diffs = _differences(header, plan)
        if diffs:
            raise UsageError(
                f"{journal}: --resume of a different run: {'; '.join(diffs)}. Resume with the arguments that "
                "started it, or start fresh without --resume (the journal moves to journal.jsonl.prev and "
                "unchanged cells are reused) or with another --out"
            )


def _differences(header: JournalHeader, plan: ProbePlan) -> list[str]:
    if header.run is not None:
        return plan.identity.differences(header.run)
    out = []  # a journal from before run identities: its backend and generation at least
    if header.backend != plan.identity.backend:
        out.append(f"backend ({header.backend!r} in the journal, {plan.identity.backend!r} now)")
    if header.generation != plan.identity.generation:
        out.append(f"generation ({header.generation!r} in the journal, {plan.identity.generation!r} now)")
    return out


def _selected(records: list[Record], planned: set[str]) -> list[Record]:
    """Only this run's selection: a journal may hold other tasks, never written into the matrix."""
    return [r for r in records if isinstance(r, JournalHeader) or r.task in planned]


def _build(plan: ProbePlan, summary: RunSummary) -> Matrix:
    from opmatrix.matrix.build import build_matrix
    from opmatrix.probes import probe_evidence, worker_evidence

    records = scan_journal(plan.out / JOURNAL).records
    planned = {t.id for t in plan.planned}
    evidence = probe_evidence(plan.adapter, plan.command, plan.started, plan.source, worker_evidence(records))
    selected = _selected(records, planned)
    matrix = build_matrix(selected, backend=plan.backend_id, evidence=evidence)
    summary.faults, summary.reproduce = _faults(selected, matrix)
    recorded = {getattr(r, "task", None) for r in records}
    missing = sorted(planned - recorded)
    if missing:  # an aborted run: what was planned but never ran is said, not silently absent
        why = f"not run: the run aborted ({summary.message})" if summary.aborted else "not run"
        matrix = matrix.model_copy(update={"skipped": {**matrix.skipped, **{m: why for m in missing}}})
    return matrix


def _faults(records: list[Record], matrix: Matrix) -> tuple[dict[str, int], list[str]]:
    """The one fault count: the matrix's faulted cells (a backward that crashed the worker
    counts, :func:`~opmatrix.schema.cell_fault`, as the site counts them) and the tasks that
    faulted before naming any cell; and a reproduction command per faulted task."""
    from opmatrix.matrix.build import reproduction
    from opmatrix.schema import TaskRecord, cell_fault, count_matrix

    faults = {f.value: n for f, n in count_matrix(matrix).cells_faulted.items() if n}
    header = next((r for r in records if isinstance(r, JournalHeader)), None)
    backend = (header.backend, header.generation) if header else (matrix.backend.name, matrix.backend.generation)
    lines: dict[str, None] = {}
    for r in records:
        if not isinstance(r, TaskRecord):
            continue
        cellless = not r.cells and r.outcome.fault is not None
        if cellless:
            faults[r.outcome.value] = faults.get(r.outcome.value, 0) + 1
        if cellless or any(cell_fault(c.result) is not None for c in r.cells):
            lines[reproduction(backend, r.source, r.dtype.value)] = None
    return dict(sorted(faults.items())), list(lines)


@dataclass(frozen=True)
class ProbeResult:
    """What ``probe`` left: where it wrote, the runner's summary, the matrix (None when
    interrupted: ``--resume`` continues) and the exit code."""

    backend: BackendId
    journal: Path
    matrix_path: Path
    summary: RunSummary
    matrix: Matrix | None
    exit_code: ExitCode


def _exit_code(summary: RunSummary, matrix: Matrix) -> ExitCode:
    """FAILED when the run aborted or a cell (or distributed case) crashed, hung or poisoned its worker."""
    if summary.aborted:
        return ExitCode.FAILED
    if matrix.distributed and any(c.outcome.value in _PROCESS_FAULTS for c in matrix.distributed.cases):
        return ExitCode.FAILED
    return ExitCode.FAILED if any(summary.faults.get(k) for k in _PROCESS_FAULTS) else ExitCode.OK


def _claim(out: Path, kind: str, command: str, force: bool) -> DirClaim:
    claim = claim_dir(out, kind=kind, command=command, force=force)
    _say(claim.notes)
    return claim


def probe(options: ProbeOptions) -> ProbeResult:
    """Run ``opmatrix probe``: check, lock ``--out``, run the workers, build DIR/matrix.yaml.

    Prints no result (the CLI renders the :class:`ProbeResult`); the runner's progress goes to
    stderr unless ``options.quiet``."""
    from opmatrix.probes import stop_zygote as stop

    try:
        return _probe(options)
    finally:
        stop()  # a zygote started for the plan (a first run) and never used: the run stops its own


def _probe(options: ProbeOptions) -> ProbeResult:
    from opmatrix.probes import plan_probe

    if options.out:
        check_out_path(options.out)
    if options.executor == "ray":
        from opmatrix.probes import ray_missing

        missing = ray_missing()
        if missing:
            raise UsageError(missing)
    plan = plan_probe(options)  # every argument checked: nothing written yet
    claim = _claim(plan.out, "journal", plan.command, options.force)
    try:
        _check_journals(plan, options.resume)
    except BaseException:
        claim.abandon()
        raise
    with claim:
        from opmatrix.probes import TASK_HANDLERS, EngineOptions, run

        summary = run(
            plan.tasks, backend=options.backend, generation=options.generation, out_dir=plan.out, workers=options.workers,
            threads=options.threads, timeout=options.timeout, resume=options.resume, devices=plan.devices, shard=plan.shard,
            max_restarts=options.max_restarts, options=EngineOptions(op_source_hash=plan.source.hash if plan.source else ""),
            progress=not options.quiet, command=plan.command, run_identity=plan.identity, handlers=TASK_HANDLERS,
            executor=_executor(options, plan),
        )
        if summary.interrupted or summary.infrastructure:  # the runner has said why, and how to resume
            # 130, or 2: the machine stopped it (a full disk, the OOM killer): no matrix from a cut run
            return ProbeResult(plan.backend_id, plan.out / JOURNAL, plan.out / "matrix.yaml", summary, None,
                               summary.exit_code)
        with gc_paused():  # reading the journal and building the matrix: 60% faster without collections
            matrix = _build(plan, summary)
        if "distributed" in plan.suites:
            from opmatrix.probes import attach_distributed

            matrix = attach_distributed(matrix, options.backend, options.generation, plan.out, progress=not options.quiet)
        dump_model(matrix, plan.out / "matrix.yaml", command=plan.command)
    return ProbeResult(plan.backend_id, plan.out / JOURNAL, plan.out / "matrix.yaml", summary, matrix,
                       _exit_code(summary, matrix))


def _executor(options: ProbeOptions, plan: ProbePlan) -> Executor | None:
    """Where the workers run: None (this host's processes) or Ray actors, one per device of a cluster."""
    if options.executor != "ray":
        return None
    from opmatrix.probes import RayExecutor

    return RayExecutor(address=options.ray_address, resource=options.ray_resource, backend=options.backend,
                       generation=options.generation, device_type=plan.backend_id.device_type)


# -- merge -----------------------------------------------------------------------------------


def _known_backend(name: str, generation: str | None) -> BackendId:
    from opmatrix.backend.registry import get_adapter

    try:
        return get_adapter(name, generation=generation).identity()  # type: ignore[no-any-return]
    except (ImportError, ValueError) as exc:  # UnknownBackend is a ValueError
        raise ArtifactError(
            [f"journal header names backend {name!r} without device_type/dispatch_key, "
             f"and it is not a known backend ({exc}); record them in the header"]
        ) from None


def _same_run(headers: list[JournalHeader], paths: list[str]) -> None:
    from opmatrix.probes import EvidenceKey

    runs = {h.run.model_copy(update={"shard": None}).model_dump_json(): p
            for h, p in zip(headers, paths, strict=True) if h.run is not None}
    if len(runs) > 1:
        shown = ", ".join(sorted(runs.values()))
        raise ArtifactError([f"journals of different runs (selection or options differ) cannot merge: {shown}; "
                             "merge the shards of one run"])
    problems = []
    for h, p in zip(headers, paths, strict=True):
        named = EvidenceKey.fields(h.evidence_key).get("gen")
        if named is not None and named != str(h.generation):
            problems.append(f"{p}: its header says generation {h.generation!r}, its evidence key gen={named}: "
                            "the journal was edited; probe again")
    keys = {h.evidence_key: p for h, p in zip(headers, paths, strict=True) if h.evidence_key}
    if len(keys) > 1:
        fields = [EvidenceKey.fields(k) for k in keys]
        differ = sorted(f for f in set().union(*fields) if len({d.get(f) for d in fields}) > 1)
        problems.append(f"journals measured on different evidence cannot merge (they differ in {', '.join(differ)}: "
                        f"{', '.join(sorted(keys.values()))}); merge the shards of one run on one kind of machine")
    if problems:
        raise ArtifactError(problems)



def merge(options: MergeOptions) -> ExitCode:
    """Join shard journals into DIR/journal.jsonl and build DIR/matrix.yaml from them."""
    from opmatrix.matrix.build import build_matrix
    from opmatrix.matrix.journal import dumps_records, merge_records
    from opmatrix.matrix.verbs import merge_backend, merge_evidence, merge_runtime
    from opmatrix.probes import rotate_journal as rotate

    out = check_out_path(options.out)
    refuse_inputs_as_outputs([("--out", out / JOURNAL), ("--out", out / "matrix.yaml")],
                             [("JOURNAL", path) for path in options.journals])
    scans = [scan_journal(path) for path in options.journals]
    _say([n for n in (s.note() for s in scans) if n])
    records = merge_records([s.records for s in scans])
    headers = [r for r in records if isinstance(r, JournalHeader)]
    if not headers:
        raise ArtifactError([f"{options.journals[0]}: no header line; a journal starts with a kind=header record"])
    _same_run([h for s in scans for h in s.headers], [str(s.path) for s in scans for _ in s.headers])
    backend = merge_backend(headers, _known_backend)
    with gc_paused():
        model = build_matrix(records, backend=backend, evidence=merge_evidence(headers), runtime=merge_runtime(headers))
    command = options.command_line()
    header = headers[0].model_copy(
        update={"planned": sum(h.planned for h in headers), "command": command, "started": model.evidence.started}
    )
    bodies = [r for r in records if not isinstance(r, JournalHeader)]
    with _claim(out, "journal", command, options.force):
        rotate(out / JOURNAL)  # the journal that was there stays as journal.jsonl.prev
        write_text_atomic(out / JOURNAL, dumps_records([header, *bodies]))
        dump_model(model, out / "matrix.yaml", command=command)
    print(
        f"merged {len(options.journals)} journal(s), {len(bodies)} record(s): {len(model.operators)} operators, "
        f"{model.cell_count()} cells, {len(model.skipped)} skipped task(s) -> {out / 'matrix.yaml'}"
    )
    return ExitCode.OK

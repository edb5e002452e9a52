"""Build a matrix from journal records: roll-up of repeated cells, then compression into entries.

::

    records = read_journal("out/refaccel-g2/journal.jsonl")
    model = build_matrix(records, backend=adapter.identity(), evidence=evidence, runtime=None)
    dump_model(model, "out/refaccel-g2/matrix.yaml", command="opmatrix probe ...")

The result depends on the *set* of records, never on their order: shard journals merged in any
order give the matrix of one unsharded run. Nothing is silently absent: a task that was skipped,
or that yielded no cell (e.g. it crashed before naming one), is listed in ``Matrix.skipped`` with
its reason.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Iterable

from opmatrix.schema import (
    BackendId,
    CellRecord,
    CellResult,
    DeviceOutcome,
    Evidence,
    JournalHeader,
    Matrix,
    Mode,
    Outcome,
    Runtime,
    RuntimeCheck,
    RuntimeRecord,
    TaskRecord,
    WorkloadRecord,
    WorkloadResult,
    cell_fault,
)

from .compress import GridPoint, compress_cells
from .journal import Record, read_journal
from .rollup import rollup
from .workloads import predict_fallback

__all__ = ["build_matrix", "collect_cells", "read_journal", "reproduction", "skip_reason"]

FullKey = tuple[str, Mode, GridPoint, tuple[tuple[str, str], ...]]


def skip_reason(task: TaskRecord) -> str | None:
    """Why a task contributes no cell (``None`` when it has cells and was not skipped)."""
    if task.skipped:
        return task.skipped
    if task.cells:
        return None
    if task.error is not None:
        return f"{task.outcome.value}: {task.error.type}: {task.error.message}"
    if task.outcome.value != "ok":
        return f"{task.outcome.value}: the task yielded no cell"
    return "the task yielded no cell"


def reproduction(backend: tuple[str, str | None] | None, source: str, dtype: str) -> str:
    """The one-line command that probes one task again: ``opmatrix probe --backend refaccel
    --generation g2 --ops mm --dtypes complex64``. ``backend``: the run's ``--backend`` and
    ``--generation`` as its journal header gives them; ``--ops`` takes the task's OpInfo name."""
    name, gen = backend if backend is not None else ("BACKEND", None)
    generation = f" --generation {shlex.quote(gen)}" if gen else ""
    return f"opmatrix probe --backend {shlex.quote(name)}{generation} --ops {shlex.quote(source)} --dtypes {dtype}"


def _reproducible(task: TaskRecord, result: CellResult, backend: tuple[str, str | None] | None) -> CellResult:
    """A faulted cell (:func:`~opmatrix.schema.cell_fault`) says how to reproduce it, in its note."""
    if cell_fault(result) is None:
        return result
    line = f"reproduce: {reproduction(backend, task.source, task.dtype.value)}"
    if result.note and line in result.note:
        return result
    return result.model_copy(update={"note": "; ".join(n for n in (result.note, line) if n)})


def _key(cell: CellRecord) -> FullKey:
    conditions = tuple(sorted(cell.result.conditions.items()))
    if cell.result.shapes is not None:  # static and dynamic compiled cells are two results, never rolled up
        conditions += ((SHAPES_KEY, cell.result.shapes.value),)
    return cell.op, cell.mode, (cell.dtype, cell.rank, cell.layout), conditions


#: where a compiled cell's shapes sit in its full key (not an argument name: none starts with a space)
SHAPES_KEY = " shapes"


def _device_results(task: TaskRecord, backend: tuple[str, str | None] | None = None
                    ) -> list[tuple[FullKey, CellResult]]:
    """The task's cells, each saying which device produced it; a cell that another device of the
    node ran differently (one right, one wrong: ``probe --devices`` cross-checks wrong cells) is
    *device-dependent*: its worst outcome stands, with each device's path, outcome and identity."""
    if task.device is None:
        return [(_key(c), _reproducible(task, c.result, backend)) for c in task.cells]
    others: dict[FullKey, list[tuple[str, str | None, CellResult]]] = defaultdict(list)
    for run in task.cross_checks:
        for c in run.cells:
            others[_key(c)].append((run.device, run.uuid, c.result))
    out = []
    for cell in task.cells:
        key, result = _key(cell), cell.result
        seen = [(task.device, task.device_uuid, result), *others.get(key, [])]
        outcomes = {r.outcome for _, _, r in seen}
        update: dict[str, object] = {"devices": sorted({d for d, _, _ in seen})}
        if outcomes == {Outcome.ok, Outcome.wrong}:
            worst = next(r for _, _, r in seen if r.outcome is Outcome.wrong)
            update["device_dependent"] = [DeviceOutcome(device=d, uuid=u, path=r.path, outcome=r.outcome)
                                          for d, u, r in sorted(seen, key=lambda s: s[0])]
            said = ", ".join(f"{d} {r.outcome.value}" for d, _, r in sorted(seen, key=lambda s: s[0]))
            result = worst
            update["note"] = "; ".join(n for n in (worst.note, f"device-dependent: {said}") if n)
        out.append((key, _reproducible(task, result.model_copy(update=update), backend)))
    return out


def collect_cells(tasks: Iterable[TaskRecord], backend: tuple[str, str | None] | None = None
                  ) -> dict[FullKey, CellResult]:
    """One rolled-up result per cell key (op, mode, (dtype, rank, layout), conditions); a faulted
    cell's note says how to reproduce it (``backend``: the run's --backend and --generation)."""
    found: dict[FullKey, list[CellResult]] = defaultdict(list)
    for task in tasks:
        for key, result in _device_results(task, backend):
            found[key].append(result)
    return {key: rollup(results) for key, results in found.items()}


def _runtime(given: Runtime | None, records: Iterable[RuntimeRecord]) -> Runtime:
    """``given`` completed by the runtime records (sorted by task id): what is given wins."""
    base = given or Runtime()
    checks: dict[str, RuntimeCheck] = {c.name: c for c in base.checks}
    devices = {d.index: d for d in base.devices}
    claimed = list(base.claimed_dtypes)
    capabilities = dict(base.capabilities)
    apis = {a.api: a for a in base.apis}
    for record in records:
        found = [record.check, *(record.runtime.checks if record.runtime else [])]
        for check in found:
            checks.setdefault(check.name, check)
        if record.runtime is None:
            continue
        for device in record.runtime.devices:
            devices.setdefault(device.index, device)
        claimed += [d for d in record.runtime.claimed_dtypes if d not in claimed]
        for name, value in record.runtime.capabilities.items():
            capabilities.setdefault(name, value)
        for api in record.runtime.apis:
            apis.setdefault(api.api, api)
    return Runtime(
        devices=[devices[i] for i in sorted(devices)],
        claimed_dtypes=claimed,
        capabilities=dict(sorted(capabilities.items())),
        checks=sorted(checks.values(), key=lambda c: (c.level, c.name)),
        apis=[apis[name] for name in sorted(apis)],
    )


def build_matrix(
    records: Iterable[Record],
    *,
    backend: BackendId,
    evidence: Evidence,
    runtime: Runtime | None = None,
) -> Matrix:
    """The schema :class:`~opmatrix.schema.Matrix` for ``records`` (headers are ignored here).

    Runtime data comes from ``runtime`` when given, completed by the journal's runtime records
    (their checks, devices, claimed dtypes, capabilities and API coverage; the given data wins).
    Task ids must be unique (:func:`read_journal` and ``merge_records`` make them so); a
    duplicate raises ``ValueError`` because keeping one of them would depend on record order.
    """
    tasks: dict[str, TaskRecord] = {}
    runtime_records: list[RuntimeRecord] = []
    workloads: list[WorkloadResult] = []
    header: JournalHeader | None = None
    for record in records:
        if isinstance(record, JournalHeader):
            header = header or record
        elif isinstance(record, TaskRecord):
            if record.task in tasks:
                raise ValueError(
                    f"task {record.task!r} appears twice; read journals with read_journal()/merge_records(), "
                    "which keep one record per task"
                )
            tasks[record.task] = record
        elif isinstance(record, RuntimeRecord):
            runtime_records.append(record)
        elif isinstance(record, WorkloadRecord):
            workloads.append(record.result)
        else:
            raise TypeError(f"not a journal record: {type(record).__name__}")
    skipped = {task_id: reason for task_id, task in tasks.items() if (reason := skip_reason(task)) is not None}
    skipped.update({f"{task_id} ranks": task.ranks_skipped for task_id, task in tasks.items() if task.ranks_skipped})
    # a faulted cell's reproduction names the backend as the run was asked for it (a plugin's
    # ``module:attr``, not the device name)
    cells = collect_cells(tasks.values(), (header.backend, header.generation) if header else (backend.name, backend.generation))
    not_run = {f"{task_id} {unit}": why for task_id, task in tasks.items() for unit, why in task.not_run.items()}
    operators = compress_cells(cells)
    return Matrix(
        backend=backend,
        evidence=evidence,
        runtime=_runtime(runtime, sorted(runtime_records, key=lambda r: r.task)),
        operators=operators,
        skipped=dict(sorted(skipped.items())),
        not_run=dict(sorted(not_run.items())),
        workloads=predict_fallback(sorted(workloads, key=lambda w: w.key()), operators),
    )

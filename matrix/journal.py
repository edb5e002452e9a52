"""Reading journals: the JSON-lines files the runner appends, one record per finished task.

A journal survives a killed run: the last line may be cut short, and a resumed run may append a
task again. Reading keeps what is complete and unique::

    records = read_journal("out/refaccel-g2/journal.jsonl")   # header(s), task and runtime records

- a last line that does not parse is a truncated write: dropped;
- any other malformed line is an :class:`~opmatrix.schema.ArtifactError` naming ``file:line`` and the fix;
- a task id seen twice keeps its last complete record (a resumed run re-ran it).

Several shard journals join with :func:`merge_records`, whose choice between two records of one
task never depends on the order the journals were given in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from opmatrix.schema import JournalHeader, Outcome, RuntimeRecord, TaskRecord, WorkloadRecord
from opmatrix.schema.journalfile import Record, scan_journal

__all__ = ["Record", "dumps_records", "merge_records", "read_journal"]


def _key(record: Record) -> tuple[str, str]:
    return (record.kind, "" if isinstance(record, JournalHeader) else record.task)


def read_journal(path: str | os.PathLike[str]) -> list[Record]:
    """The records of one journal: truncated last line dropped, duplicate task ids keep the last.

    The rules are those of :func:`opmatrix.schema.journalfile.scan_journal` (one reader for the
    runner and ``merge``); use it directly to learn whether a torn last line was dropped.
    """
    return scan_journal(path).records


def _preference(record: TaskRecord | RuntimeRecord | WorkloadRecord) -> tuple[int, int, int, str]:
    """Higher is preferred: a task that ran to the end, then more cells, then more attempts."""
    if isinstance(record, TaskRecord):
        finished = 1 if record.outcome is Outcome.ok and not record.skipped else 0
        return (finished, len(record.cells), record.attempts, record.model_dump_json())
    return (0, 0, 0, record.model_dump_json())


def merge_records(journals: Iterable[Sequence[Record]]) -> list[Record]:
    """Join the records of several journals (shards): headers kept, one record per task id.

    Within one journal the last record of a task wins (see :func:`read_journal`); between
    journals the preferred record wins (finished over faulted, more cells, more attempts, then
    content), so the result does not depend on the order of ``journals``. Records come back
    sorted: headers first, then by kind and task id.
    """
    headers: list[JournalHeader] = []
    chosen: dict[tuple[str, str], TaskRecord | RuntimeRecord | WorkloadRecord] = {}
    for records in journals:
        for record in records:
            if isinstance(record, JournalHeader):
                headers.append(record)
                continue
            key = _key(record)
            old = chosen.get(key)
            if old is None or _preference(record) > _preference(old):
                chosen[key] = record
    headers.sort(key=lambda h: h.model_dump_json())
    return [*headers, *(chosen[k] for k in sorted(chosen))]


def dumps_records(records: Iterable[Record]) -> str:
    """Journal text: one compact JSON object per line, defaults left out, keys sorted."""
    out = []
    for record in records:
        data = record.model_dump(mode="json", exclude_defaults=True)
        data["kind"] = record.kind
        out.append(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    return "".join(out)

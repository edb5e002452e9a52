"""The one reader of journal files (``journal.jsonl``), shared by the runner and ``opmatrix merge``.

A journal is one JSON record per line (:mod:`opmatrix.schema.journal`). Two rules, the same for
every reader::

    scan = scan_journal("out/refaccel-g2/journal.jsonl")
    scan.records      # header(s), then one record per task id (the last complete one wins)
    scan.torn         # True: the last line was a cut-off write (a killed run); it is dropped

- a **torn last line** (the last non-empty line does not parse as JSON) is what a killed run
  leaves behind: it is dropped and the caller says so (``scan.torn``, ``scan.note()``);
- a **corrupt line with intact lines after it** (not JSON, not an object, an unknown kind, or a
  record that does not validate) is not a cut-off write: :class:`ArtifactError` naming the file,
  the line and the fix. Nothing is silently skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import ValidationError

from .gcpause import gc_paused
from .io import ArtifactError
from .journal import JournalHeader, RuntimeRecord, TaskRecord
from .workloads import WorkloadRecord
from .yamlload import loads_json

__all__ = ["JournalScan", "Record", "parse_record", "scan_journal"]

Record: TypeAlias = JournalHeader | TaskRecord | RuntimeRecord | WorkloadRecord

_KINDS: dict[str, type[JournalHeader] | type[TaskRecord] | type[RuntimeRecord] | type[WorkloadRecord]] = {
    "header": JournalHeader,
    "task": TaskRecord,
    "runtime": RuntimeRecord,
    "workload": WorkloadRecord,
}


def _fix(path: str, number: int) -> str:
    return (f"remove line {number} from {path} (or move the journal aside and probe again without --resume); "
            "the lines after it are intact, so this is not a run cut short")


def parse_record(data: Any, where: str) -> Record:
    """Validate one decoded journal line; errors name ``where`` (``file:line``)."""
    if not isinstance(data, dict):
        raise ArtifactError([f"{where}: not a JSON object (a journal has one JSON record per line)"])
    kind = data.get("kind")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ArtifactError([f"{where}: unknown record kind {kind!r}; expected one of {', '.join(_KINDS)}"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "<record>"
        raise ArtifactError([f"{where}: {loc}: {first['msg']} ({len(exc.errors())} error(s) in this record)"]) from None


@dataclass
class JournalScan:
    """What one journal file holds."""

    path: Path
    headers: list[JournalHeader] = field(default_factory=list)
    #: (kind, task id) -> the last complete record of that task, and its line as written
    by_task: dict[tuple[str, str], Record] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)
    header_data: dict[str, Any] | None = None
    #: byte length of the complete, valid prefix (what a resume keeps)
    good_bytes: int = 0
    torn: bool = False

    @property
    def header(self) -> JournalHeader | None:
        """The first header: the run the journal belongs to."""
        return self.headers[0] if self.headers else None

    @property
    def records(self) -> list[Record]:
        """Header(s), then one record per task id."""
        return [*self.headers, *self.by_task.values()]

    def note(self) -> str | None:
        """What a reader should say about the file, or None."""
        if self.torn:
            return (f"note: {self.path}: dropped a cut-off last line (a write interrupted by a killed run); "
                    "that task runs again")
        return None


def _line_record(raw: bytes, where: str, fix: str, strict: bool) -> Record | dict[str, Any] | None:
    """The record on one line; None when the line is not JSON at all."""
    try:
        data = loads_json(raw.decode("utf-8"), where)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    try:
        if strict:
            return parse_record(data, where)
        if not isinstance(data, dict) or data.get("kind") not in _KINDS:
            raise ArtifactError([f"{where}: not a journal record (a JSON object with kind {', '.join(_KINDS)})"])
        if data["kind"] != "header" and not isinstance(data.get("task"), str):
            raise ArtifactError([f"{where}: a {data['kind']} record without a task id"])
        return data
    except ArtifactError as exc:
        raise ArtifactError([f"{exc.messages[0]}; {fix}"]) from None


@gc_paused()
def scan_journal(path: str | os.PathLike[str], *, strict: bool = True) -> JournalScan:
    """Read a journal under the two rules of this module; a missing file is an ArtifactError.

    ``strict`` validates every record against its model (``records``); otherwise lines only need
    to be JSON objects of a known kind with a task id (``lines``, ``header_data``), which is what
    the runner needs for its own task kinds.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ArtifactError([f"{p}: no such journal"]) from None
    except IsADirectoryError:
        raise ArtifactError([f"{p}: is a directory, expected a journal.jsonl file"]) from None
    scan = JournalScan(path=p)
    raw_lines = data.split(b"\n")
    last = max((i for i, raw in enumerate(raw_lines) if raw.strip()), default=-1)
    pos = 0
    for i, raw in enumerate(raw_lines):
        end = min(len(data), pos + len(raw) + 1)
        if raw.strip():
            where = f"{p}:{i + 1}"
            record = _line_record(raw, where, _fix(str(p), i + 1), strict)
            if record is None:
                if i == last:  # a killed run's last write: nothing after it, nothing lost before it
                    scan.torn = True
                    break
                raise ArtifactError([f"{where}: not JSON (a corrupt line in the middle of the journal); "
                                     f"{_fix(str(p), i + 1)}"])
            _add(scan, record, raw.decode("utf-8").strip())
        pos = end
        scan.good_bytes = end
    return scan


def _add(scan: JournalScan, record: Record | dict[str, Any], line: str) -> None:
    if isinstance(record, dict):
        if record["kind"] == "header":
            scan.header_data = scan.header_data or record
        else:
            scan.lines.pop(record["task"], None)
            scan.lines[record["task"]] = line
        return
    if isinstance(record, JournalHeader):
        scan.headers.append(record)
        scan.header_data = scan.header_data or json.loads(line)
        return
    key = (record.kind, record.task)
    scan.by_task.pop(key, None)  # keep the last one, at its own position
    scan.by_task[key] = record
    scan.lines.pop(record.task, None)
    scan.lines[record.task] = line

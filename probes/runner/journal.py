"""The runner's side of the journal: append one line per finished task, resume, reuse evidence.

``DIR/journal.jsonl`` starts with a :class:`~opmatrix.schema.JournalHeader` line, then one
record per finished task, each written and flushed before the next task is handed out. A killed
run leaves at most one cut-off last line, which :func:`open_for_resume` truncates away (the
rules are those of :mod:`opmatrix.schema.journalfile`, the one reader of the format)::

    {"kind":"header","backend":"cpu","planned":88,...}
    {"kind":"task","task":"add|float32","evidence_key":"3f1c...",...}

A fresh run moves an existing journal aside to ``journal.jsonl.prev`` (merged with the older
``.prev`` so nothing reusable is lost); records there whose evidence key matches a planned task
are copied instead of re-probed. The key hashes the torch build, the adapter's
backend/driver identity, the op-source hash, the probe code (handler and adapter sources) and
the task itself (:func:`task_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from opmatrix.schema.journalfile import scan_journal

from .progress import Progress
from .task import Task

__all__ = ["Journal", "JournalState", "OpenedJournal", "load_reusable", "open_for_resume", "open_run_journal", "rotate",
           "task_key"]

PREV_SUFFIX = ".prev"


def task_key(run_key: str, task: Task) -> str:
    """The evidence key of ``task`` under the run's key (torch build, backend, op source)."""
    text = json.dumps([run_key, task.kind, task.id, task.payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class JournalState:
    """What an existing journal holds: its header line and the complete record lines by task id."""

    #: the header as its JSON line (read, never re-validated: a rotated journal keeps it as it was)
    header: str | None = None
    records: dict[str, str] = field(default_factory=dict)
    dropped_tail: bool = False


def _scan(path: Path) -> tuple[JournalState, int]:
    """Parse ``path`` (the one journal reader's rules); returns the state and the byte length of
    its complete, valid prefix. A corrupt line in the middle is an ArtifactError naming the fix."""
    scan = scan_journal(path, strict=False)
    header = json.dumps(scan.header_data) if scan.header_data is not None else None
    state = JournalState(header=header, records=dict(scan.lines), dropped_tail=scan.torn)
    return state, scan.good_bytes


def open_for_resume(path: Path) -> JournalState:
    """Read ``path`` for ``--resume`` and cut off a torn last line so appends stay line-aligned."""
    if not path.exists():
        return JournalState()
    state, good = _scan(path)
    with path.open("r+b") as fh:
        fh.truncate(good)
        if good and (fh.seek(good - 1), fh.read(1))[1] != b"\n":
            fh.write(b"\n")  # a complete last record without its newline: terminate it
    return state


def load_reusable(out_dir: Path) -> tuple[dict[str, str], dict[str, float]]:
    """From the journal and its ``.prev`` in ``out_dir``: evidence key -> record line, and the
    seconds each task id took last time (for scheduling the longest first)."""
    found: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in ("journal.jsonl" + PREV_SUFFIX, "journal.jsonl"):  # newer wins
        path = out_dir / name
        if not path.exists():
            continue
        state, _ = _scan(path)  # a corrupt journal is named (exit 2), never silently dropped
        for task_id, line in state.records.items():
            record = json.loads(line)
            key = record.get("evidence_key")
            if isinstance(record.get("seconds"), (int, float)):
                seconds[task_id] = float(record["seconds"])
            # a fault (crash, hang, ...) may be transient: probe it again rather than keep it forever
            if key and record.get("outcome", "ok") in ("ok", "wrong"):
                found[key] = line
    return found, seconds


def rotate(path: Path) -> None:
    """Move ``path`` aside to ``path.prev``, keeping reusable records of an older ``.prev`` too.

    Both files are read under the journal rules first: a corrupt one stops the run (exit 2)
    before anything moves, so good records are never discarded silently.
    """
    if not path.exists():
        return
    prev = path.with_name(path.name + PREV_SUFFIX)
    merged: dict[str, str] = {}
    header: str | None = None
    for source in (prev, path):  # the newer journal wins per task
        if source.exists():
            state, _ = _scan(source)
            header = state.header or header
            merged.update(state.records)
    tmp = prev.with_name(prev.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            if header is not None:
                fh.write(header + "\n")
            for task_id in sorted(merged):
                fh.write(merged[task_id] + "\n")
        os.replace(tmp, prev)
    except BaseException:  # a full disk, an interrupt: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise
    path.unlink()


class Journal:
    """Appends complete lines to the journal, flushed one by one (a SIGKILL loses nothing)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    @property
    def empty(self) -> bool:
        """Whether nothing (not even a header) has been written yet."""
        return self._fh.tell() == 0

    def append(self, line: str) -> None:
        """Write one record line and flush it to the OS (survives a kill of this process)."""
        # one write call per complete line: an interrupt never leaves half a line in the buffer
        self._fh.write(line.rstrip("\n") + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Flush to disk (fsync) and close."""
        if self._fh.closed:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


@dataclass
class OpenedJournal:
    """A run's journal, opened: what it resumed, what may be reused, the tasks still to run."""

    journal: Journal
    #: the evidence key in the header of the journal resumed (None: a fresh journal, or none in it)
    resumed_key: str | None
    reusable: dict[str, str]
    progress: Progress
    resumed: int
    todo: list[Task]


def open_run_journal(path: Path, tasks: list[Task], *, resume: bool, workers: int, progress: bool) -> OpenedJournal:
    """Open (or resume) ``path`` for a run of ``tasks``, set up progress and reuse.

    The tasks still to run come longest first where an earlier run timed them (a long task
    started last idles the other workers); tasks never timed go first, in plan order."""
    state = open_for_resume(path) if resume else JournalState()
    if not resume:
        rotate(path)
    reusable, past_seconds = load_reusable(path.parent)
    shown = Progress(len(tasks), enabled=progress, workers=max(1, min(workers, len(tasks))),
                     expected={t.id: past_seconds[t.id] for t in tasks if t.id in past_seconds})
    planned_ids = {t.id for t in tasks}
    resumed = 0
    for task_id, line in state.records.items():
        if task_id in planned_ids:
            resumed += 1
            shown.add(json.loads(line), fresh=False)
    todo = [t for t in tasks if t.id not in state.records]
    todo.sort(key=lambda t: -past_seconds.get(t.id, float("inf")))
    key = json.loads(state.header).get("evidence_key") if state.header is not None else None
    return OpenedJournal(Journal(path), key if isinstance(key, str) else None, reusable, shown, resumed, todo)

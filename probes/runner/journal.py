"""The runner's side of the journal: append one line per finished task, resume, reuse evidence.

``DIR/journal.jsonl`` starts with a :class:`~opmatrix.schema.JournalHeader` line, then one
record per finished task, each written and flushed before the next task is handed out. A killed
run leaves at most one cut-off last line, which :func:`open_for_resume` truncates away::

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
from typing import IO, Any

from .task import Task

__all__ = ["Journal", "JournalState", "load_reusable", "open_for_resume", "rotate", "task_key"]

PREV_SUFFIX = ".prev"


def task_key(run_key: str, task: Task) -> str:
    """The evidence key of ``task`` under the run's key (torch build, backend, op source)."""
    text = json.dumps([run_key, task.kind, task.id, task.payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class JournalState:
    """What an existing journal holds: its header and the complete record lines by task id."""

    header: dict[str, Any] | None = None
    records: dict[str, str] = field(default_factory=dict)
    dropped_tail: bool = False


def _scan(path: Path) -> tuple[JournalState, int]:
    """Parse ``path``; returns the state and the byte length of its complete, valid prefix."""
    state = JournalState()
    good = 0
    with path.open("rb") as fh:
        data = fh.read()
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            state.dropped_tail = True  # a write cut short by a kill: no newline
            break
        line = data[pos:end].decode("utf-8", errors="replace").strip()
        try:
            obj = json.loads(line) if line else None
        except json.JSONDecodeError:
            obj = None
            if data.find(b"\n", end + 1) < 0 and not data[end + 1 :].strip():
                state.dropped_tail = True  # garbage only on the last line: a torn write
                break
            number = data.count(b"\n", 0, pos) + 1
            raise ValueError(f"{path}: line {number} is not JSON; fix or remove it") from None
        if isinstance(obj, dict):
            if obj.get("kind") == "header":
                state.header = state.header or obj
            elif isinstance(obj.get("task"), str):
                state.records[obj["task"]] = line
        pos = end + 1
        good = pos
    return state, good


def open_for_resume(path: Path) -> JournalState:
    """Read ``path`` for ``--resume`` and cut off a torn last line so appends stay line-aligned."""
    if not path.exists():
        return JournalState()
    state, good = _scan(path)
    if state.dropped_tail:
        with path.open("r+b") as fh:
            fh.truncate(good)
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
        try:
            state, _ = _scan(path)
        except ValueError:
            continue  # an unreadable old journal only costs re-probing
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
    """Move ``path`` aside to ``path.prev``, keeping reusable records of an older ``.prev`` too."""
    if not path.exists():
        return
    prev = path.with_name(path.name + PREV_SUFFIX)
    merged: dict[str, str] = {}
    header: dict[str, Any] | None = None
    for source in (prev, path):  # the newer journal wins per task
        if source.exists():
            try:
                state, _ = _scan(source)
            except ValueError:
                continue
            header = state.header or header
            merged.update(state.records)
    tmp = prev.with_name(prev.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        if header is not None:
            fh.write(json.dumps(header) + "\n")
        for task_id in sorted(merged):
            fh.write(merged[task_id] + "\n")
    os.replace(tmp, prev)
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

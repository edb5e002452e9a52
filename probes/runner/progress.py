"""Progress on stderr: a redrawn bar on a terminal, a plain line every few seconds otherwise.

    [=========>          ] 412/880 tasks  3120 cells  5.2 task/s  ETA 1m30s  native 2890 composite 180 | wrong 3 crashed 1

Counts come from the records themselves: op records expose ``cells[*].result.path`` and
``.outcome``; records without cells count their own outcome (runtime checks their result).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import IO, Any

from opmatrix.schema import BACKWARD_FAULTS, FaultOutcome
from opmatrix.schema.text import terminal_text

__all__ = ["Progress", "count_record"]

#: the ETA times the run's own pace once this many tasks per worker finished over PACE_SECONDS
PACE_TASKS = 2
PACE_SECONDS = 20.0
#: outcomes shown after the paths (``ok`` is implied by the paths)
_SHOWN_OUTCOMES = ("wrong", "error", "oom", "hung", "crashed", "poisoned")
#: faults of a cell's backward that are faults of the process: counted as the cell's fault (a
#: worker that died in a backward is a crash of the run, whatever the forward gave), as
#: :func:`opmatrix.schema.cell_fault` counts them in a matrix
_BACKWARD_FAULTS = frozenset(f.value for f in BACKWARD_FAULTS)
_FAULTS = frozenset(f.value for f in FaultOutcome)


def count_record(record: dict[str, Any]) -> tuple[Counter[str], Counter[str]]:
    """(paths, outcomes) counted over one record's cells, or over the record when it has none; a
    cell whose backward crashed, hung, poisoned the device or ran out of memory counts that fault
    too (so ``probe`` says so and exits 1)."""
    paths: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    cells = record.get("cells") or []
    for cell in cells:
        result = cell.get("result") or {}
        if "path" in result:
            paths[str(result["path"])] += 1
        if "outcome" in result:
            outcomes[str(result["outcome"])] += 1
        backward = (result.get("autograd") or {}).get("outcome")
        if backward in _BACKWARD_FAULTS and result.get("outcome") not in _FAULTS:
            outcomes[str(backward)] += 1
    if not cells:
        if record.get("kind") == "runtime":
            outcomes[f"check:{(record.get('check') or {}).get('result')}"] += 1
        elif record.get("outcome") is not None:
            outcomes[str(record["outcome"])] += 1
    return paths, outcomes


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """Tracks finished tasks and draws them; ``enabled=False`` keeps the counts silently."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        interval: float = 10.0,
        expected: Mapping[str, float] | None = None,
        workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``expected``: seconds an earlier run took per task id; with them the ETA weighs each
        task left by its own time (one long task can be most of a run) instead of the mean rate.

        Without them the ETA never counts the start-up (spawning workers, importing torch, loading
        OpInfo: a minute under load, when the first task is done): until enough tasks have
        finished to time the run's own pace (:data:`PACE_TASKS` per worker over
        :data:`PACE_SECONDS`), it is the mean time the finished tasks took, per worker."""
        self.total = total
        self.expected = dict(expected or {})
        self.workers = workers
        self._timed = [0.0, 0.0]  # (actual, expected) seconds of the fresh tasks that had a time
        self.done = 0
        self.fresh = 0  # finished by this run's workers (the rate counts only these)
        self.cells = 0
        self.paths: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        forced = os.environ.get("OPMATRIX_PROGRESS", "").strip().lower()
        self.tty = forced == "bar" or (forced != "lines" and self.stream.isatty())
        self.interval = 0.2 if self.tty else interval
        self.clock = clock
        self.start = clock()
        self._last = 0.0
        self._first: tuple[float, int] | None = None  # (when, fresh count) at the first fresh finish
        self._worked = [0.0, 0]  # seconds the fresh tasks' records say they took, and how many said

    def add(self, record: dict[str, Any], *, fresh: bool) -> None:
        """Count one finished record (``fresh``: probed now, not resumed or reused)."""
        self.done += 1
        self.fresh += int(fresh)
        if fresh and self._first is None:
            self._first = (self.clock(), self.fresh)
        took = record.get("seconds")
        if fresh and isinstance(took, (int, float)) and not isinstance(took, bool):
            self._worked[0] += float(took)
            self._worked[1] += 1
        before = self.expected.pop(str(record.get("task")), None)
        if fresh and before and isinstance(took, (int, float)):
            self._timed[0] += float(took)
            self._timed[1] += before
        paths, outcomes = count_record(record)
        self.cells += len(record.get("cells") or [])
        self.paths.update(paths)
        self.outcomes.update(outcomes)

    def _pace(self) -> float | None:
        """Seconds per task at this run's pace, start-up left out; None before any task finished."""
        if self._first is None:
            return None
        since, done_since = self.clock() - self._first[0], self.fresh - self._first[1]
        if since >= PACE_SECONDS and done_since >= PACE_TASKS * self.workers:
            return since / done_since  # the wall clock since the first finish: overheads included
        if self._worked[1]:
            return self._worked[0] / self._worked[1] / max(self.workers, 1)
        return None

    def line(self) -> str:
        """The status text (without the bar)."""
        pace = self._pace()
        rate = 1 / pace if pace else self.fresh / max(self.clock() - self.start, 1e-6)
        left = self.total - self.done
        eta = _duration(left * pace) if pace is not None and left else "-"
        if left and self.expected and self._timed[1] > 0:
            # the tasks left by their earlier times, scaled by how this run compares so far
            known = sum(self.expected.values())
            unknown = max(left - len(self.expected), 0) * known / len(self.expected)
            eta = _duration(self._timed[0] / self._timed[1] * (known + unknown) / max(self.workers, 1))
        paths = " ".join(f"{p} {n}" for p, n in sorted(self.paths.items()))
        faults = " ".join(f"{o} {self.outcomes[o]}" for o in _SHOWN_OUTCOMES if self.outcomes[o])
        text = f"{self.done}/{self.total} tasks  {self.cells} cells  {rate:.1f} task/s  ETA {eta}"
        if paths:
            text += f"  {paths}"
        if faults:
            text += f" | {faults}"
        return text

    def tick(self, *, final: bool = False) -> None:
        """Redraw (terminal) or print a line (log) when due; ``final`` always draws and ends the line."""
        if not self.enabled:
            return
        now = self.clock()
        if not final and now - self._last < self.interval:
            return
        self._last = now
        if self.tty:
            width = 20
            filled = int(width * self.done / self.total) if self.total else width
            bar = "=" * filled + (">" if filled < width else "") + " " * max(width - filled - 1, 0)
            self.stream.write(f"\r\x1b[K[{bar}] {self.line()}" + ("\n" if final else ""))
        else:
            self.stream.write(f"progress: {self.line()}\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """Print a message without garbling the bar."""
        if self.tty and self.enabled:
            self.stream.write("\r\x1b[K")
        # worker output and task ids come from the backend: never send their control characters
        self.stream.write(terminal_text(text.rstrip("\n")) + "\n")
        self.stream.flush()

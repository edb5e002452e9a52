"""The progress line: tasks done / total, cells, rate, ETA and counts per path and fault."""

from __future__ import annotations

import io

import pytest

from opmatrix.probes.runner.progress import Progress, count_record


def _cell(path: str, outcome: str) -> dict:
    return {"result": {"path": path, "outcome": outcome}}


def test_counts_cells_by_path_and_outcome() -> None:
    """Op records count their cells; runtime records their check result; cell-less tasks their outcome."""
    paths, outcomes = count_record({"kind": "task", "cells": [_cell("native", "ok"), _cell("fallback", "wrong")]})
    assert (dict(paths), dict(outcomes)) == ({"native": 1, "fallback": 1}, {"ok": 1, "wrong": 1})
    assert dict(count_record({"kind": "task", "outcome": "hung", "cells": []})[1]) == {"hung": 1}
    assert dict(count_record({"kind": "runtime", "check": {"result": "pass"}})[1]) == {"check:pass": 1}


def test_plain_lines_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs get whole lines (no carriage returns) with the counts a reader needs."""
    monkeypatch.delenv("OPMATRIX_PROGRESS", raising=False)
    out = io.StringIO()
    progress = Progress(4, stream=out)
    progress.add({"kind": "task", "cells": [_cell("native", "ok"), _cell("composite", "crashed")]}, fresh=True)
    progress.add({"kind": "task", "cells": [_cell("native", "ok")]}, fresh=False)
    progress.tick(final=True)
    text = out.getvalue()
    assert "\r" not in text and text.endswith("\n")
    assert "2/4 tasks  3 cells" in text and "composite 1 native 2" in text and "| crashed 1" in text
    assert "ETA" in text


def test_disabled_progress_prints_nothing() -> None:
    """--quiet: counts are kept, nothing is drawn."""
    out = io.StringIO()
    progress = Progress(1, enabled=False, stream=out)
    progress.add({"kind": "task", "cells": [_cell("native", "ok")]}, fresh=True)
    progress.tick(final=True)
    assert out.getvalue() == "" and progress.paths["native"] == 1


def test_eta_weighs_the_tasks_left_by_their_earlier_times() -> None:
    """One long task left is most of the run: the ETA says so, scaled by this run's pace."""
    progress = Progress(4, stream=io.StringIO(), expected={"a": 10.0, "b": 100.0, "c": 10.0}, workers=2)
    progress.add({"kind": "task", "task": "a", "seconds": 20.0, "cells": []}, fresh=True)  # 2x slower today
    # left: b (100 s) and c (10 s) known, d unknown (the known mean, 55 s): 2 x 165 s / 2 workers
    assert "ETA 2m45s" in progress.line()
    progress.add({"kind": "task", "task": "b", "seconds": 200.0, "cells": []}, fresh=True)
    assert "ETA 20s" in progress.line()  # 2 x (10 + 10) / 2


class _Clock:
    """A clock the test moves: the run's events happen at the times it says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _eta_seconds(line: str) -> float:
    text = line.split("ETA ")[1].split()[0]
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
    return total


def test_eta_leaves_out_the_start_up_and_settles_within_the_first_minute() -> None:
    """A minute of start-up, then 2 workers finishing a task each 2 s (1.6 s of it in the task's own
    record, the rest overhead): the first ETA is within a third of the truth (the old mean rate over
    the start-up read 1h30m for a 4-minute run) and within a tenth once a minute has passed"""
    clock, total = _Clock(), 240
    progress = Progress(total, stream=io.StringIO(), workers=2, clock=clock)
    assert "ETA -" in progress.line()  # nothing finished: no guess
    clock.now = 60.0
    errors = []
    for i in range(total - 1):
        clock.now = 60.0 + (i // 2 + 1) * 2.0  # pairs finish together every 2 s
        progress.add({"kind": "task", "task": f"t{i}", "seconds": 1.6, "cells": []}, fresh=True)
        truth = (total - progress.done) * 1.0  # a task a second on two workers
        if truth >= 20:  # the last seconds read in whole seconds
            errors.append((clock.now - 60.0, abs(_eta_seconds(progress.line()) - truth) / truth))
    assert errors[0][1] < 1 / 3, errors[:3]
    late = [e for t, e in errors if t >= 60.0]
    assert late and max(late) < 0.1, max(late)

"""Record a benchmark run as a row of its table in ``docs/benchmarks.md``.

Each benchmark owns one table on that page, under a heading with a marker comment
(``<!-- bench:NAME -->``). A row is: date (UTC), commit (``-dirty`` when the tree had changes),
machine (cores, memory, CPU model), load (1-minute load average at the start and at the end of the
run) and the figures the script printed. Scripts call :func:`record` when run with ``--record``::

    from benchdoc import Run            # bench/ is on sys.path when a bench script runs
    run = Run("bench_yaml")             # samples the load at the start
    ...
    run.record({"parse C": "5.9 s", "parse py": "22.9 s", "ratio": "3.9x"})

A benchmark whose table does not exist yet gets one appended at the end of the page. Rows are
added, never rewritten: the table is the benchmark's history.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from opmatrix.probes.perf.environment import host_cpu

__all__ = ["Run", "record", "DOC"]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
_HEADER = "| date (UTC) | commit | machine | load (start -> end) | figures |"
_RULE = "|---|---|---|---|---|"


def _commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    return "? GiB"


def machine() -> str:
    """Cores, memory and CPU model of this machine, for the machine column."""
    return f"{os.cpu_count()} cores, {_memory_gib()}, {host_cpu()}"


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def record(name: str, figures: Mapping[str, str], *, load_start: float | None = None,
           doc: Path = DOC, when: _dt.datetime | None = None) -> str:
    """Append one row to benchmark ``name``'s table in ``doc``; returns the row."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"benchmark name {name!r}: letters, digits, '_', '.', '-' only")
    when = when or _dt.datetime.now(_dt.timezone.utc)
    start = _load() if load_start is None else load_start
    row = "| " + " | ".join([
        when.strftime("%Y-%m-%d %H:%M"), _commit(), _cell(machine()), f"{start:.1f} -> {_load():.1f}",
        _cell("; ".join(f"{k}: {v}" for k, v in figures.items())),
    ]) + " |"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    marker = f"<!-- bench:{name} -->"
    if marker in lines:
        i = lines.index(marker) + 1
        while i < len(lines) and not lines[i].startswith("|"):
            i += 1
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        lines.insert(i, row)
    else:
        lines += ["", f"## {name}", "", marker, "", _HEADER, _RULE, row]
    doc.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    return row


class Run:
    """One run of a benchmark: samples the load at the start, records a row at the end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.load_start = _load()

    def record(self, figures: Mapping[str, str], doc: Path = DOC) -> str:
        row = record(self.name, figures, load_start=self.load_start, doc=doc)
        print(f"recorded in {doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}: {row}")
        return row

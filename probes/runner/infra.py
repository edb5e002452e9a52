"""Infrastructure faults: a worker's death that the machine caused is the run's error, never a cell's.

A worker that dies (or whose unit fails) because the disk filled up, or that the kernel's OOM
killer ended, says nothing about the unit it was running. Before blaming a unit, the runner asks
:func:`infrastructure_cause` about the worker's own last words and the machine::

    cause = infrastructure_cause(tail, "SIGKILL", [out_dir, tempfile.gettempdir()], watch)
    # 'the disk is full: only 3 MiB free in /tmp (a worker's last output: OSError: [Errno 28] ...)'

A cause stops the run (:class:`InfrastructureFailure`: exit 2, the journal kept as it is, so
``--resume`` finishes the run once the machine is fixed); without one, the fault is the unit's.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

__all__ = ["INFRA_ERRNOS", "LOW_DISK_BYTES", "InfrastructureFailure", "MemoryWatch", "check_infrastructure",
           "infrastructure_cause", "io_cause", "run_folders"]

#: free bytes below which a folder the run writes in counts as full
LOW_DISK_BYTES = 32 << 20
#: errors of a write that mean the machine, not the code: no space, quota, file size limit, read-only or failing disk
INFRA_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})
#: how those errors read in a worker's last output (Python's OSError, C's strerror)
_ERRNOS = "|".join(str(e) for e in sorted(INFRA_ERRNOS))
_WORDS = re.compile(rf"No space left on device|Disk quota exceeded|File too large|Read-only file system|\[Errno (?:{_ERRNOS})\]")


class InfrastructureFailure(Exception):
    """The machine failed the run (a full disk, the OOM killer): exit 2 naming the cause; ``--resume`` continues."""


def io_cause(exc: OSError, what: str) -> str | None:
    """The cause when writing ``what`` failed for a reason of the machine's (see :data:`INFRA_ERRNOS`)."""
    if exc.errno not in INFRA_ERRNOS:
        return None
    return f"cannot write {what}: {exc.strerror or exc}"


def _oom_kills() -> int | None:
    """The kernel's OOM kills in this cgroup so far (cgroup v2 ``memory.events``), None when unknown."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        found = re.search(r"^oom_kill (\d+)$", text, re.M)
        if found:
            return int(found.group(1))
    return None


def _available_memory() -> tuple[int, int] | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    values = {m.group(1): int(m.group(2)) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB$", text, re.M)}
    if "MemAvailable" not in values or "MemTotal" not in values:
        return None
    return values["MemAvailable"], values["MemTotal"]


class MemoryWatch:
    """The OOM killer's count when the run started: a later kill of a worker is the machine's doing."""

    def __init__(self) -> None:
        self.kills = _oom_kills()

    def cause(self, signal_name: str | None) -> str | None:
        """Why a worker's death by ``signal_name`` was the host's memory, or None."""
        if signal_name != "SIGKILL":
            return None
        now = _oom_kills()
        if now is not None and self.kills is not None and now > self.kills:
            return (f"the kernel's OOM killer ended a worker (oom_kill went from {self.kills} to {now} in this "
                    "cgroup): the host ran out of memory; give the job more memory or run fewer --workers")
        memory = _available_memory()
        if memory is not None and memory[0] < memory[1] // 50:
            return (f"a worker was killed while the host had {memory[0] >> 20} MiB of {memory[1] >> 20} MiB memory "
                    "available: the host ran out of memory; give the job more memory or run fewer --workers")
        return None


def _low_disk(folders: list[Path]) -> str | None:
    for folder in folders:
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue
        if free < LOW_DISK_BYTES:
            return f"only {free >> 20} MiB free in {folder}"
    return None


def infrastructure_cause(last_words: str, signal_name: str | None, folders: list[Path],
                         watch: MemoryWatch | None = None) -> str | None:
    """Why a worker's death or failure was the machine's fault (None: the unit is to blame).

    ``last_words``: its exit message and output tail (or the exception it reported);
    ``folders``: where the run writes (the output folder, the temporary folder)."""
    said = _WORDS.search(last_words)
    low = _low_disk(folders)
    if said or low:
        line = next((ln.strip() for ln in last_words.splitlines() if said and said.group(0) in ln), "")
        parts = [p for p in (low, f"a worker's last output: {line[:200]}" if line else "") if p]
        return f"the disk is full or cannot be written ({'; '.join(parts)}): free space and continue with --resume"
    return watch.cause(signal_name) if watch is not None else None


def check_infrastructure(last_words: str, signal_name: str | None, out_dir: Path, watch: MemoryWatch | None) -> None:
    """Raise :class:`InfrastructureFailure` when the machine, not the unit, ended a worker (see above)."""
    cause = infrastructure_cause(last_words, signal_name, run_folders(out_dir), watch)
    if cause is not None:
        raise InfrastructureFailure(cause)


def run_folders(out_dir: Path) -> list[Path]:
    """The folders a run writes in: its output folder and the temporary folder its workers use."""
    import tempfile

    return [out_dir, Path(os.environ.get("TMPDIR") or tempfile.gettempdir())]

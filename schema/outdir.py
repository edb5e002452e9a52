"""Ownership of an output directory: one writer at a time, and only into directories that are ours.

``probe``, ``merge`` and ``report`` write whole directories. Each marks its directory with
``.opmatrix`` (which verb family owns it) and holds ``.opmatrix.lock`` (pid and command) while it
writes::

    with claim_dir("out/refaccel-g2", kind="journal", command="opmatrix probe ...", force=False) as note:
        ...  # a second writer gets UsageError naming this pid and command (exit 2)

- a directory that is not empty and carries no marker of this kind is refused unless ``force``;
- a lock left by a process that is gone is taken over, and said (``claim.notes``);
- ``--out /`` (a file-system root) is always refused;
- a directory this claim created is removed again when the claim fails before anything is written
  (:meth:`DirClaim.abandon`), so invalid input leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from types import TracebackType

from .io import UsageError

__all__ = ["DirClaim", "LOCK_FILE", "MARKER_FILE", "claim_dir", "check_out_path", "pid_alive"]

MARKER_FILE = ".opmatrix"
LOCK_FILE = ".opmatrix.lock"
#: files a directory written before markers existed may hold, per kind (accepted without --force)
_LEGACY = {
    "journal": {"journal.jsonl", "journal.jsonl.prev", "matrix.yaml", "workers", "identity.json"},
    "site": {"index.html", "diff.html", "ops", "static"},
}
#: the file such an older output always has
_LEGACY_SIGN = {"journal": "journal.jsonl", "site": "index.html"}


def check_out_path(out: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``out`` as a Path, refusing a file-system root and an existing non-directory (UsageError)."""
    path = Path(out)
    resolved = path.resolve()
    if resolved == Path(resolved.anchor):
        raise UsageError(f"{flag} {str(out)!r} is a file-system root; name a directory of its own, e.g. {flag} out/run")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {str(out)!r} is a file, not a directory; choose another {flag}")
    return path


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie counts as gone; one we may not signal as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


class DirClaim:
    """A held claim on an output directory (see :func:`claim_dir`)."""

    def __init__(self, path: Path, kind: str, command: str, force: bool):
        self.path, self.kind, self.command, self.force = path, kind, command, force
        self.created = False
        self.notes: list[str] = []
        self._locked = False

    # -- acquiring ----------------------------------------------------------------------------

    def acquire(self) -> DirClaim:
        """Create the directory if needed, take the lock, check ownership; UsageError if not ours."""
        check_out_path(self.path)
        if not self.path.exists():
            self.path.mkdir(parents=True)
            self.created = True
        self._lock()
        try:
            self._check_owner()
        except BaseException:
            self.release()
            raise
        (self.path / MARKER_FILE).write_text(json.dumps({"kind": self.kind}) + "\n", encoding="utf-8")
        return self

    def _lock(self) -> None:
        lock = self.path / LOCK_FILE
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command})
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._stale_or_busy(lock)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(body + "\n")
            self._locked = True
            return
        raise UsageError(f"{self.path}: could not take {LOCK_FILE}; another writer took it meanwhile, retry")

    def _stale_or_busy(self, lock: Path) -> None:
        try:
            holder = json.loads(lock.read_text(encoding="utf-8"))
            pid = int(holder["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            holder, pid = {}, -1
        same_host = holder.get("host") in (None, socket.gethostname())
        if pid > 0 and (not same_host or pid_alive(pid)):
            raise UsageError(
                f"{self.path} is being written by pid {pid} on {holder.get('host', '?')} "
                f"({holder.get('command') or 'unknown command'}); wait for it to finish or choose another --out"
            )
        lock.unlink(missing_ok=True)
        why = f"pid {pid} is gone" if pid > 0 else "it was unreadable"
        self.notes.append(f"note: took over a stale lock in {self.path} ({why})")

    def _check_owner(self) -> None:
        marker = self.path / MARKER_FILE
        owner = None
        if marker.exists():
            try:
                owner = json.loads(marker.read_text(encoding="utf-8")).get("kind")
            except (OSError, ValueError, AttributeError):
                owner = "?"
        if owner == self.kind or self.force:
            return
        others = sorted(p.name for p in self.path.iterdir() if p.name not in (MARKER_FILE, LOCK_FILE))
        legacy = set(others) <= _LEGACY.get(self.kind, set()) and _LEGACY_SIGN.get(self.kind) in others
        if owner is None and (not others or legacy):
            return  # empty, or what an older opmatrix wrote here
        what = f"was written by another opmatrix verb ({owner})" if owner else "is not an opmatrix output directory"
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise UsageError(f"{self.path} {what} and is not empty ({shown}); choose an empty --out, or pass --force "
                         "to write into it anyway")

    # -- releasing ----------------------------------------------------------------------------

    def release(self) -> None:
        """Drop the lock (and the directory, when this claim created it and nothing else was written)."""
        if self._locked:
            (self.path / LOCK_FILE).unlink(missing_ok=True)
            self._locked = False

    def abandon(self) -> None:
        """Release, and remove the directory if this claim created it and it holds only our marker."""
        self.release()
        if self.created:
            (self.path / MARKER_FILE).unlink(missing_ok=True)
            try:
                self.path.rmdir()
            except OSError:
                pass

    def __enter__(self) -> DirClaim:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def claim_dir(out: str | os.PathLike[str], *, kind: str, command: str, force: bool = False) -> DirClaim:
    """Lock ``out`` for writing as ``kind`` (``journal`` or ``site``); see the module docstring."""
    return DirClaim(Path(out), kind, command, force).acquire()

"""The two file rules every package shares: where caches live, and how files are replaced.

Caches only ever save time, so every reader treats a missing or broken entry as a miss. One root
holds all of them, one folder per kind::

    >>> import os; os.environ["OPMATRIX_CACHE_DIR"] = "/tmp/c"  # would change this process's environment: not run  # doctest: +SKIP
    >>> cache_dir("matrices")  # would change this process's environment: not run  # doctest: +SKIP
    PosixPath('/tmp/c/matrices')

The root is ``$OPMATRIX_CACHE_DIR``, else ``$XDG_CACHE_HOME/opmatrix``, else
``~/.cache/opmatrix``; ``OPMATRIX_NO_CACHE=1`` turns every cache off (``cache_dir`` is None; ``0``,
``false``, ``no`` or ``off`` leave it on).
Artifacts and cache entries are written atomically: a reader sees the old file or the new one,
never half of one, and an unchanged file is not rewritten. A path that is not a regular file (a
terminal, a FIFO) or that leads into ``/dev`` or ``/proc`` (``/dev/stdout``, ``/dev/fd/1``, a link
to ``/proc/self/fd/1``) is written in place, as a stream, never renamed over (:func:`is_stream`);
``-`` is standard output. Cache entries are read only as bounded regular files
(:func:`read_cache_entry`): a shared cache whose entry is a FIFO or a link to ``/dev/zero`` costs
a rebuild, never a hang. No temporary file outlives a failed write (a full disk, an interrupt). An output
that is one of the command's own inputs (the same file, by inode) is refused before any work
(:func:`refuse_inputs_as_outputs`).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .yamlload import ArtifactError

__all__ = ["CACHE_ENTRY_LIMIT", "cache_dir", "is_stream", "read_cache_entry", "read_cache_json", "refuse_inputs_as_outputs",
           "refuse_unwritable", "say_cache_miss", "write_bytes_atomic", "write_cache_entry", "write_output", "write_text_atomic"]

#: the output path that means standard output
STDOUT = "-"


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether an output at ``path`` is written in place, as a stream, never renamed over.

    That is ``-``; any path that is or leads (through links, at any depth) into ``/dev`` or
    ``/proc`` (``/dev/stdout``, ``/dev/fd/1``, a link to ``/proc/self/fd/1``: with stdout redirected
    to a file those resolve to that file, which a rename would cut off from the stream); a target
    that is not a regular file or a folder (a terminal, a FIFO, a socket); the very file standard
    output or error is open on; and a regular file whose folder this process cannot write in.
    """
    return _output_target(path)[0]


#: folders whose entries are the system's own nodes: written in place, never renamed over
_SPECIAL_ROOTS = ("/dev", "/proc")


def _special(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in _SPECIAL_ROOTS)


def _std_identities() -> set[tuple[int, int]]:
    out = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _output_target(path: str | os.PathLike[str]) -> tuple[bool, Path]:
    """(written in place, the file a rename would replace): links are followed, so a link to a
    regular file keeps being a link and its target is the file replaced."""
    if os.fspath(path) == STDOUT:
        return True, Path(STDOUT)
    current = os.path.abspath(os.fspath(path))
    for _ in range(40):  # a longer chain is a loop: the write itself then fails with ELOOP
        if _special(current):
            return True, Path(current)
        folder = os.path.realpath(os.path.dirname(current))
        current = os.path.join(folder, os.path.basename(current))
        if _special(current):
            return True, Path(current)
        try:
            st = os.lstat(current)
        except (OSError, ValueError):
            return False, Path(current)  # a new file (or one the write will name in its error)
        if not stat.S_ISLNK(st.st_mode):
            break
        current = os.path.normpath(os.path.join(folder, os.readlink(current)))
    else:
        return False, Path(current)
    if stat.S_ISDIR(st.st_mode):
        return False, Path(current)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in _std_identities():
        return True, Path(current)
    return not os.access(folder, os.W_OK | os.X_OK), Path(current)


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def refuse_inputs_as_outputs(outputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
                             inputs: Iterable[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """:class:`ArtifactError` when an output is one of the inputs (same file, by inode) or another output.

    ``outputs`` and ``inputs`` are (option, path) pairs, e.g. ``("--junit", "c.yaml")``; a None
    path is an option not given. Checked before any work, so nothing is judged, written or lost.
    """
    seen: dict[tuple[int, int], str] = {}
    for option, source in inputs:
        ident = _identity(source) if source is not None else None
        if source is not None and ident is not None:
            seen.setdefault(ident, f"{option} {os.fspath(source)!r}")
    problems = []
    written: dict[str, str] = {}
    for option, path in outputs:
        if path is None or is_stream(path):
            continue
        ident = _identity(path)
        if ident is not None and ident in seen:
            problems.append(f"{option} {os.fspath(path)!r} is the same file as {seen[ident]}: writing it would destroy "
                            "an input; name another output file")
        real = os.path.realpath(path)
        if real in written:
            problems.append(f"{option} {os.fspath(path)!r} is also {written[real]}: give each output its own file")
        written[real] = f"{option} {os.fspath(path)!r}"
    if problems:
        raise ArtifactError(problems)


def refuse_unwritable(outputs: Iterable[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """:class:`ArtifactError` naming each output file that cannot be written (a folder, a missing
    or read-only folder), checked before any is written: one that fails leaves no other half-made."""
    problems = [f"{option} {os.fspath(path)!r}: {why}" for option, path in outputs
                if path is not None and not is_stream(path) and (why := _unwritable(path))]
    if problems:
        raise ArtifactError(problems)


def _unwritable(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (checked before any output is written, so that
    one output that cannot be written leaves no other half-made), or None."""
    target = Path(path)
    if target.is_dir():
        return "is a folder; name a file"
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.exists():
        return f"the folder {str(parent)!r} does not exist"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write in the folder {str(parent)!r}"
    return None



def cache_dir(kind: str) -> Path | None:
    """The folder for caches of ``kind`` (``matrices``, ``opinfo``, ``overloads``), or None when off."""
    if os.environ.get("OPMATRIX_NO_CACHE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return None  # "1", "true", "yes", "on" (the probe refuses any other value: probes/runner/settings.py)
    root = os.environ.get("OPMATRIX_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "opmatrix")
    return Path(root) / kind


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, sync: bool = True, cache: bool = False) -> bool:
    """Write ``data`` to ``path`` atomically (temporary file + rename), only when it differs.

    Returns True when the file was written. The new file gets the usual mode (0666 less the
    umask), not mkstemp's 0600; parent folders are created. A stream (:func:`is_stream`) is
    written in place; a link to a regular file stays a link and its target is replaced.
    ``cache=True`` is for cache entries: whatever sits at ``path`` (a FIFO, a link) is replaced,
    never written through, and there is no ``fsync`` before the rename: after a power cut an
    entry may be empty or torn, which its reader takes for a miss.
    """
    in_place, target = (False, Path(path)) if cache else _output_target(path)
    if in_place:  # a terminal, /dev/stdout, a FIFO: write in place; renaming would replace the node
        with open(target, "wb") as stream:
            stream.write(data)
        return True
    old = read_cache_entry(target, quiet=True) if cache else _read_regular(target)
    if old == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync and not cache:
                os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _read_regular(target: Path) -> bytes | None:
    try:
        return target.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


# -- cache entries ---------------------------------------------------------------------------

#: the largest cache entry read (a validated matrix of every OpInfo is a few tens of MB)
CACHE_ENTRY_LIMIT = 512 << 20
_SAID: set[str] = set()


def say_cache_miss(path: str | os.PathLike[str], why: str) -> None:
    """Say once (per path and reason) on stderr that a cache entry is ignored, and why (a rebuilt entry costs time only)."""
    key = f"{os.fspath(path)}\0{why}"
    if key in _SAID:
        return
    _SAID.add(key)
    print(f"opmatrix: cache entry {os.fspath(path)} {why}: ignored (a miss; it is rebuilt)", file=sys.stderr)


def read_cache_entry(path: str | os.PathLike[str], *, limit: int = CACHE_ENTRY_LIMIT, quiet: bool = False) -> bytes | None:
    """The bytes of a cache entry, or None for a miss; never blocks, never reads without bound.

    Caches are shared (a CI cache restored between jobs), so an entry is read only when it is a
    regular file of at most ``limit`` bytes, opened without following a link: a FIFO would block
    the reader, a link to ``/dev/zero`` would be read forever, a link can lead out of the cache.
    Anything else is a miss, said once per path on stderr (unless ``quiet``); a missing entry is a
    plain miss. The caller checks the content (JSON of the expected shape) and rebuilds on a miss.
    """
    target = Path(path)
    why = _unreadable_entry(target, limit)
    if why is None:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = f"cannot be opened ({exc.strerror or exc})"
        else:
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())  # the node opened, not the one looked at (it may have been swapped)
                why = _entry_kind(st.st_mode, st.st_size, limit)
                data = fh.read(limit + 1) if why is None else b""
            if why is None and len(data) > limit:
                why = f"is over {limit} bytes"
            if why is None:
                return data
    if why and not quiet:
        say_cache_miss(target, why)
    return None


def _unreadable_entry(target: Path, limit: int) -> str | None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return _entry_kind(st.st_mode, st.st_size, limit)


def _entry_kind(mode: int, size: int, limit: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "is a symbolic link, not a file the cache wrote"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a regular file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, a socket or a folder)"
    if size > limit:
        return f"is over {limit} bytes"
    return None


def read_cache_json(path: str | os.PathLike[str], *, limit: int = CACHE_ENTRY_LIMIT) -> object | None:
    """A cache entry parsed as JSON, or None for a miss (said once when the entry is there but not JSON)."""
    import json

    data = read_cache_entry(path, limit=limit)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        say_cache_miss(Path(path), "is not valid JSON")
        return None


def write_cache_entry(path: str | os.PathLike[str], text: str) -> bool:
    """Store a cache entry atomically, replacing whatever is at ``path``; False when the cache
    cannot be written (a read-only or full disk): a cache only ever saves time."""
    try:
        return write_bytes_atomic(path, text.encode("utf-8"), cache=True)
    except OSError:
        return False


def write_text_atomic(path: str | os.PathLike[str], text: str, *, sync: bool = True) -> bool:
    """Write UTF-8 ``text`` to ``path`` atomically, only when it differs; True when written."""
    return write_bytes_atomic(path, text.encode("utf-8"), sync=sync)


def write_output(path: str | os.PathLike[str], text: str) -> None:
    """An output a user named: ``-`` is standard output, a device or FIFO is streamed, a file replaced atomically."""
    if os.fspath(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(path, text)

"""The two file rules every package shares: where caches live, and how files are replaced.

Caches only ever save time, so every reader treats a missing or broken entry as a miss. One root
holds all of them, one folder per kind::

    >>> import os; os.environ["OPMATRIX_CACHE_DIR"] = "/tmp/c"  # would change this process's environment: not run  # doctest: +SKIP
    >>> cache_dir("matrices")  # would change this process's environment: not run  # doctest: +SKIP
    PosixPath('/tmp/c/matrices')

The root is ``$OPMATRIX_CACHE_DIR``, else ``$XDG_CACHE_HOME/opmatrix``, else
``~/.cache/opmatrix``; ``OPMATRIX_NO_CACHE=1`` turns every cache off (``cache_dir`` is None).
Artifacts and cache entries are written atomically: a reader sees the old file or the new one,
never half of one, and an unchanged file is not rewritten. A path that is not a regular file (a
terminal, ``/dev/stdout``, a FIFO) is written in place, as a stream, never renamed over; ``-`` is
standard output. No temporary file outlives a failed write (a full disk, an interrupt). An output
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

__all__ = ["cache_dir", "is_stream", "refuse_inputs_as_outputs", "refuse_unwritable", "write_bytes_atomic", "write_output",
           "write_text_atomic"]

#: the output path that means standard output
STDOUT = "-"


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``-`` or an existing file that is not a regular file or a folder (a device, a FIFO)."""
    if os.fspath(path) == STDOUT:
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


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
    if os.environ.get("OPMATRIX_NO_CACHE", "") not in ("", "0"):
        return None
    root = os.environ.get("OPMATRIX_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "opmatrix")
    return Path(root) / kind


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, sync: bool = True) -> bool:
    """Write ``data`` to ``path`` atomically (temporary file + rename), only when it differs.

    Returns True when the file was written. The new file gets the usual mode (0666 less the
    umask), not mkstemp's 0600; parent folders are created. ``sync=False`` skips the ``fsync``
    before the rename, for cache entries: after a power cut one may be empty or torn, which its
    reader takes for a miss.
    """
    target = Path(path)
    if is_stream(target):  # a terminal, /dev/stdout, a FIFO: write in place; renaming would replace the node
        with open(target, "wb") as stream:
            stream.write(data)
        return True
    try:
        if target.read_bytes() == data:
            return False
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


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

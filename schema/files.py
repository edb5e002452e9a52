"""The two file rules every package shares: where caches live, and how files are replaced.

Caches only ever save time, so every reader treats a missing or broken entry as a miss. One root
holds all of them, one folder per kind::

    >>> import os; os.environ["OPMATRIX_CACHE_DIR"] = "/tmp/c"                # doctest: +SKIP
    >>> cache_dir("matrices")                                                 # doctest: +SKIP
    PosixPath('/tmp/c/matrices')

The root is ``$OPMATRIX_CACHE_DIR``, else ``$XDG_CACHE_HOME/opmatrix``, else
``~/.cache/opmatrix``; ``OPMATRIX_NO_CACHE=1`` turns every cache off (``cache_dir`` is None).
Artifacts and cache entries are written atomically: a reader sees the old file or the new one,
never half of one, and an unchanged file is not rewritten.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "write_bytes_atomic", "write_text_atomic"]


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

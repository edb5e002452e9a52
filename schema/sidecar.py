"""A content-addressed cache of validated artifacts, so that loading a large matrix stays fast.

Parsing YAML is the slow part of loading a matrix (even with libyaml, every node passes through
Python), while validating the same data from JSON takes pydantic's Rust core a few tens of
milliseconds. The YAML file stays the artifact of record; after a strict load, the validated
model is also kept as JSON under a key made of

- the SHA-256 of the YAML file's bytes (an edited file never hits a stale entry), and
- a hash of the schema package's source and the opmatrix version (a schema change misses),

like ``__pycache__`` for a module. The cache never decides on its own: only a sealed matrix is
kept, and its entry is the integrity block followed by the canonical JSON of the content that the
block's digest covers. A hit re-checks the entry against the YAML's own ``integrity`` (read from
the YAML text: the same counts and digest) and re-hashes the entry's content against that digest
(SHA-256 of a few MB: milliseconds, not the quarter second of dumping the model again); any
mismatch (a forged or stale entry in a CI cache shared across jobs) is a miss, and the strict load
rewrites the entry. An unsealed matrix is never cached. Location: ``matrices/`` under
:func:`opmatrix.schema.files.cache_dir`'s root; ``OPMATRIX_NO_CACHE=1`` turns it off. A cache that cannot be written (read-only home) is
skipped: it only ever saves time. Every reader of a matrix (``Matrix.load``, the gate, reports,
``validate``, ``diff``) goes through ``load_matrix`` and so through this cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .files import cache_dir, read_cache_entry, write_cache_entry
from .matrix import DIGEST_VERIFIED
from .version import __version__

__all__ = ["entry_text", "load_cached", "remember", "yaml_seal"]

#: the integrity block as every writer dumps it (sorted keys, block style) at the top level of the YAML
_SEAL = re.compile(rb"^integrity:\n  cells: (\d+)\n  digest: (sha256:[0-9a-f]{64})\n  operators: (\d+)$", re.M)


def yaml_seal(data: bytes) -> tuple[int, str, int] | None:
    """(cells, digest, operators) of the integrity block written at the top level of matrix YAML bytes.

    None when there is none, or more than one line that looks like one (then the strict load decides).
    """
    found = _SEAL.findall(data)
    if len(found) != 1:
        return None
    cells, digest, operators = found[0]
    return int(cells), digest.decode(), int(operators)


def _prefix(seal: tuple[int, str, int]) -> str:
    cells, digest, operators = seal
    return f'{{"integrity":{{"cells":{cells},"digest":"{digest}","operators":{operators}}},'


def _content_digest(canonical: str) -> str:
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def entry_text(seal: tuple[int, str, int], canonical: str) -> str | None:
    """The cache entry for a sealed matrix: its seal, then the canonical JSON of its content.

    None when ``canonical`` is not the content the seal's digest covers (nothing is stored then).
    """
    if not canonical.startswith("{") or canonical == "{}" or _content_digest(canonical) != seal[1]:
        return None
    return _prefix(seal) + canonical[1:]


def _verified(entry: str, seal: tuple[int, str, int]) -> bool:
    """Whether ``entry`` carries exactly the YAML's seal and content that hashes to its digest."""
    prefix = _prefix(seal)
    return entry.startswith(prefix) and _content_digest("{" + entry[len(prefix):]) == seal[1]

M = TypeVar("M", bound=BaseModel)


@functools.lru_cache(maxsize=8)
def _schema_tag(model: type[BaseModel]) -> str:
    """The model's name, the opmatrix version and the schema package's source: any change misses.

    (Its JSON Schema would serve too, but building it costs 60 ms on every cold load.)
    """
    digest = hashlib.sha256(f"{__version__}\n{model.__module__}.{model.__qualname__}\n".encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _entry(folder: Path, data: bytes, model: type[BaseModel]) -> Path:
    return folder / f"{hashlib.sha256(data).hexdigest()}-{_schema_tag(model)}.json"


def remember(data: bytes, model: type[BaseModel], content: dict[str, Any]) -> None:
    """Store ``content`` (the plain data of a validated, sealed ``model``) as the entry of the bytes ``data``.

    For writers: the artifact they just wrote is ``data``, made by dumping ``content``, so its
    strict load would validate ``content`` itself (the YAML dump and parse of plain data round-trip,
    which ``tests/test_schema_io.py`` checks on generated and hostile matrices). Stored only when the
    YAML carries a seal whose digest is that of ``content``; an entry that is already there is kept;
    a cache that cannot be written is skipped.
    """
    folder = cache_dir("matrices")
    seal = yaml_seal(data)
    if folder is None or seal is None:
        return
    entry = _entry(folder, data, model)
    if entry.is_file() and not entry.is_symlink():
        return
    body = {k: v for k, v in content.items() if k != "integrity"}
    text = entry_text(seal, json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True))
    if text is not None:
        _store(entry, text)


def _store(entry: Path, content: Any) -> None:
    """Write an entry: ``content``'s JSON, or ``content`` itself when it is JSON text already."""
    # json.dumps keeps inf/nan (as Infinity/NaN, which pydantic reads back); model_dump_json
    # would write null and a second, cached load would lose them
    text = content if isinstance(content, str) else json.dumps(content, allow_nan=True)
    write_cache_entry(entry, text)  # a torn entry is invalid JSON: a miss; an unwritable cache only costs time


def load_cached(path: str | os.PathLike[str], model: type[M],
                parse: Callable[[str, str], tuple[M, str | None]], strict: Callable[[], M]) -> M:
    """``strict()``'s model of ``path``, served from the cache when the same sealed bytes were loaded before.

    ``parse(text, where)`` validates the text strictly (a miss) and returns the model with, for a
    sealed document that is exactly what a writer dumped, the canonical JSON of its content (what
    the seal's digest covers), which becomes the entry; ``strict()`` loads the file when it cannot
    be read or decoded here, so that its errors are worded as always. A hit must pass
    :func:`_verified` against the YAML's own seal before it is used.
    """
    folder = cache_dir("matrices")
    if folder is None:
        return strict()
    try:
        data = Path(path).read_bytes()
    except OSError:
        return strict()
    entry = _entry(folder, data, model)
    seal = yaml_seal(data)
    if seal is not None:
        try:
            raw = read_cache_entry(entry)  # a FIFO, a link to /dev/zero, a huge file: a miss, said once
            cached = raw.decode("utf-8") if raw is not None else ""
            if raw is not None and _verified(cached, seal):
                return model.model_validate_json(cached, context={DIGEST_VERIFIED: True})
        except (UnicodeDecodeError, ValidationError):
            pass  # a miss (or an entry that is not valid any more): load strictly
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return strict()
    # parse the very bytes that were hashed: a file replaced meanwhile cannot poison the entry
    loaded, content = parse(text, str(path))
    stored = entry_text(seal, content) if seal is not None and content is not None else None
    if stored is not None:
        _store(entry, stored)
    return loaded

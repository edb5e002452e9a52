"""A cached backend identity, so that an unchanged re-run starts no worker at all.

The evidence key of a run comes from a worker: it imports torch, sets the backend up and reports
the torch build, the adapter's driver identity and the probe-code hash (seconds of work). For a
backend whose identity follows from what is installed on this host alone (``cpu``, ``meta``,
``refaccel``: no driver or firmware outside the Python environment), the parent can tell that
nothing changed without importing torch: it hashes a *fingerprint* of the inputs of that
identity and, when the fingerprint is the one the last run of ``out_dir`` recorded, takes that
run's identity as is. Every task whose evidence key is unchanged is then reused straight away.

The fingerprint is conservative (a change anywhere in it only costs one worker start):

- the Python interpreter, torch's ``version.py`` and the size and mtime of its shared libraries;
- every source file of the opmatrix package (adapters, handlers, engine, schema);
- the host CPU (machine, model, flags: the ISA torch dispatches to);
- the environment variables that steer torch or a backend (``OPMATRIX_*``, ``TORCH_*``, ...);
- the backend, generation, devices, task kinds and run options.

Real devices (``cuda``, ``xla``, vendor backends) are never served from the cache: their driver
and firmware can change under an unchanged Python environment, so a worker reports them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from opmatrix.schema.files import read_cache_json, write_cache_entry

from .evidence import FORMAT, WorkerIdentity
from .worker import CODE_SUFFIXES, code_hash

__all__ = ["HOST_IDENTIFIED", "IDENTITY_FILE", "cached_identity", "fingerprint", "store_identity"]

#: built-in backends whose identity is a function of the fingerprint's inputs
HOST_IDENTIFIED = frozenset({"cpu", "meta", "refaccel"})
IDENTITY_FILE = "identity.json"
_ENV_PREFIXES = ("OPMATRIX_", "TORCH_", "PYTORCH_", "ATEN_", "OMP_", "MKL_", "CUDA_", "PJRT_", "XLA_")
_PACKAGES = ("opmatrix", "opmatrix.schema", "opmatrix.backend", "opmatrix.probes", "opmatrix.matrix")


def _tree_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.suffix in CODE_SUFFIXES and p.is_file() and "__pycache__" not in p.parts
    )


def _package_dirs(names: Iterable[str]) -> list[Path]:
    dirs: set[Path] = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.add(Path(location))
    return sorted(dirs)


def _torch_install(digest: Any) -> None:
    """torch's version file and the size and mtime of its libraries (no import of torch)."""
    dirs = _package_dirs(["torch"])
    if not dirs:
        digest.update(b"torch:missing\0")
        return
    root = dirs[0]
    version = root / "version.py"
    digest.update(version.read_bytes() if version.is_file() else b"no version.py")
    libs = sorted([*root.glob("_C*.so"), *root.glob("_C*.pyd"), *(root / "lib").glob("*.so*")])
    for lib in libs:
        st = lib.stat()
        digest.update(f"{lib.name}:{st.st_size}:{st.st_mtime_ns}\0".encode())


def _host_cpu() -> str:
    """Machine, CPU model and flags (the ISA torch dispatches to), from the first processor."""
    seen: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "flags", "Features", "CPU implementer", "CPU part") and key not in seen:
                    seen[key] = value.strip()
                if not line.strip() and seen:
                    break
    except OSError:
        pass
    return json.dumps([platform.machine(), platform.processor(), seen], sort_keys=True)


def fingerprint(
    backend: str,
    generation: str | None,
    *,
    devices: list[int] | None,
    kinds: Iterable[str],
    handlers: Mapping[str, str],
    options: Mapping[str, object],
) -> str | None:
    """The fingerprint of this run's identity, or None when ``backend`` is not host-identified."""
    if backend not in HOST_IDENTIFIED:
        return None
    digest = hashlib.sha256()
    head = {
        "v": 1,
        "backend": backend,
        "generation": generation,
        "devices": devices,
        "kinds": sorted(kinds),
        "handlers": dict(sorted(handlers.items())),
        "options": options,
        "python": [sys.executable, sys.version],
        "host": _host_cpu(),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)),
    }
    digest.update(json.dumps(head, sort_keys=True, default=str).encode())
    _torch_install(digest)
    for root in _package_dirs(_PACKAGES):
        for path in _tree_files(root):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    digest.update(code_hash(target.partition(":")[0] for target in handlers.values()).encode())  # as workers do
    return digest.hexdigest()[:32]


def cached_identity(out_dir: Path, fp: str | None) -> WorkerIdentity | None:
    """The identity the last run of ``out_dir`` recorded under fingerprint ``fp``, if any."""
    if fp is None:
        return None
    stored = read_cache_json(out_dir / IDENTITY_FILE)  # a FIFO or a link in a restored DIR: a miss, never a block
    if not isinstance(stored, dict) or stored.get("fingerprint") != fp or not isinstance(stored.get("identity"), dict):
        return None
    if stored.get("format") != FORMAT:  # written for another evidence-key format: a miss (one worker start)
        return None
    try:
        return WorkerIdentity.model_validate(stored["identity"])
    except ValidationError:  # lacks what a key needs, or was written by another version: a miss
        return None


def store_identity(out_dir: Path, fp: str | None, identity: WorkerIdentity) -> None:
    """Record ``identity`` under ``fp`` for the next run (atomic; never fails the run)."""
    if fp is None:
        return
    write_cache_entry(out_dir / IDENTITY_FILE, json.dumps(
        {"format": FORMAT, "fingerprint": fp, "identity": identity.model_dump(mode="json")}, sort_keys=True))

"""The journal's first line: the run, the backend identity, and the evidence block for merge."""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Mapping
from typing import Any

__all__ = ["header_line", "other_subject"]


def _subject(identity: Mapping[str, Any]) -> tuple[str, str]:
    """(device type, generation) a worker's identity says it probes (the generation from the
    adapter's evidence key: ``...|gen=g2``)."""
    from .evidence import EvidenceKey

    return str(identity.get("device_type") or ""), EvidenceKey.fields(str(identity.get("adapter") or "")).get("gen", "None")


def other_subject(identity: Mapping[str, Any], *, backend: str, generation: str | None,
                  first: Mapping[str, Any] | None) -> str | None:
    """Why a worker's records would describe another backend than the run's header, or None.

    The header names the backend and generation the run was asked for and the device type of its
    first worker; a worker of another generation or device type (a pool that started g1 workers
    for a g2 run) must not add records to that matrix: the run stops and says which worker."""
    kind, gen = _subject(identity)
    if generation is not None and gen != generation:
        return (f"a worker probes {backend} generation {gen} ({kind}); the run is for generation {generation}: "
                "its records would describe another backend (check the pool's environment)")
    if first is not None and (kind, gen) != _subject(first):
        want_kind, want_gen = _subject(first)
        return (f"a worker probes {kind} generation {gen}; the run's first worker probes {want_kind} generation "
                f"{want_gen}: one matrix holds one backend's records")
    return None


def header_line(key: str, identity: Mapping[str, Any], *, backend: str, generation: str | None, planned: int,
                command: str, extra: Mapping[str, Any]) -> str:
    """The header as one JSON line; ``extra`` overrides what the runner fills in."""
    from opmatrix.schema import Evidence, JournalHeader
    from opmatrix.schema.version import __version__

    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    versions = identity.get("versions") or {}
    evidence = Evidence(
        opmatrix_version=__version__,
        torch_version=identity["torch_version"],
        torch_git=identity["torch_git"],
        python=platform.python_version(),
        platform=platform.platform(),
        command=command,
        started=started,
        driver=versions.get("driver"), firmware=versions.get("firmware"), isa=versions.get("isa"),
        stepping=versions.get("stepping"), backend_version=versions.get("backend_version"),
    )
    fields: dict[str, Any] = {
        "backend": backend,
        "generation": generation,
        "planned": planned,
        "command": command,
        "evidence_key": key,
        "started": started,
        "evidence": evidence,
        "device_type": identity.get("device_type"),
        "dispatch_key": identity.get("dispatch_key"),
    }
    fields.update(extra)
    return JournalHeader(**fields).model_dump_json()

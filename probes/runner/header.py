"""The journal's first line: the run, the backend identity, and the evidence block for merge."""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Mapping
from typing import Any

__all__ = ["header_line"]


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

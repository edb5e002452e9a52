"""The journal's first line: the run, the backend identity, and the evidence block for merge."""

from __future__ import annotations

import datetime as dt
import platform
from typing import TYPE_CHECKING

from .evidence import WorkerIdentity

if TYPE_CHECKING:
    from opmatrix.schema import JournalHeader
    from opmatrix.schema.journal import RunIdentity

__all__ = ["journal_header"]


def journal_header(key: str, identity: WorkerIdentity, *, backend: str, generation: str | None, planned: int,
                   command: str, run: RunIdentity | None) -> JournalHeader:
    """The header of a run whose worker reported ``identity`` (evidence key ``key``); ``run`` is the
    caller's identity of the run (what ``--resume`` must match), when it has one."""
    from opmatrix.schema import Evidence, JournalHeader
    from opmatrix.schema.version import __version__

    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    versions = identity.versions
    evidence = Evidence(
        opmatrix_version=__version__,
        torch_version=identity.torch_version,
        torch_git=identity.torch_git,
        python=platform.python_version(),
        platform=platform.platform(),
        command=command,
        started=started,
        driver=versions.get("driver"), firmware=versions.get("firmware"), isa=versions.get("isa"),
        stepping=versions.get("stepping"), backend_version=versions.get("backend_version"),
    )
    return JournalHeader(backend=backend, generation=generation, planned=planned, command=command, evidence_key=key,
                         started=started, evidence=evidence, device_type=identity.device_type,
                         dispatch_key=identity.dispatch_key, run=run)

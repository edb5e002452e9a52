"""The journal's first line: the run, the backend identity, and the evidence block for merge."""

from __future__ import annotations

import datetime as dt
import platform
from typing import TYPE_CHECKING

from .evidence import EvidenceKey, WorkerIdentity

if TYPE_CHECKING:
    from opmatrix.schema import JournalHeader
    from opmatrix.schema.journal import RunIdentity

__all__ = ["journal_header", "other_subject"]


def _subject(identity: WorkerIdentity) -> tuple[str, str]:
    """(device type, generation) a worker's identity says it probes (the generation from the
    adapter's evidence key: ``...|gen=g2``)."""
    return identity.device_type or "", EvidenceKey.fields(identity.adapter).get("gen", "None")


def other_subject(identity: WorkerIdentity, *, backend: str, generation: str | None,
                  first: WorkerIdentity | None) -> str | None:
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

"""The evidence key of a run: what its records rest on, as a named model printed once.

A worker reports its identity (:func:`.worker` ``_setup``); the key is built from it once and
printed into the journal header and, with each task's kind, id and payload, into every record's
``evidence_key`` (:func:`.journal.task_key`). Reuse and resume match on that text::

    key = EvidenceKey.from_identity({"torch": "2.13.0 git=abc", "adapter": "cpu"}, op_source="9f2e")
    str(key)    # 'torch=2.13.0 git=abc|cpu|ops=9f2e|code='

A field added to the key changes :data:`FORMAT`; an identity without a field the key needs is
refused by name (never printed as an empty part that would match another build's key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

__all__ = ["FORMAT", "EngineOptions", "EvidenceKey", "WorkerIdentity"]

#: the evidence key's format (its fields and how they print)
FORMAT = 1


@dataclass(frozen=True)
class EvidenceKey:
    """The torch build, the adapter's driver identity, the op source's hash and the probe code's hash."""

    torch: str
    adapter: str
    op_source: str = ""
    code: str = ""

    @classmethod
    def from_identity(cls, identity: Mapping[str, object], op_source: str = "") -> EvidenceKey:
        """The key of a worker's identity; ValueError naming what it lacks."""
        missing = [name for name in ("torch", "adapter") if not isinstance(identity.get(name), str)]
        if missing:
            raise ValueError(f"worker identity without {' and '.join(missing)} (has {', '.join(sorted(identity)) or 'nothing'})")
        return cls(torch=str(identity["torch"]), adapter=str(identity["adapter"]), op_source=op_source,
                   code=str(identity.get("code") or ""))

    def __str__(self) -> str:
        return f"torch={self.torch}|{self.adapter}|ops={self.op_source}|code={self.code}"

    @staticmethod
    def fields(key: str | None) -> dict[str, str]:
        """A printed key's named fields (``torch``, the adapter's ``driver``/``gen``..., ``ops``,
        ``code``): what two keys differ in, or the generation a run was measured on."""
        return dict(part.partition("=")[::2] for part in (key or "").split("|") if "=" in part)


class WorkerIdentity(BaseModel):
    """What a worker saw once its backend was set up: the torch build, the adapter's driver identity,
    the probe code's hash, and (with ``--devices``) the device it probes. The run's evidence key and
    journal header are made from it; it is cached per fingerprint (:mod:`.identity`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``"2.13.0 git=abc"``: plain text, so that the parent never imports torch to read it
    torch: str
    #: the adapter's :meth:`~opmatrix.backend.base.Adapter.evidence_key` (backend, generation, driver ...)
    adapter: str
    #: the hash of the adapter's and the handlers' source
    code: str = ""
    torch_version: str
    torch_git: str | None = None
    device_type: str | None = None
    dispatch_key: str | None = None
    #: the adapter's versions (driver, firmware, isa, stepping, backend_version), as text
    versions: dict[str, str | None] = {}
    #: the device this worker probes, as torch names it, and its stable identity (``--devices``)
    device: str | None = None
    device_uuid: str | None = None
    device_count: int | None = None
    #: the Ray node the worker runs on (a Ray executor's workers)
    node: str | None = None
    #: the host name of the machine the worker runs on (beside the device in every record)
    host: str | None = None

    def evidence_key(self, op_source: str = "") -> EvidenceKey:
        """The evidence key of this identity with the op source's hash."""
        return EvidenceKey(torch=self.torch, adapter=self.adapter, op_source=op_source, code=self.code)


class EngineOptions(BaseModel):
    """The run's options the runner itself reads; unknown keys are refused (a typo is never a
    silently different run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the hash of the operator source the tasks come from: part of every evidence key
    op_source_hash: str = ""

"""Who and where a matrix is about: the backend, the run's evidence, the runtime's capabilities.

These head a matrix (:class:`.matrix.Matrix`: ``backend``, ``evidence``, ``runtime``) and a
journal's header; the cells that follow are :mod:`.matrix`'s.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from .base import Message, Model, printable
from .devices import PER_DEVICE, DeviceCheck
from .enums import ApiService, CheckResult, DType

__all__ = ["ApiCoverage", "BackendId", "DeviceInfo", "Evidence", "OpSource", "Runtime", "RuntimeCheck", "Scalar"]

Scalar = str | int | float | bool | None


class BackendId(Model):
    """Which backend a matrix describes."""

    name: str = Field(min_length=1, description="opmatrix backend name, e.g. refaccel, cuda")
    device_type: str = Field(min_length=1, description="torch device type, e.g. refaccel, cuda")
    dispatch_key: str = Field(min_length=1, description="dispatcher key, e.g. PrivateUse1, CUDA")
    generation: str | None = Field(default=None, description="device generation, e.g. g2")

    @field_validator("name", "device_type", "dispatch_key", "generation")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return value if value is None else printable(value)


class OpSource(Model):
    """Where the probed operators and samples came from, and a hash identifying that source."""

    name: str = Field(description="e.g. opinfo")
    entries: int = Field(ge=0, description="number of source entries (OpInfos) selected")
    hash: str = Field(description="hash of the source's identity (torch build, op names, samples)")


class Evidence(Model):
    """Where and how the matrix was produced. The only place timestamps may live."""

    opmatrix_version: str
    torch_version: str
    torch_git: str | None = None
    python: str
    platform: str
    driver: str | None = None
    firmware: str | None = None
    isa: str | None = None
    stepping: str | None = None
    backend_version: str | None = None
    op_source: OpSource | None = None
    command: str = ""
    started: str | None = Field(default=None, description="ISO-8601 UTC")
    finished: str | None = Field(default=None, description="ISO-8601 UTC")
    extra: dict[str, Scalar] = Field(default_factory=dict)


class DeviceInfo(Model):
    """One device as the runtime identifies it."""

    index: int = Field(ge=0)
    name: str
    uuid: str | None = Field(default=None, description="stable physical id (UUID or bus id)")
    properties: dict[str, Scalar] = Field(default_factory=dict)


class RuntimeCheck(Model):
    """One level 0/1 runtime check and its evidence."""

    name: str = Field(min_length=1)
    level: int = Field(ge=0, le=7)
    result: CheckResult
    evidence: Message = ""
    advice: Message | None = Field(default=None, description="what to do next when it did not pass")
    via: str | None = Field(default=None, description="API path used, e.g. torch.accelerator")
    devices: list[DeviceCheck] = Field(default_factory=list, description=PER_DEVICE)


class ApiCoverage(Model):
    """Whether one device-generic PyTorch API reaches the backend."""

    api: str
    service: ApiService
    detail: Message = ""


class Runtime(Model):
    """Runtime capability data: devices, claimed capabilities, check results by level."""

    devices: list[DeviceInfo] = Field(default_factory=list)
    claimed_dtypes: list[DType] = Field(default_factory=list)
    capabilities: dict[str, Scalar] = Field(default_factory=dict)
    checks: list[RuntimeCheck] = Field(default_factory=list)
    apis: list[ApiCoverage] = Field(default_factory=list)

    def check(self, name: str) -> RuntimeCheck | None:
        """The check called ``name``, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

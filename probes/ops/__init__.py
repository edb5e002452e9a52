"""opmatrix.probes.ops: see docs/levels.md and README.md. The engine (``.engine``) imports torch; this module does not."""

from pydantic import BaseModel, ConfigDict, JsonValue

from opmatrix.schema.names import TaskId

__all__ = ["OpPayload", "task_id"]


class OpPayload(BaseModel):
    """An ``op`` task's payload: the OpInfo source, the dtype, the probe options (see ``state.ProbeOptions``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    dtype: str
    options: dict[str, JsonValue] = {}


def task_id(source: str, dtype: str) -> str:
    """Stable id of an operator probe task (what the runner's journal, resume and reuse match on)."""
    return str(TaskId(source, dtype))

"""opmatrix.probes.ops: see docs/levels.md and README.md. The engine (``.engine``) imports torch; this module does not."""


from opmatrix.schema.names import TaskId


def task_id(source: str, dtype: str) -> str:
    """Stable id of an operator probe task (what the runner's journal, resume and reuse match on)."""
    return str(TaskId(source, dtype))

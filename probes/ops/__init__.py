"""opmatrix.probes.ops: see docs/levels.md and README.md. The engine (``.engine``) imports torch; this module does not."""


def task_id(source: str, dtype: str) -> str:
    """Stable id of an operator probe task (what the runner's journal, resume and reuse match on)."""
    return f"{source}|{dtype}"

"""Runtime probes for support levels 0 and 1 (docs/levels.md#support-levels-0-7, docs/levels.md#runtime-bring-up-order), and ``opmatrix doctor``.

Operator coverage means nothing if device discovery, tensor semantics, memory or fork safety are
broken. Each check returns pass / fail / not_applicable / unknown with evidence and its level;
in-process checks run in a spawned worker, the fork / spawn suite each in a process of its own::

    from opmatrix.probes.runtime import collect_runtime
    runtime = collect_runtime("refaccel", "g2")        # -> opmatrix.schema.Runtime
    runtime.check("fork_after_init").evidence          # "child got: ... use spawn"

Modules: ``catalog`` (the checks, in bring-up order), ``discovery`` (level 0), ``tensors``,
``claims``, ``state``, ``streams``, ``memory`` (level 1), ``process`` / ``children`` /
``casehost`` (the process suite), ``apis`` (generic API coverage), ``execute`` (isolation and the
matrix section), ``checks`` (runner tasks), ``doctor`` (the doctor verb).
"""

from __future__ import annotations

from typing import Any

__all__ = ["collect_runtime", "plan_runtime_tasks", "run_checks", "runtime_from_records"]


def __getattr__(name: str) -> Any:
    # lazy: importing the package must not import torch or start anything
    if name in ("collect_runtime", "run_checks", "runtime_from_records"):
        from . import execute

        return getattr(execute, name)
    if name == "plan_runtime_tasks":
        from .checks import plan_runtime_tasks

        return plan_runtime_tasks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

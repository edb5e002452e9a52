"""``--suites``: which probe suites a run includes (runtime, ops, workloads, distributed).

    resolve_suites(args)   # {"runtime", "ops"} by default; --no-runtime / --runtime-only are aliases
"""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_SUITES", "SUITES", "resolve_suites"]

SUITES: tuple[str, ...] = ("runtime", "ops", "workloads", "distributed")
DEFAULT_SUITES: tuple[str, ...] = ("runtime", "ops")


def resolve_suites(args: argparse.Namespace) -> set[str]:
    """The suites to run from ``--suites`` and its aliases; raises ValueError naming a bad value."""
    chosen = list(getattr(args, "suites", None) or DEFAULT_SUITES)
    bad = [s for s in chosen if s not in SUITES]
    if bad:
        raise ValueError(f"--suites: unknown suite {bad[0]!r} (choose from {', '.join(SUITES)})")
    suites = set(chosen)
    if getattr(args, "runtime_only", False):
        suites = {"runtime"}
    if getattr(args, "no_runtime", False):
        suites.discard("runtime")
    return suites

"""``opmatrix probe`` options for suites and workloads, and the workload tasks they plan::

    opmatrix probe --backend refaccel --suites runtime,ops,workloads --workloads mlp,tinygpt
"""

from __future__ import annotations

import argparse
from typing import Any

from opmatrix.schema.text import cut

__all__ = ["SUITES", "add_probe_arguments", "resolve_suites", "summary_lines", "workload_tasks"]

#: the suites ``--suites`` may name (``distributed`` joins when its module is installed)
SUITES = ("runtime", "ops", "workloads", "distributed")
_MODES = ("eager", "compile")
_DTYPES = ("float32", "bfloat16", "float16")


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_probe_arguments(p: argparse.ArgumentParser) -> None:
    """``--suites``, ``--workloads``, ``--workload-dtypes``, ``--workload-modes``."""
    p.add_argument("--workloads", help="workloads to run (--suites workloads): all, or a comma list of catalog "
                   "names and pkg.mod:factory (default all)")
    p.add_argument("--workload-dtypes", type=_csv, help="workload dtypes (default float32,bfloat16,float16)")
    p.add_argument("--workload-modes", type=_csv, help="eager, compile or both (default eager,compile)")


def _usage(message: str) -> Exception:
    from opmatrix.schema import UsageError

    return UsageError(message)


def resolve_suites(args: argparse.Namespace) -> set[str]:
    """The suites to run: ``--suites``, else runtime,ops (plus workloads when --workloads is given)."""
    from opmatrix.probes.suites import resolve_suites as chosen

    try:
        suites = chosen(args)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    if not getattr(args, "suites", None) and getattr(args, "workloads", None) and not getattr(args, "runtime_only", False):
        suites.add("workloads")
    return suites


def _checked(values: list[str] | None, allowed: tuple[str, ...], flag: str) -> list[str]:
    values = values or list(allowed)
    for v in values:
        if v not in allowed:
            raise _usage(f"{flag}: unknown value {v!r} (choose from {', '.join(allowed)})")
    return values


def workload_tasks(args: argparse.Namespace) -> list[Any]:
    """The ``workload`` tasks ``args`` asks for (usage errors name the flag)."""
    from .catalog import resolve_names
    from .handler import plan_workload_tasks

    try:
        names = resolve_names(getattr(args, "workloads", None))
    except ValueError as exc:
        raise _usage(str(exc)) from None
    dtypes = _checked(getattr(args, "workload_dtypes", None), _DTYPES, "--workload-dtypes")
    modes = _checked(getattr(args, "workload_modes", None), _MODES, "--workload-modes")
    return plan_workload_tasks(names, dtypes, modes, compile_backend=getattr(args, "compile_backend", None))


def summary_lines(results: list[Any]) -> list[str]:
    """What ``opmatrix probe`` prints about the workload runs: outcomes, host fallback, compile figures."""
    if not results:
        return []
    counts: dict[str, int] = {}
    for r in results:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    lines = ["workloads: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
    for r in results:
        host = f"; host: {', '.join(r.host_fallback.ops)}" if r.host_fallback.ops else ""
        bad = r.failed_steps()
        comp = ""
        if r.compile is not None and r.compile.speedup is not None:
            comp = (f"; compile {r.compile.compile_seconds:.2f} s, speedup {r.compile.speedup:.2f}x, "
                    f"{r.compile.graph_breaks} graph break(s), {r.compile.recompiles} recompile(s)")
        why = f" ({cut(bad[0], 120)})" if bad else (f" ({cut(r.error, 120)})" if r.error else "")
        lines.append(f"  {r.workload} {r.dtype.value} {r.mode.value}: {r.outcome.value}{why}{host}{comp}")
    return lines

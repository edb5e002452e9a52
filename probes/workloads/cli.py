"""``opmatrix probe``'s workload tasks and what the probe prints about workload runs::

    opmatrix probe --backend refaccel --suites runtime,ops,workloads --workloads mlp,tinygpt

The options themselves are declared in :mod:`opmatrix.probes.options`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmatrix.probes.options import WORKLOAD_DTYPES, WORKLOAD_MODES, ProbeOptions
from opmatrix.schema import CheckResult, UsageError
from opmatrix.schema.text import cut
from opmatrix.schema.workloads import GATED_STEPS

if TYPE_CHECKING:
    from opmatrix.probes.runner import Task
    from opmatrix.schema.workloads import WorkloadResult

__all__ = ["check_factory", "summary_lines", "workload_tasks"]


def check_factory(ref: str, flag: str) -> None:
    """A ``pkg.mod:factory`` reference imports and names a callable (UsageError naming ``flag`` otherwise)."""
    from opmatrix.schema.userref import import_failure, import_user_module

    module_name, _, attr = ref.partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in [*module_name.split("."), attr]):
        raise UsageError(f"{flag}: {ref!r} is not pkg.module:factory")
    try:
        module = import_user_module(module_name)
    except SystemExit as exc:  # a module that exits (or parses argv) when imported
        raise UsageError(f"{flag}: {ref!r}: importing {module_name!r} called exit({exc.code!r}); a module named "
                         "here must not exit or parse the command line when imported") from None
    except Exception as exc:  # noqa: BLE001 - whatever the import raised is the message
        raise UsageError(f"{flag}: {ref!r}: cannot import {module_name!r}: {import_failure(exc)}") from None
    if not callable(getattr(module, attr, None)):
        raise UsageError(f"{flag}: {ref!r}: module {module_name!r} has no callable {attr!r}; name a function "
                         "returning (model, inputs)")


def workload_tasks(options: ProbeOptions) -> list[Task]:
    """The ``workload`` tasks the options ask for; a user factory is imported here, before any worker."""
    from .catalog import resolve_names
    from .handler import plan_workload_tasks

    try:
        names = resolve_names(",".join(options.workloads) if options.workloads is not None else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for name in names:
        if ":" in name:
            check_factory(name, "--workloads")
    dtypes = list(options.workload_dtypes or WORKLOAD_DTYPES)
    modes = list(options.workload_modes or WORKLOAD_MODES)
    return plan_workload_tasks(names, dtypes, modes, compile_backend=options.compile_backend)


def summary_lines(results: list[WorkloadResult]) -> list[str]:
    """What ``opmatrix probe`` prints about the workload runs: outcomes, host fallback, compile figures."""
    if not results:
        return []
    counts: dict[str, int] = {}
    for r in results:
        counts[r.headline()] = counts.get(r.headline(), 0) + 1
    lines = ["workloads: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
    for r in results:
        host = f"; host: {', '.join(r.host_fallback.ops)}" if r.host_fallback.ops else ""
        # the reason shown is the gated step that gave the headline, else the steps beyond them that failed
        bad = [f"{k.value}: {v.evidence}" for k, v in r.steps.items()
               if k in GATED_STEPS and v.result is not CheckResult.passed]
        bad = bad or r.failed_steps()
        comp = ""
        if r.compile is not None and r.compile.speedup is not None:
            comp = (f"; compile {r.compile.compile_seconds:.2f} s, speedup {r.compile.speedup:.2f}x, "
                    f"{r.compile.graph_breaks} graph break(s), {r.compile.recompiles} recompile(s)")
        why = f" ({cut(bad[0], 120)})" if bad else (f" ({cut(r.error, 120)})" if r.error else "")
        lines.append(f"  {r.workload} {r.dtype.value} {r.mode.value}: {r.headline()}{why}{host}{comp}")
    return lines

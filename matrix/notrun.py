"""What a probe did not run, and why: one set of facts for the probe's summary, the site, the gate
and queries.

A unit that never ran is not a cell; the matrix lists it in ``not_run`` (``'bmm|int16 samples after
#1'`` -> its reason) and a task that yielded no cell in ``skipped``. The reasons come from
different places: an earlier fault in the same task (a crash, hang or poisoned device), OpInfo's
sample generation raising part-way, the CPU reference refusing a layout variant, a task that
faulted past its budget. Each is named as what it is, never blamed on a fault it was not::

    >>> [g.line() for g in not_run_groups(matrix.not_run)]  # needs a probed matrix: not run  # doctest: +SKIP
    ["2 units of bmm.triton_optimized (bool, int16): OpInfo's sample generation raised after 2 samples (...)"]
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from opmatrix.schema import OpName, TaskId

__all__ = ["NotRunCause", "NotRunGroup", "not_run_for", "not_run_groups", "not_run_lines", "not_run_summary"]


class NotRunCause(enum.Enum):
    """Why units did not run, as people need to know it (the worst first)."""

    fault = "an earlier fault in the same task (a crash, hang or poisoned device) ruled them out"
    samples = "OpInfo's sample generation raised before yielding them"
    reference = "the CPU reference refuses the layout variant (it changes what the op computes)"
    other = "see each reason"

    @property
    def is_fault(self) -> bool:
        """Whether a fault of the backend is behind it (an alarm on the site), not a limit of the inputs."""
        return self is NotRunCause.fault


#: (text a producer's reason holds, cause): the producers are probes/ops/faults.py, probes/ops/engine.py
#: (the layout refusal, OpInfo's partial samples) and probes/runner/runner.py (a task's fault budget)
_CAUSES = (("the worker in unit", NotRunCause.fault), ("the task faulted", NotRunCause.fault),
           ("sample generation raised", NotRunCause.samples), ("the CPU refuses this sample", NotRunCause.reference))


def _cause(reason: str) -> NotRunCause:
    return next((cause for text, cause in _CAUSES if text in reason), NotRunCause.other)


@dataclass(frozen=True)
class NotRunGroup:
    """The units of one OpInfo source that share a reason."""

    cause: NotRunCause
    source: str
    reason: str
    units: tuple[str, ...]  # the matrix's keys ('source|dtype unit')
    dtypes: tuple[str, ...]

    def line(self) -> str:
        """``2 units of bmm.triton_optimized (bool, int16): OpInfo's sample generation raised ...``"""
        n = len(self.units)
        return (f"{n} unit{'s' if n != 1 else ''} of {self.source} ({', '.join(self.dtypes)}): "
                f"{self.reason.removeprefix('not run: ')}")


def _split(key: str) -> tuple[str, str]:
    """('bmm.triton_optimized', 'int16') of 'bmm.triton_optimized|int16 samples after #1'."""
    task, _, _unit = key.partition(" ")
    try:
        parsed = TaskId.parse(task)
    except ValueError:
        return task, ""
    return parsed.source, parsed.dtype


def not_run_groups(not_run: Mapping[str, str]) -> list[NotRunGroup]:
    """The matrix's ``not_run`` grouped by source, cause and reason: faults first, then by size."""
    groups: dict[tuple[NotRunCause, str, str], list[tuple[str, str]]] = {}
    for key, reason in not_run.items():
        source, dtype = _split(key)
        groups.setdefault((_cause(reason), source, reason), []).append((key, dtype))
    out = [NotRunGroup(cause=cause, source=source, reason=reason, units=tuple(k for k, _ in members),
                       dtypes=tuple(sorted({d for _, d in members if d})))
           for (cause, source, reason), members in groups.items()]
    order = list(NotRunCause)
    return sorted(out, key=lambda g: (order.index(g.cause), -len(g.units), g.source, g.reason))


def not_run_summary(not_run: Mapping[str, str]) -> str:
    """``2 units not run (OpInfo's sample generation raised before yielding them: 2)``; '' when none."""
    if not not_run:
        return ""
    by_cause: dict[NotRunCause, int] = {}
    for reason in not_run.values():
        by_cause[_cause(reason)] = by_cause.get(_cause(reason), 0) + 1
    parts = [f"{cause.value}: {by_cause[cause]}" for cause in NotRunCause if cause in by_cause]
    n = len(not_run)
    return f"{n} unit{'s' if n != 1 else ''} not run ({'; '.join(parts)})"


def not_run_for(not_run: Mapping[str, str], op: str, dtype: str | None = None) -> list[NotRunGroup]:
    """The groups whose OpInfo source is named after ``op`` (``bmm`` and ``bmm.triton_optimized``
    for ``aten.bmm.default``), at ``dtype`` when given: what a query of that op did not see."""
    try:
        base = OpName.parse(op).name
    except ValueError:
        return []
    found = {k: v for k, v in not_run.items() if _split(k)[0].split(".")[0] == base
             and (dtype is None or _split(k)[1] == dtype)}
    return not_run_groups(found)


def not_run_lines(not_run: Mapping[str, str], most: int = 5) -> list[str]:
    """What ``probe`` and ``gate`` print: the summary, then a line per group (``most`` at most)."""
    if not not_run:
        return []
    groups = not_run_groups(not_run)
    lines = [f"{not_run_summary(not_run)}: no cells, never counted as probed"]
    lines += [f"  - {g.line()}" for g in groups[:most]]
    if len(groups) > most:
        lines.append(f"  ... and {len(groups) - most} more groups (the matrix's not_run lists each unit)")
    return lines

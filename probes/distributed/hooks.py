"""The hook ``opmatrix probe --suites distributed`` calls: run the suite, attach it to the matrix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from opmatrix.schema.distributed import CaseKind, DistCase, DistOutcome, Distributed, PoisonScope

if TYPE_CHECKING:
    from opmatrix.schema import Matrix

__all__ = ["attach_distributed", "distributed_failed", "distributed_line", "doctor_distributed", "render_doctor_distributed"]


def attach_distributed(matrix: Matrix, backend: str, generation: str | None, out: Path, *, progress: bool) -> Matrix:
    """Run the distributed suite for ``backend`` and return ``matrix`` with its ``distributed`` section."""
    from .suite import run_suite

    section = run_suite(backend, generation, out, progress=progress)
    return matrix.model_copy(update={"distributed": section})


def distributed_line(section: Distributed) -> str:
    """One line for a probe's summary: the c10d backend and the cases per outcome."""
    counts = Counter(c.outcome.value for c in section.cases)
    return (f"distributed ({section.c10d_backend}): {len(section.cases)} cases, "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def doctor_distributed(backend: str, generation: str | None) -> Distributed:
    """``doctor --level 5``: run the suite in a scratch folder; the section (see :func:`distributed_failed`)."""
    import tempfile

    from .suite import run_suite

    with tempfile.TemporaryDirectory(prefix="opm-doctor-dist-") as tmp:
        return run_suite(backend, generation, Path(tmp), progress=False)


def distributed_failed(section: Distributed) -> list[DistCase]:
    """The cases that fail the doctor: wrong or faulted. A clean refusal (``unsupported``) is a gap
    the report names, not a doctor failure."""
    return [c for c in section.cases if c.outcome not in (DistOutcome.ok, DistOutcome.unsupported)]


def render_doctor_distributed(section: Distributed, out: TextIO) -> None:
    """The level 5 part of the doctor's table: every case that is not plainly ok."""
    bad = distributed_failed(section)
    print(f"\nlevel 5: distributed ({section.c10d_backend}), {len(section.cases)} cases", file=out)
    for c in section.cases:
        if c.outcome is not DistOutcome.ok or c.kind is CaseKind.failure:
            scope = f" [poison scope: {c.poison_scope.value}]" if c.poison_scope is not PoisonScope.none else ""
            print(f"  {c.outcome.value:<12} {c.id}{scope}: {(c.error or '')[:160]}", file=out)
    print(f"  {sum(c.outcome is DistOutcome.ok for c in section.cases)} ok, {len(bad)} wrong or faulted", file=out)

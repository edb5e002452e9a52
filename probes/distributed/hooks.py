"""The hook ``opmatrix probe --suites distributed`` calls: run the suite, attach it to the matrix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opmatrix.schema import Matrix

__all__ = ["attach_distributed"]


def attach_distributed(matrix: Matrix, backend: str, generation: str | None, out: Path, *, progress: bool) -> Matrix:
    """Run the distributed suite for ``backend`` and return ``matrix`` with its ``distributed`` section."""
    from .suite import run_suite

    section = run_suite(backend, generation, out, progress=progress)
    counts = Counter(c.outcome.value for c in section.cases)
    print(f"distributed ({section.c10d_backend}): {len(section.cases)} cases, "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return matrix.model_copy(update={"distributed": section})


def doctor_distributed(backend: str, generation: str | None, *, as_json: bool) -> tuple[int, dict[str, Any]]:
    """``doctor --level 5``: run the suite in a scratch folder; exit 1 when a case is wrong or faulted.

    A clean refusal (``unsupported``) is a gap the report names, not a doctor failure.
    """
    import tempfile

    from .suite import run_suite

    with tempfile.TemporaryDirectory(prefix="opm-doctor-dist-") as tmp:
        section = run_suite(backend, generation, Path(tmp), progress=False)
    bad = [c for c in section.cases if c.outcome.value not in ("ok", "unsupported")]
    if not as_json:
        print(f"\nlevel 5: distributed ({section.c10d_backend}), {len(section.cases)} cases")
        for c in section.cases:
            if c.outcome.value != "ok" or c.kind.value == "failure":
                scope = f" [poison scope: {c.poison_scope.value}]" if c.poison_scope.value != "none" else ""
                print(f"  {c.outcome.value:<12} {c.id}{scope}: {(c.error or '')[:160]}")
        print(f"  {sum(c.outcome.value == 'ok' for c in section.cases)} ok, {len(bad)} wrong or faulted")
    return (1 if bad else 0), section.model_dump(mode="json")

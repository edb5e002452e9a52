"""The hook ``opmatrix probe --suites distributed`` calls: run the suite, attach it to the matrix."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["attach_distributed"]


def attach_distributed(matrix: Any, args: argparse.Namespace, out: Path) -> Any:
    """Run the distributed suite for ``args.backend`` and return ``matrix`` with its ``distributed`` section."""
    from .suite import run_suite

    section = run_suite(args.backend, args.generation, out, progress=not getattr(args, "quiet", False))
    counts = Counter(c.outcome.value for c in section.cases)
    print(f"distributed ({section.c10d_backend}): {len(section.cases)} cases, "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return matrix.model_copy(update={"distributed": section})

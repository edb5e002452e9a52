"""Key findings of the demo, computed from the two refaccel matrices (nothing here is hand-written).

Usage: python bench/findings.py OLD/matrix.yaml NEW/matrix.yaml

Prints, for the old generation: every cell group with wrong values (the worst silent failure),
then the kernels it is missing (cells rejected on the old generation that run on the new one),
each with its cell count, and the generated contract line of the ops involved on the new one.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from opmatrix.matrix.contract_line import contract_line
from opmatrix.schema import ExecPath, Outcome, count_matrix, load_matrix


def _ident(m) -> str:  # type: ignore[no-untyped-def]
    return f"{m.backend.name} {m.backend.generation or ''}".strip()


def main(old_path: str, new_path: str) -> int:
    """Print the findings; exit 0."""
    old, new = load_matrix(old_path), load_matrix(new_path)
    print(f"{_ident(old)}: {count_matrix(old).line()}")
    print(f"{_ident(new)}: {count_matrix(new).line()}")
    wrong = [(op, b) for op, boxes in old.boxes().items() for b in boxes if b.outcome is Outcome.wrong]
    print(f"\n{_ident(old)}: WRONG VALUES in {sum(len(b.dtypes) * len(b.layouts) * len(b.ranks.ranks()) for _, b in wrong)} cells"
          + (" (none)" if not wrong else ":"))
    for op, b in wrong:
        n = b.numerics
        err = f", max abs err {n.max_abs_err:.3g} > atol {n.atol:g}" if n and n.max_abs_err is not None else ""
        print(f"  {op} {','.join(d.value for d in b.dtypes)} ranks {b.ranks.min}-{b.ranks.max} "
              f"{','.join(x.value for x in b.layouts)} {b.mode.value}: {b.path.value}{err}")
    new_ok: dict[tuple[str, str, str], ExecPath] = {}
    for op, boxes in new.boxes().items():
        for b in boxes:
            if b.outcome is Outcome.ok and b.path is not ExecPath.rejected and not b.conditions.get("dtype"):
                for d in b.dtypes:
                    new_ok.setdefault((op, d.value, b.mode.value), b.path)
    missing: dict[tuple[str, str], set[str]] = defaultdict(set)
    for op, boxes in old.boxes().items():
        for b in boxes:
            if b.path is ExecPath.rejected and not b.conditions.get("dtype"):
                for d in b.dtypes:
                    if (op, d.value, b.mode.value) in new_ok:
                        missing[op, b.mode.value].add(d.value)
    print(f"\n{_ident(old)}: MISSING KERNELS (rejected there, running on {_ident(new)}): "
          f"{sum(len(v) for v in missing.values())} op x dtype" + (" (none)" if not missing else ""))
    for (op, mode), dtypes in sorted(missing.items()):
        print(f"  {op} ({mode}): {', '.join(sorted(dtypes))}")
    ops = sorted({op for op, _ in wrong} | {op for op, _ in missing})
    if ops:
        print(f"\n{_ident(new)} contract of those ops (generated from the matrix):")
        for op in ops:
            print(f"  {op}: {contract_line(new.operators.get(op, []))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

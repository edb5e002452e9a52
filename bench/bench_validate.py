"""Benchmark: ``opmatrix validate`` of a large invalid matrix costs about one parse (issue 16).

Writes a synthetic matrix of about 50,000 cells, then a copy with ``--bad`` entries whose
``path:`` is not an execution path, and times ``validate_file`` on each (best of ``--rounds``).
Every error of the invalid file must be reported, each with its line, in under 3x the time of
the valid file: the line index is built once per file, not once per error::

    .venv/bin/python bench/bench_validate.py [--cells 50000] [--bad 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from opmatrix.reports.synthetic import synthetic_matrix
from opmatrix.schema import ArtifactError, dumps_model, validate_file


def _matrix_text(cells: int) -> tuple[str, int]:
    n_ops = 10
    while True:
        matrix = synthetic_matrix(n_ops=n_ops, seed=16)
        if matrix.cell_count() >= cells:
            return dumps_model(matrix, command="bench/bench_validate.py"), matrix.cell_count()
        n_ops = max(n_ops + 1, int(n_ops * cells / max(1, matrix.cell_count())) + 1)


def _spoil(text: str, bad: int) -> str:
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if re.match(r"^\s+path: \w+$", line)]
    step = max(1, len(hits) // bad)
    for i in hits[::step][:bad]:
        lines[i] = re.sub(r"path: \w+", "path: nativ", lines[i])
    return "".join(lines)


def _time(path: Path, rounds: int) -> tuple[float, int]:
    best, errors = float("inf"), 0
    for _ in range(rounds):
        start = time.perf_counter()
        try:
            validate_file(path)
            errors = 0
        except ArtifactError as exc:
            errors = len(exc.messages)
        best = min(best, time.perf_counter() - start)
    return best, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=50_000)
    parser.add_argument("--bad", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    text, cells = _matrix_text(args.cells)
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = Path(tmp) / "valid.yaml", Path(tmp) / "invalid.yaml"
        good.write_text(text, encoding="utf-8")
        bad.write_text(_spoil(text, args.bad), encoding="utf-8")
        t_good, e_good = _time(good, args.rounds)
        t_bad, e_bad = _time(bad, args.rounds)
    print(f"matrix: {cells} cells, {len(text) / 1e6:.1f} MB")
    print(f"valid:   {t_good:.2f} s ({e_good} errors)")
    print(f"invalid: {t_bad:.2f} s ({e_bad} errors reported)")
    print(f"ratio invalid/valid: {t_bad / t_good:.2f} (goal: under 3)")


if __name__ == "__main__":
    main()

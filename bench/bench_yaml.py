"""YAML IO: load and dump of a generated matrix of ~50,000 cells, libyaml's C loader vs pure Python.

    python bench/bench_yaml.py [--cells 50000] [--repeat 3]

Prints, for each implementation, the best of N: parse (YAML -> data), validate (data -> Matrix,
strict), dump (Matrix -> YAML), and the ratio pure / C, all measured in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import time

from benchdoc import Run

from opmatrix.schema import (
    BackendId,
    Entry,
    Evidence,
    Matrix,
    RankRange,
    Samples,
    dumps_model,
    loads_yaml,
    validate_data,
)
from opmatrix.schema.enums import ExecPath, Layout, Outcome
from opmatrix.schema.io import HAVE_LIBYAML

DTYPES = ["float32", "bfloat16", "float16", "int64", "int32", "bool", "float64", "complex64"]


def generate(cells: int) -> Matrix:
    """A matrix whose entries expand to about ``cells`` cells (2 dtypes x 2 ranks x 2 layouts each)."""
    layouts = list(Layout)
    paths = list(ExecPath)
    operators: dict[str, list[Entry]] = {}
    n = 0
    for i in itertools.count():
        if n >= cells:
            break
        entries = []
        for j in range(4):
            entries.append(Entry(
                dtypes=sorted({DTYPES[(i + j) % 8], DTYPES[(i + j + 3) % 8]}),
                ranks=RankRange(min=j, max=j + 1),
                layouts=sorted({layouts[j % 6], layouts[(j + 2) % 6]}, key=lambda x: x.value),
                path=paths[(i + j) % 5],
                outcome=Outcome.ok if (i + j) % 17 else Outcome.wrong,
                samples=Samples(probed=10 + j, passed=10 + j - ((i + j) % 17 == 0)),
                components=["aten.exp.default", "aten.sum.dim_IntList"] if (i + j) % 5 == 1 else [],
            ))
            n += 8
        operators[f"aten.op{i}.default"] = entries
    return Matrix(
        backend=BackendId(name="bench", device_type="bench", dispatch_key="PrivateUse1"),
        evidence=Evidence(opmatrix_version="0", torch_version="0", python="3", platform="bench"),
        operators=operators,
    )


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="add this run's figures to docs/benchmarks.md")
    args = ap.parse_args()
    run = Run("bench_yaml")
    m = generate(args.cells)
    text = dumps_model(m, command="bench")
    print(f"matrix: {len(m.operators)} operators, {m.cell_count()} cells, {len(text) / 1e6:.1f} MB of YAML; "
          f"libyaml {'present' if HAVE_LIBYAML else 'ABSENT (both rows are pure Python)'}")
    data = loads_yaml(text)
    validate = best(lambda: validate_data(data, Matrix, "bench"), args.repeat)
    rows = {}
    for label, pure in (("C (libyaml)", False), ("pure Python", True)):
        parse = best(lambda p=pure: loads_yaml(text, pure=p), args.repeat)
        dump = best(lambda p=pure: dumps_model(m, command="bench", pure=p), args.repeat)
        rows[label] = (parse, dump)
        print(f"{label:12s}  parse {parse:6.2f} s   validate {validate:5.2f} s   dump {dump:6.2f} s")
    (cp, cd), (pp, pd) = rows["C (libyaml)"], rows["pure Python"]
    print(f"pure / C      parse {pp / cp:5.1f}x   dump {pd / cd:5.1f}x   (same run, best of {args.repeat})")
    assert dumps_model(m, command="bench") == dumps_model(m, command="bench", pure=True), "C and pure dumps differ"
    if args.record:
        run.record({"cells": f"{m.cell_count():,}", "parse C": f"{cp:.2f} s", "parse Python": f"{pp:.2f} s",
                    "dump C": f"{cd:.2f} s", "dump Python": f"{pd:.2f} s", "validate": f"{validate:.2f} s",
                    "Python / C": f"parse {pp / cp:.1f}x, dump {pd / cd:.1f}x"})


if __name__ == "__main__":
    main()

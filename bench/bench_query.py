"""Benchmark: load + index of a full-size matrix, and queries per second beside a plain dict.

Generates a matrix the size of a full CPU run over OpInfo (about 700 operators x 11 dtypes x
ranks 0-5 x 6 layouts, eager and compile, with conditional and rejected entries), writes it as
YAML, then measures in one run:

- cold: strict YAML load + validation (``load_matrix``) and the index build (``MatrixIndex(model)``);
- ``MatrixIndex.load`` once the validated model is cached (see ``opmatrix.matrix.cache``);
- ``MatrixIndex.query`` per second for a fixed cell, for a rotating set of cells, and with ``args``;
- a plain ``dict[tuple, str]`` lookup over the same keys (the floor any index can reach);
- the strict load (no cache) of every committed full matrix under ``bench/results/``, beside the
  constructor-based strict loader it replaced (issue 22 goal: under 1 s each).

Goals (issue 5): load + index under 1 s; at least 500,000 queries per second on one core::

    .venv/bin/python bench/bench_query.py [--ops 700] [--repeat 200000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from opmatrix.matrix import MatrixIndex
from opmatrix.schema import (
    DEFAULT_DTYPES,
    BackendId,
    Entry,
    ErrorInfo,
    Evidence,
    FallbackEvidence,
    Layout,
    Numerics,
    RankRange,
    Samples,
    dump_model,
    load_matrix,
)
from opmatrix.schema import (
    Matrix as MatrixModel,
)

LAYOUTS = [x.value for x in Layout]
FLOATS = ["float32", "float64", "float16", "bfloat16"]


def _entry(rng: random.Random, dtypes: list[str], lo: int, hi: int, layouts: list[str], mode: str, path: str,
           **extra: object) -> Entry:
    fb = "observed" if path == "fallback" else "not_observed"
    return Entry(
        dtypes=sorted(dtypes), ranks=RankRange(min=lo, max=hi), layouts=layouts, mode=mode, path=path,
        outcome="ok", samples=Samples(probed=rng.randint(4, 60), passed=4),
        numerics=Numerics(atol=1e-5, rtol=1.3e-6, max_abs_err=rng.random() * 1e-6) if path != "rejected" else None,
        fallback=FallbackEvidence(state=fb, source="counter"), **extra,  # type: ignore[arg-type]
    )


def generate(n_ops: int, seed: int = 0) -> MatrixModel:
    """A synthetic matrix shaped like a full CPU run: several entries per op and mode."""
    rng = random.Random(seed)
    ints = [d for d in DEFAULT_DTYPES if d not in FLOATS]
    operators: dict[str, list[Entry]] = {}
    for i in range(n_ops):
        entries = []
        for mode in ("eager", "compile"):
            lo, hi = rng.choice([(0, 5), (1, 5), (2, 5), (1, 4)])
            floats = [d for d in FLOATS if rng.random() > 0.1]
            if i % 7 == 0:  # softmax-like: conditional native / composite on contiguous
                for cond, path in (({"dim": "last"}, "native"), ({"dim": "first"}, "composite")):
                    entries.append(_entry(rng, floats, lo, hi, ["contiguous"], mode, path, conditions=cond))
                entries.append(_entry(rng, floats, lo, hi, LAYOUTS[1:], mode, "composite"))
            else:
                entries.append(_entry(rng, floats, lo, hi, LAYOUTS, mode, rng.choice(["native", "native", "fallback"])))
            rest = [d for d in DEFAULT_DTYPES if d not in floats]
            if rest:
                err = ErrorInfo(type="RuntimeError", message=f"op{i} not implemented for these dtypes", actionable=True)
                entries.append(_entry(rng, rest, lo, hi, LAYOUTS, mode, "rejected", error=err))
            if ints and i % 3 == 0:  # a rank hole for variety
                entries = [e for e in entries if "int64" not in e.dtypes] + [
                    _entry(rng, ["int64"], lo, lo, LAYOUTS, mode, "native")]
        operators[f"aten.op{i}.default"] = entries
    operators["aten.softmax.int"] = operators.pop("aten.op0.default")
    return MatrixModel(
        backend=BackendId(name="cpu", device_type="cpu", dispatch_key="CPU"),
        evidence=Evidence(opmatrix_version="0.1.0", torch_version="2.13.0", python="3.11", platform="Linux"),
        operators=operators,
    )


class _Clock:
    """Wall and CPU seconds of a block: on a shared, busy machine the CPU time is the fair figure."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def __str__(self) -> str:
        return f"{self.wall:.3f} s wall / {self.cpu:.3f} s CPU"


def _rate(fn, n: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    with _Clock() as c:
        fn(n)
    return n / c.wall, n / c.cpu


def committed(folder: Path) -> None:
    """Strict load (parse + validate, no cache) of every committed full matrix; goal < 1 s each."""
    for path in sorted(folder.glob("*.yaml")):
        with _Clock() as fast:
            model = load_matrix(path)
        with _Clock() as constructor:
            again = _constructor_load(path)
        assert again == model
        print(f"strict load {path.name} ({path.stat().st_size / 1e6:.1f} MB, {model.cell_count():,} cells): "
              f"{fast} (goal < 1 s); PyYAML constructor-based strict loader: {constructor}")


def _constructor_load(path: Path) -> MatrixModel:
    from opmatrix.schema import validate_data
    from opmatrix.schema.yamlload import _strict_load

    text = path.read_text(encoding="utf-8")
    return validate_data(_strict_load(text, str(path), False), MatrixModel, str(path), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=700)
    parser.add_argument("--repeat", type=int, default=200_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPMATRIX_CACHE_DIR"] = str(Path(tmp) / "cache")
        path = Path(tmp) / "matrix.yaml"
        dump_model(generate(args.ops), path, command="bench/bench_query.py")
        size = path.stat().st_size
        shutil.rmtree(Path(tmp) / "cache")  # the writer stored its model there: measure a strict load
        with _Clock() as load:
            model = load_matrix(path)  # strict YAML load, as without a cache
        with _Clock() as index:
            m = MatrixIndex(model)
        MatrixIndex.load(path)  # fills the validated-model cache
        with _Clock() as cached:
            warm = MatrixIndex.load(path)
    assert warm.model == model
    print(f"matrix: {len(model.operators)} operators, {sum(map(len, model.operators.values()))} entries, "
          f"{len(m):,} cells, {size / 1e6:.1f} MB YAML; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"strict YAML load + validate: {load}")
    print(f"index build:                 {index}")
    print(f"MatrixIndex.load, cached model:   {cached} (load + index; goal < 1 s)")

    committed(Path(__file__).resolve().parent / "results")

    keys = [k for k, _ in m.cells()]
    rng = random.Random(1)
    sample = [keys[rng.randrange(len(keys))] for _ in range(1024)]
    plain = {k: a.path for k, a in m.cells()}

    def fixed(n: int) -> None:
        q = m.query
        for _ in range(n):
            q("aten.softmax.int", dtype="float32", rank=3, layout="contiguous")

    def rotating(n: int) -> None:
        q = m.query
        for i in range(n):
            op, dtype, rank, layout, mode = sample[i & 1023]
            q(op, dtype, rank, layout, mode)

    def with_args(n: int) -> None:
        q, a = m.query, {"dim": -1}
        for _ in range(n):
            q("aten.softmax.int", dtype="float32", rank=3, layout="contiguous", args=a)

    def baseline(n: int) -> None:
        get = plain.get
        for i in range(n):
            get(sample[i & 1023])

    n = args.repeat
    base_wall, base_cpu = _rate(baseline, n)
    print(f"{'plain dict lookup':<20} {base_wall:>12,.0f} /s wall {base_cpu:>12,.0f} /s CPU")
    for name, fn in (("query, one cell", fixed), ("query, 1024 cells", rotating), ("query with args", with_args)):
        wall, cpu = _rate(fn, n)
        goal = "; goal >= 500,000 /s" if fn is fixed else ""
        print(f"{name:<20} {wall:>12,.0f} /s wall {cpu:>12,.0f} /s CPU  ({cpu / base_cpu:.2f}x the plain dict{goal})")


if __name__ == "__main__":
    main()

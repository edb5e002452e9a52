"""Speed beside PyTorch's own ``test_dtypes``: the same operators, interleaved rounds.

The baseline is ``test_ops.py::TestCommon::test_dtypes`` as PyTorch runs it, minus the rest of
``test_ops.py`` (the test file is not in the wheel): a test module holding one ``TestCommon.test_dtypes``
decorated with ``@ops(op_db, dtypes=OpDTypes.none)`` and instantiated for the CPU with
``instantiate_device_type_tests``, run by ``python -m pytest -k`` naming exactly the selected
entries' tests (``test_dtypes_<op>_cpu``), in one process, as the issue's measurement ran
``test_ops.py -k "test_dtypes and cpu and (...)"``. The test body is test_dtypes' procedure
written out (:func:`test_dtypes_like`): for each dtype of ``all_types_and_complex_and(half,
bfloat16, bool)`` (plus complex32 when the op claims it), generate the samples with OpInfo's
defaults (``requires_grad`` for floating and complex dtypes), call the op forward on every sample
and, where an input requires grad, run ``backward`` on the first output with a random gradient.
PyTorch's real run costs more: pytest also collects every other test template of test_ops.py.

``--baseline unittest`` runs the same procedure as one plain ``TestCase`` test per OpInfo without
pytest or the device-type harness (OpInfo still re-seeds each sample from the test's name), and
``--baseline loop`` in a bare loop: leaner bars than PyTorch's own run. Every round also times the
unittest bar and prints its ratio beside the harness one (``--no-lean`` skips it).

Beside it, ``opmatrix probe --backend cpu --ops ... --no-runtime`` with ``--workers 1`` and
``--workers 2`` on the same names (the same entries: a plain name selects the op's variants in
both), each in a fresh output folder (nothing reused from an earlier journal). Caches:
``--caches cold`` (default) builds opmatrix's OpInfo name index once before the rounds, untimed
(it is keyed by torch's files, like ``__pycache__``: any second ``opmatrix`` command on a torch
install has it), and empties every other cache (overload traces, validated matrices, inductor)
before each opmatrix run; ``--caches none`` empties the index too (a first run ever);
``--caches warm`` keeps everything across rounds. Python bytecode and the OS page cache are warm
for both sides. Each run also prints the CPU seconds of all its processes (on a shared machine
the fairer figure).

    python bench/bench_vs_opinfo.py --ops add,mul,softmax,mm,sum --rounds 3

Each round also times the imports alone (torch, OpInfo's database, dynamo: what both sides
load before their first call; ``--no-imports`` skips it). Prints per round the walls and CPU
seconds, then the medians and both ratios (wall, and CPU seconds: on a shared machine the fairer
one); ``--record`` appends them as a row to docs/benchmarks.md with the load. The last line is
``ratio <one-worker opmatrix wall / baseline wall>``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _tensor_requires_grad(x: Any) -> bool:
    import torch

    if isinstance(x, dict):
        return any(_tensor_requires_grad(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_tensor_requires_grad(a) for a in x)
    return isinstance(x, torch.Tensor) and x.requires_grad


def _backward(sample: Any, result: Any) -> None:
    """test_dtypes' backward step: first tensor output, random gradient."""
    from collections.abc import Sequence

    import torch

    result = sample.output_process_fn_grad(result)
    if isinstance(result, torch.Tensor):
        tensor = result
    elif isinstance(result, Sequence) and result and isinstance(result[0], torch.Tensor):
        tensor = result[0]
    else:
        return
    tensor.backward(torch.randn_like(tensor))


def dtypes_of(op: Any) -> tuple[list[Any], set[Any]]:
    """test_dtypes' dtypes to try and those to try backward in."""
    import torch
    from torch.testing._internal.common_dtype import all_types_and_complex_and, floating_and_complex_types_and

    c32 = (torch.complex32,) if op.supports_dtype(torch.complex32, "cpu") else ()
    backward = set(floating_and_complex_types_and(torch.half, torch.bfloat16, *c32))
    return list(all_types_and_complex_and(torch.half, torch.bfloat16, torch.bool, *c32)), backward


def test_dtypes_like(op: Any) -> tuple[int, int]:
    """One OpInfo through test_dtypes' procedure; returns (forward calls, backward calls)."""
    fwd = bwd = 0
    dtypes, backward_dtypes = dtypes_of(op)
    for dtype in dtypes:
        try:
            samples = tuple(op.sample_inputs("cpu", dtype, requires_grad=dtype in backward_dtypes))
        except Exception:  # noqa: BLE001 - test_dtypes: a failing sample generator means unsupported
            continue
        for sample in samples:
            try:
                result = op(sample.input, *sample.args, **sample.kwargs)
                fwd += 1
            except Exception:  # noqa: BLE001 - unsupported dtype, as test_dtypes records it
                continue
            if not (_tensor_requires_grad(sample.input) or _tensor_requires_grad(sample.args)
                    or _tensor_requires_grad(sample.kwargs)):
                continue
            try:
                _backward(sample, result)
                bwd += 1
            except Exception:  # noqa: BLE001 - unsupported backward dtype
                pass
    return fwd, bwd


def _as_unittest(entries: list[Any]) -> tuple[int, int]:
    """test_dtypes as PyTorch runs it: one ``TestCase`` test per OpInfo (``test_dtypes_<op>_cpu``
    of ``TestCommonCPU``), so OpInfo's sample tracking finds the running test and re-seeds every
    sample from the test's name, as it does under ``test_ops.py``. No pytest, no collection of
    the other tests: PyTorch's own run costs more than this."""
    import io
    import unittest

    from torch.testing._internal.common_utils import TestCase

    counts = [0, 0]

    def make(info: Any) -> Any:
        def test(self: Any) -> None:
            f, b = test_dtypes_like(info)
            counts[0], counts[1] = counts[0] + f, counts[1] + b
        return test

    methods = {f"test_dtypes_{e.full_name.replace('.', '_')}_cpu": make(e.info) for e in entries}
    case = type("TestCommonCPU", (TestCase,), methods)
    suite = unittest.TestSuite(case(name) for name in methods)
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    if result.errors or result.failures:
        sys.exit(f"baseline test errors: {(result.errors or result.failures)[0][1][-2000:]}")
    return counts[0], counts[1]


#: the test module of the ``pytest`` baseline: test_dtypes the way test_ops.py declares it
HARNESS = '''\
import os, sys, atexit
sys.path.insert(0, {bench!r})
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from bench_vs_opinfo import test_dtypes_like

_calls = [0, 0, 0]


@atexit.register
def _report():
    if _calls[2]:
        print(f"baseline (pytest harness): {{_calls[2]}} entries, {{_calls[0]}} forward + {{_calls[1]}} backward calls")


class TestCommon(TestCase):
    @ops(op_db, dtypes=OpDTypes.none)
    def test_dtypes(self, device, op):
        f, b = test_dtypes_like(op)
        _calls[0], _calls[1], _calls[2] = _calls[0] + f, _calls[1] + b, _calls[2] + 1


instantiate_device_type_tests(TestCommon, globals(), only_for="cpu")
'''


def harness_tests(names: list[str]) -> list[str]:
    """The instantiated test names (``test_dtypes_<op>_cpu``) of the entries ``names`` selects."""
    from opmatrix.probes.ops.source import select_ops

    return [f"test_dtypes_{e.full_name.replace('.', '_')}_cpu" for e in select_ops(names)]


def run_harness(tests: list[str], env: dict[str, str], folder: Path, module: Path | None = None
                ) -> tuple[float, float, str]:
    """``python -m pytest -k`` on the harness module (or on PyTorch's own ``module``, e.g. a
    ``test_ops.py`` kept outside the repository), selecting exactly ``tests``."""
    if module is None:
        module = folder / "test_dtypes_harness.py"
        if not module.exists():
            module.write_text(HARNESS.format(bench=str(ROOT / "bench")))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module), "-k", " or ".join(tests)]
    wall, cpu, text = _timed(cmd, env)
    lines = text.splitlines()
    summary = next((line for line in lines if line.startswith("baseline (pytest")), f"{module.name}: {len(tests)} tests")
    passed = next((line for line in lines if " passed" in line), "")
    # an OpInfo that skips test_dtypes for the CPU (its DecorateInfo) is skipped here as in PyTorch
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|error)", passed)}
    if counts.get("passed", 0) + counts.get("skipped", 0) != len(tests) or counts.get("failed") or counts.get("error"):
        sys.exit(f"the pytest baseline did not run all {len(tests)} tests cleanly:\n{text[-3000:]}")
    return wall, cpu, f"{summary}; pytest: {passed.strip()}\n{lines[-1]}"


def baseline_child(names: list[str], mode: str) -> None:
    """The baseline process: import op_db, select the entries, run test_dtypes' procedure."""
    t0 = time.perf_counter()
    from opmatrix.probes.ops.source import all_ops, select_ops

    all_ops()  # import op_db here, as a test session does at collection
    entries = select_ops(names)
    t1 = time.perf_counter()
    fwd = bwd = 0
    if mode == "unittest":
        fwd, bwd = _as_unittest(entries)
    else:
        for e in entries:
            f, b = test_dtypes_like(e.info)
            fwd, bwd = fwd + f, bwd + b
    t2 = time.perf_counter()
    print(f"baseline ({mode}): {len(entries)} entries, {fwd} forward + {bwd} backward calls, "
          f"import {t1 - t0:.1f} s, loop {t2 - t1:.1f} s", flush=True)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (all its processes) of ``cmd``, and its output (the CPU seconds last)."""
    t0, c0 = time.perf_counter(), _children_cpu()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if res.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd[:6])} ... failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return wall, cpu, f"{res.stdout.strip()}\n{cpu:.1f} s CPU"


def run_baseline(names: list[str], env: dict[str, str], mode: str) -> tuple[float, float, str]:
    return _timed([sys.executable, __file__, "--baseline-child", "--baseline", mode, "--ops", ",".join(names)], env)


def _env(env: dict[str, str], caches: Path) -> dict[str, str]:
    return {**env, "OPMATRIX_CACHE_DIR": str(caches / "opmatrix"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor")}


def prime_index(env: dict[str, str], caches: Path) -> None:
    """Build opmatrix's OpInfo name index (untimed): it is keyed by torch's files, like __pycache__."""
    code = "from opmatrix.probes.ops.source import all_ops; all_ops()"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(env, caches), check=True, capture_output=True)


def run_opmatrix(names: list[str], workers: int, env: dict[str, str], caches: Path, cold: bool,
                 extra: list[str]) -> tuple[float, float, str]:
    if cold:  # every cache but the name index: overloads, validated matrices, inductor
        for entry in caches.glob("*/*"):
            if entry.name != "opinfo":
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()
    out = Path(tempfile.mkdtemp(prefix=f"bench-opm-w{workers}-"))
    env = _env(env, caches)
    cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "cpu", "--ops", ",".join(names),
           "--no-runtime", "--workers", str(workers), "--out", str(out), "--quiet", *extra]
    try:
        wall, cpu, text = _timed(cmd, env)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    lines = text.splitlines()  # the probe's summary line first, the CPU seconds last
    return wall, cpu, f"{lines[0]}\n{lines[-1]}"


#: what both sides import before their first call: torch, OpInfo's database (which imports the
#: compiler stack through ``common_device_type``) and dynamo (opmatrix's compile check)
IMPORTS = ("import torch; from torch.testing._internal.common_methods_invocations import op_db; "
           "import torch._dynamo; print(f'imports: {len(op_db)} OpInfo entries')")


def run_imports(env: dict[str, str]) -> tuple[float, float, str]:
    """The import cost alone (a floor under both sides' walls), measured beside them each round."""
    return _timed([sys.executable, "-c", IMPORTS], env)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", required=True, help="comma-separated OpInfo names (as opmatrix --ops)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--caches", choices=["none", "cold", "warm"], default="cold",
                    help="none: every cache empty, the name index too; cold (default): the OpInfo name index "
                    "built once, untimed, every other cache empty per run; warm: caches kept across rounds")
    ap.add_argument("--no-two", action="store_true", help="skip the two-worker runs")
    ap.add_argument("--probe-arg", action="append", default=[], help="extra argument for opmatrix probe")
    ap.add_argument("--baseline", choices=["pytest", "unittest", "loop"], default="pytest",
                    help="pytest (default): test_dtypes through PyTorch's device-type harness under pytest -k, as "
                    "PyTorch runs it; unittest: the same procedure as one plain TestCase test per OpInfo (OpInfo "
                    "re-seeds each sample from the test's name); loop: a bare loop, samples seeded once per call")
    ap.add_argument("--no-lean", action="store_true", help="do not also time the unittest bar each round")
    ap.add_argument("--test-ops", type=Path, metavar="PATH",
                    help="also time PyTorch's own test/test_ops.py (a copy outside the repository; it is not in "
                    "the wheel) on the same tests each round, to calibrate the harness against it")
    ap.add_argument("--no-imports", action="store_true", help="do not also time the imports alone each round")
    ap.add_argument("--record", action="store_true", help="append a row to docs/benchmarks.md (bench/benchdoc.py)")
    ap.add_argument("--baseline-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = [n.strip() for n in args.ops.split(",") if n.strip()]
    if args.baseline_child:
        baseline_child(names, args.baseline)
        return
    from benchdoc import Run

    bench = Run("bench_vs_opinfo")
    env = {k: v for k, v in os.environ.items() if k not in ("OPMATRIX_NO_CACHE",)}
    caches = Path(tempfile.mkdtemp(prefix="bench-opm-caches-"))
    if args.caches != "none":
        prime_index(env, caches)
    print(f"{len(names)} names, {args.rounds} round(s), caches {args.caches}, {os.cpu_count()} cores, "
          f"load {_load()}", flush=True)
    try:
        times = _rounds(args, names, env, caches)
    finally:
        shutil.rmtree(caches, ignore_errors=True)
    figures = _summary(args, times)
    if args.record:
        bench.record(figures)
    print(f"load {_load()}")
    print(f"ratio {figures['ratio']}")


def _rounds(args: argparse.Namespace, names: list[str], env: dict[str, str], caches: Path
            ) -> dict[str, list[tuple[float, float]]]:
    """Every round's runs, interleaved: (wall, CPU seconds) per kind of run."""
    lean = "unittest" if args.baseline == "pytest" and not args.no_lean else None
    times: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("baseline", "lean", "test_ops", "imports", "opmatrix-1", "opmatrix-2")}
    tests = harness_tests(names) if args.baseline == "pytest" or args.test_ops else []
    skipped = {"opmatrix-2": args.no_two, "lean": lean is None, "test_ops": args.test_ops is None,
               "imports": args.no_imports}
    for r in range(args.rounds):
        order = ["baseline", "lean", "test_ops", "imports", "opmatrix-1", "opmatrix-2"]
        if r % 2:
            order.reverse()  # interleave: neither side always runs first
        for what in order:
            if skipped.get(what):
                continue
            if what == "test_ops":
                wall, cpu, text = run_harness(tests, env, caches, args.test_ops.resolve())
            elif what == "baseline" and args.baseline == "pytest":
                wall, cpu, text = run_harness(tests, env, caches)
            elif what in ("baseline", "lean"):
                wall, cpu, text = run_baseline(names, env, lean if what == "lean" else args.baseline)
            elif what == "imports":
                wall, cpu, text = run_imports(env)
            else:
                wall, cpu, text = run_opmatrix(names, int(what[-1]), env, caches, args.caches != "warm",
                                               args.probe_arg)
                if args.caches == "none":
                    shutil.rmtree(caches / "opmatrix" / "opinfo", ignore_errors=True)
            times[what].append((wall, cpu))
            lines = text.splitlines()
            print(f"round {r + 1} {what:11s} {wall:7.1f} s wall {lines[-1]:>12}  load {_load()}  | {lines[-2]}",
                  flush=True)
    return times


def _summary(args: argparse.Namespace, times: dict[str, list[tuple[float, float]]]) -> dict[str, str]:
    """Print the medians and ratios (wall, and CPU seconds: on a shared machine the fairer
    figure); returns them as the figures of a benchmarks.md row, ``ratio`` the one-worker wall's."""
    def med(what: str, i: int = 0) -> float:
        return statistics.median(t[i] for t in times[what])

    base, one, base_cpu, one_cpu = med("baseline"), med("opmatrix-1"), med("baseline", 1), med("opmatrix-1", 1)
    figures = {"baseline": f"{base:.1f} s ({base_cpu:.1f} s CPU)",
               "1 worker": f"{one:.1f} s ({one_cpu:.1f} s CPU)"}
    print(f"median baseline (test_dtypes, {args.baseline}) {base:.1f} s; opmatrix 1 worker {one:.1f} s "
          f"({one / base:.2f}x)", end="")
    if times["opmatrix-2"]:
        two = med("opmatrix-2")
        figures["2 workers"] = f"{two:.1f} s ({med('opmatrix-2', 1):.1f} s CPU, {two / base:.2f}x)"
        print(f"; 2 workers {two:.1f} s ({two / base:.2f}x)")
    else:
        print()
    print(f"CPU seconds: baseline {base_cpu:.1f}, opmatrix 1 worker {one_cpu:.1f} ({one_cpu / base_cpu:.2f}x)"
          + (f", 2 workers {med('opmatrix-2', 1):.1f}" if times["opmatrix-2"] else ""))
    if times["imports"]:
        figures["imports"] = f"{med('imports'):.1f} s ({med('imports', 1):.1f} s CPU)"
        print(f"imports alone (torch, OpInfo, dynamo; both sides pay them) {med('imports'):.1f} s wall, "
              f"{med('imports', 1):.1f} s CPU")
    if times["lean"]:
        bar = med("lean")
        two_lean = f"; 2 workers {med('opmatrix-2') / bar:.2f}x" if times["opmatrix-2"] else ""
        print(f"leaner bar (unittest, no pytest or device-type harness) {bar:.1f} s: 1 worker {one / bar:.2f}x{two_lean}")
    if times["test_ops"]:
        own = med("test_ops")
        two_own = f"; 2 workers {med('opmatrix-2') / own:.2f}x" if times["opmatrix-2"] else ""
        print(f"PyTorch's own test_ops.py {own:.1f} s: 1 worker {one / own:.2f}x{two_own}; "
              f"the harness baseline is {base / own:.2f}x of it")
    figures["cpu ratio"] = f"{one_cpu / base_cpu:.2f}"
    figures["ratio"] = f"{one / base:.2f}"
    return figures


if __name__ == "__main__":
    main()

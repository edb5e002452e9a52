"""The options of ``opmatrix probe``, ``bench`` and ``doctor``, declared once (see :mod:`opmatrix.schema.options`).

    >>> from opmatrix.probes.options import ProbeOptions
    >>> ProbeOptions(backend="refaccel", generation="g2", ops=("add",), no_runtime=True).command_line()
    'opmatrix probe --backend refaccel --generation g2 --ops add --no-runtime'

The CLI builds its parser from these classes; ``opmatrix.probe(ProbeOptions(...))`` takes them
from Python. Values are checked when the object is made (types, empty lists, bounds, choices);
what needs the backend or OpInfo (unknown op, generation, adapter) is checked by planning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from opmatrix.schema.enums import DTYPES, Layout
from opmatrix.schema.io import UsageError
from opmatrix.schema.options import Options, option

__all__ = ["parse_ranks", "BenchOptions", "DoctorOptions", "ProbeOptions", "SUITES", "DEFAULT_SUITES", "WORKLOAD_DTYPES",
           "WORKLOAD_MODES"]

#: the suites ``--suites`` may name
SUITES: tuple[str, ...] = ("runtime", "ops", "workloads", "distributed")
DEFAULT_SUITES: tuple[str, ...] = ("runtime", "ops")
WORKLOAD_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
WORKLOAD_MODES: tuple[str, ...] = ("eager", "compile")
_BACKEND_HELP = ("cpu, meta, cuda, mps, xpu, refaccel, xla, package.module:attr (an adapter class or factory; "
                 "a module that is not installed is looked for in the current directory) or privateuse1:package.module "
                 "(a module that registers a PrivateUse1 device when imported)")


def parse_ranks(text: str) -> tuple[int, int]:
    """``"2-5"`` -> (2, 5); ``"4"`` -> (4, 4); ValueError naming the fix otherwise."""
    lo, sep, hi = str(text).partition("-")
    try:
        low, high = int(lo), int(hi if sep else lo)
    except ValueError:
        raise ValueError(f"--ranks: expected LO-HI like 2-5 (or one rank), got {text!r}") from None
    if not 0 <= low <= high <= 8:
        raise ValueError(f"--ranks: expected 0 <= LO <= HI <= 8, got {text!r}")
    return low, high



@dataclass(frozen=True, kw_only=True)
class ProbeOptions(Options):
    """``opmatrix probe``: probe a backend -> DIR/journal.jsonl, DIR/matrix.yaml."""

    verb: ClassVar[str] = "probe"
    summary: ClassVar[str] = "probe a backend -> DIR/journal.jsonl, DIR/matrix.yaml"

    backend: str = option(help=_BACKEND_HELP)
    generation: str | None = option(None, help="device generation (refaccel: g1 or g2)")
    ops: tuple[str, ...] | None = option(None, help="comma-separated OpInfo names or fnmatch patterns (default: all)",
                                         if_empty="name OpInfo names or patterns (e.g. --ops softmax,add or --ops "
                                         "'linalg.*'), or leave --ops out to probe every op")
    dtypes: tuple[str, ...] | None = option(None, choices=DTYPES,
                                            help="comma-separated dtypes (default: the 11 standard ones)")
    layouts: tuple[str, ...] | None = option(None, choices=tuple(lay.value for lay in Layout),
                                             help="comma-separated layouts (default: all)")
    ranks: str | None = option(None, metavar="LO-HI",
                               help="declared ranks, e.g. 2-5: OpInfo's samples are extended (leading dimensions, by "
                               "op family) to the ranks they do not reach; cells say source: rank extension")
    workers: int | None = option(None, min=1, help="worker processes (default: cores)")
    threads: int = option(1, min=1, help="torch intra-op threads per worker (default 1: probe tensors are small, "
                          "and on a shared machine two OpenMP threads per worker wait on each other)")
    timeout: float = option(60.0, above=0, unit="seconds", help="seconds a unit may run without progress before it is called hung "
                            "(5x for compile units)")
    resume: bool = option(False, help="continue from DIR/journal.jsonl")
    devices: tuple[str, ...] | None = option(None, help="all, or device indices like 0,1,3: one worker per device "
                                             "(chosen inside the worker), each cell records its device; a wrong cell "
                                             "is probed again on another device (device-dependent)")
    executor: str = option("local", choices=("local", "ray"),
                           help="where workers run: local processes, or Ray actors, one per device of a Ray cluster "
                           "(pip install \"opmatrix[ray]\")")
    ray_address: str | None = option(None, metavar="auto|HOST:PORT",
                                     help="--executor ray: the cluster to join (default: start a local Ray instance)")
    ray_resource: str | None = option(None, metavar="NAME",
                                      help="--executor ray: the Ray resource one device is (default GPU for cuda, else "
                                      "the device type, e.g. refaccel)")
    shard: str | None = option(None, help="probe slice I of N, as I/N (1-based)")
    out: str | None = option(None, help="output directory (default out/<backend>[-<generation>])")
    suites: tuple[str, ...] | None = option(None, choices=SUITES,
                                            help="comma list of runtime, ops, workloads, distributed (default runtime,ops)")
    runtime_only: bool = option(False, help="run only the level 0/1 runtime checks")
    no_runtime: bool = option(False, help="skip the runtime checks")
    no_compile: bool = option(False, help="skip compile-mode probes (same as --compile off)")
    compile: str = option("auto", choices=("off", "auto", "all"),
                          help="compile-mode probes: auto = cells unavailable in eager, plus compiled == eager for "
                          "one sample per op at float32; all = that check at every dtype")
    compile_backend: str | None = option(None, metavar="NAME",
                                         help="torch.compile backend for compile-mode probes and workloads (default: "
                                         "the adapter's, e.g. aot_eager for cpu; inductor builds C++ kernels, tens of "
                                         "seconds a graph)")
    max_restarts: int | None = option(None, min=0, help="abort after this many worker replacements")
    quiet: bool = option(False, help="no progress bar")
    force: bool = option(False, recorded=False, help="write into a non-empty --out that opmatrix did not make")
    workloads: tuple[str, ...] | None = option(None, help="workloads to run (--suites workloads): all, or a comma "
                                               "list of catalog names and pkg.mod:factory (default all)")
    workload_dtypes: tuple[str, ...] | None = option(None, choices=WORKLOAD_DTYPES,
                                                     help="workload dtypes (default float32,bfloat16,float16)")
    workload_modes: tuple[str, ...] | None = option(None, choices=WORKLOAD_MODES,
                                                    help="eager, compile or both")

    def check(self) -> None:
        if self.devices is not None and self.devices != ("all",) and not all(d.isascii() and d.isdigit() for d in self.devices):
            raise UsageError(f"--devices: expected all or device indices like 0,1, got {','.join(self.devices)!r}")
        if self.devices is not None and len({d if d == "all" else int(d) for d in self.devices}) != len(self.devices):
            raise UsageError(f"--devices: a device is named twice in {','.join(self.devices)!r}")
        if self.executor != "ray" and (self.ray_address or self.ray_resource):
            raise UsageError("--ray-address / --ray-resource: only with --executor ray")
        if self.executor == "ray" and self.devices is not None:
            raise UsageError("--devices with --executor ray: Ray places one worker on each device of its nodes; "
                             "leave --devices out (or choose nodes with --ray-resource)")
        if self.ranks is not None:
            try:
                parse_ranks(self.ranks)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        if self.runtime_only and self.no_runtime:
            raise UsageError("--runtime-only and --no-runtime: choose one")

    def chosen_suites(self) -> set[str]:
        """The suites this run includes: ``--suites`` (else runtime,ops, plus workloads when
        ``--workloads`` is given), then ``--runtime-only`` / ``--no-runtime`` as aliases."""
        suites = set(self.suites or DEFAULT_SUITES)
        if self.suites is None and self.workloads is not None:
            suites.add("workloads")
        if self.runtime_only:
            suites = {"runtime"}
        if self.no_runtime:
            suites.discard("runtime")
        if not suites:
            raise UsageError("--no-runtime: it leaves no suite to run; name one with --suites (e.g. --suites ops)")
        return suites


@dataclass(frozen=True, kw_only=True)
class BenchOptions(Options):
    """``opmatrix bench``: level 6, measure workloads and hot ops -> DIR/*.yaml performance records."""

    verb: ClassVar[str] = "bench"
    summary: ClassVar[str] = "level 6: measure workloads and hot ops -> DIR/*.yaml performance records"

    backend: str = option(help=_BACKEND_HELP)
    generation: str | None = option(None, help="device generation (refaccel: g1 or g2)")
    workloads: tuple[str, ...] | None = option(None, help="comma-separated workloads (default mlp,cnn unless --ops)")
    ops: tuple[str, ...] | None = option(None, help="comma-separated hot operators, e.g. add,mm")
    modes: tuple[str, ...] = option(("eager", "compile"), choices=WORKLOAD_MODES,
                                    help="workload modes")
    dtype: str = option("float32", choices=WORKLOAD_DTYPES, help="dtype of every measured subject")
    seed: int = option(0, min=0, help="random seed of the inputs and weights")
    warmup: int = option(10, min=0, help="untimed iterations before measuring")
    repetitions: int = option(15, min=1, help="timed windows per run")
    runs: int = option(3, min=1, help="separate processes per subject, interleaved")
    window_ms: float = option(20.0, above=0, help="target duration of one timed window in ms")
    threads: int = option(1, min=1, help="torch intra-op threads (default 1: reproducible)")
    timeout: float = option(600.0, above=0, unit="seconds", help="deadline per measured subject in seconds")
    slowdown: float = option(1.0, min=1.0, help="testing: make every window this much slower (1.3 = 30% slower)")
    out: str = option(help="output directory")


@dataclass(frozen=True, kw_only=True)
class DoctorOptions(Options):
    """``opmatrix doctor``: level 0/1 diagnostics in bring-up order."""

    verb: ClassVar[str] = "doctor"
    summary: ClassVar[str] = "level 0/1 diagnostics in bring-up order"

    backend: str = option(help=_BACKEND_HELP)
    generation: str | None = option(None, help="device generation (refaccel: g1 or g2)")
    level: int = option(1, min=1, help="1: level 0/1 checks (default); 5: also the distributed suite "
                        "(collectives, DDP, failures)")
    json: bool = option(False, help="print one JSON object")

    def check(self) -> None:
        if self.level not in (1, 5):
            raise UsageError(f"--level: {self.level} is not 1 or 5 (1: level 0/1 checks; 5: also distributed)")

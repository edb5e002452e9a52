"""``opmatrix compat``: probe the same op set under each promised torch version -> DIR/compat.yaml.

    opmatrix compat --backend cpu --torch 2.9.0,2.13.0 --ops add,mul,mm,softmax --out out/compat

Each version runs in its own environment outside the clone: the current interpreter when its torch
is that version, otherwise a torch install cached under ``~/.cache/opmatrix`` (``venv-torch<V>`` or
the ``make test-xla`` environment ``venv-xla-torch<V>-*``), overlaid by a fresh venv
(``~/.cache/opmatrix/compat/...``) that sees that torch first and this clone's opmatrix after it.
Nothing is downloaded. Per version: an install check (fresh venv + import of torch, opmatrix and
the backend, timed), ``opmatrix doctor``, a profiler check, and ``opmatrix probe`` of the op set;
the report is judged by the gate's level 7 (:mod:`.compat`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from opmatrix.schema import ExitCode, Matrix, dump_model, load_matrix
from opmatrix.schema.perf import CompatCheck, CompatReport, CompatRun

from .options import CompatOptions

__all__ = ["compat", "find_torch_env", "matrix_cells"]

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opmatrix"


def _torch_site(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def find_torch_env(version: str) -> Path | None:
    """The Python of a cached environment that holds torch ``version`` (None when there is none)."""
    candidates = [CACHE / f"venv-torch{version}", *sorted(CACHE.glob(f"venv-xla-torch{version}-*"))]
    for env in candidates:
        python = env / "bin" / "python"
        sites = list(env.glob("lib/python*/site-packages/torch/version.py"))
        if python.exists() and sites and f"'{version}" in sites[0].read_text():
            return python
    return None


def _overlay(torch_python: Path, version: str) -> tuple[Path, float]:
    """A fresh venv that sees the cached torch first and this environment's packages after it."""
    key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:10]
    env = CACHE / "compat" / f"overlay-{key}-torch{version}"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(_torch_site(python))
    (site / "00-torch.pth").write_text(_torch_site(torch_python) + "\n")
    here = sysconfig.get_paths()["purelib"]
    (site / "10-opmatrix.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    return python, time.monotonic() - t0


def _run(python: Path, args: list[str], timeout: float) -> tuple[bool, float, str]:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONNOUSERSITE": "1"}
    t0 = time.monotonic()
    try:
        p = subprocess.run([str(python), *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - t0, f"timed out after {timeout:g} s"
    text = (p.stdout.strip().splitlines() or [""])[-1] if p.returncode == 0 else \
        (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
    return p.returncode == 0, time.monotonic() - t0, text[:300]


def _generation(seen: list[str | None], asked: str | None) -> str | None:
    """The generation the versions' matrices name (each probed matrix records the one it ran on);
    none when they disagree, so that the report proves no generation."""
    named = set(seen)
    if not named:
        return asked
    return named.pop() if len(named) == 1 else None


def matrix_cells(path: Path) -> dict[str, str]:
    """Cell label -> ``path/outcome`` for every cell of a matrix."""
    return _cells(load_matrix(path))


def _cells(m: Matrix) -> dict[str, str]:
    out = {}
    for op, entries in m.operators.items():
        for e in entries:
            cond = "".join(f" {k}={v}" for k, v in sorted(e.conditions.items()))
            for dtype, rank, layout, mode in e.cells():
                out[f"{op} {dtype} rank {rank} {layout} {mode}{cond}"] = f"{e.path.value}/{e.outcome.value}"
    return out


def _interpreter(version: str) -> tuple[Path | None, CompatCheck | None, str | None]:
    """The Python to run ``version`` with, the install check, or why there is none."""
    from importlib.metadata import version as installed

    if installed("torch").split("+")[0] == version:
        python = Path(sys.executable)
        ok, secs, text = _run(python, ["-c", "import torch, opmatrix; print(torch.__version__)"], 300)
        return python, CompatCheck(name="install", ok=ok, seconds=round(secs, 2),
                                   detail=f"this environment ({sys.prefix}); import torch + opmatrix: {text}"), None
    cached = find_torch_env(version)
    if cached is None:
        return None, None, (f"no cached environment with torch {version} under {CACHE} (venv-torch{version} or "
                            f"venv-xla-torch{version}-*; `make test-xla` creates the 2.9.0 one)")
    mine = ".".join(map(str, sys.version_info[:2]))
    theirs = subprocess.run([str(cached), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True).stdout.strip()
    if theirs != mine:
        return None, None, f"{cached} is Python {theirs}; the overlay needs Python {mine}"
    python, made = _overlay(cached, version)
    ok, secs, text = _run(python, ["-c", "import torch, opmatrix; print(torch.__version__)"], 300)
    detail = f"fresh venv {python.parent.parent} over {cached.parent.parent} ({made:.1f} s); import: {text}"
    return python, CompatCheck(name="install", ok=ok and text.startswith(version), seconds=round(made + secs, 2),
                               detail=detail), None


def _version_run(version: str, args: CompatOptions, out: Path) -> tuple[CompatRun, Matrix | None]:
    """One torch version's run, and the matrix its probe wrote (none when it wrote none)."""
    python, install, why = _interpreter(version)
    env_name = str(python) if python else "none"
    pyver = ".".join(map(str, sys.version_info[:3]))
    if python is None or install is None:
        return CompatRun(torch=version, python=pyver, environment=env_name, error=why), None
    checks = [install]
    gen = ["--generation", args.generation] if args.generation else []
    for name, cmd in (("doctor", ["-m", "opmatrix", "doctor", "--backend", args.backend, *gen]),
                      ("profiler", ["-m", "opmatrix.probes.perf.profcheck", args.backend])):
        ok, secs, text = _run(python, cmd, args.timeout)
        checks.append(CompatCheck(name=name, ok=ok, seconds=round(secs, 2), detail=text))
    where = out / f"torch-{version}"
    probe = ["-m", "opmatrix", "probe", "--backend", args.backend, *gen, "--ops", ",".join(args.ops), "--dtypes", "float32",
             "--no-compile", "--no-runtime", "--workers", "1", "--quiet", "--out", str(where)]
    ok, secs, text = _run(python, probe, args.timeout)
    checks.append(CompatCheck(name="probe", ok=ok, seconds=round(secs, 2), detail=text))
    matrix = load_matrix(where / "matrix.yaml") if (where / "matrix.yaml").exists() else None
    return CompatRun(torch=version, python=pyver, environment=env_name, checks=checks,
                     cells=_cells(matrix) if matrix else {},
                     error=None if ok else f"opmatrix probe failed: {text}"), matrix


def compat(args: CompatOptions) -> ExitCode:
    """Run ``opmatrix compat``: 0 when every version ran, 1 when one could not (see the report).

    The backend and the ops are checked by the caller (``opmatrix.compat``), which may import the
    backend and OpInfo; this package may not."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs, generations = [], []
    for version in args.torch:
        run, matrix = _version_run(version, args, out)
        runs.append(run)
        if matrix is not None:
            generations.append(matrix.backend.generation)
        status = run.error or ", ".join(f"{c.name} {'ok' if c.ok else 'FAILED'} ({c.seconds:.1f} s)" for c in run.checks)
        print(f"torch {version}: {status}; {len(run.cells)} cells")
    report = CompatReport(kind="compat-report", backend=args.backend, generation=_generation(generations, args.generation),
                          ops=list(args.ops), runs=runs,
                          measured_at=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat())
    dump_model(report, out / "compat.yaml", command=args.command_line())
    print(f"report: {out / 'compat.yaml'}")
    return ExitCode.FAILED if any(r.error for r in runs) else ExitCode.OK

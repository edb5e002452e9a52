"""Every ``>>>`` example in production code runs and passes; one that cannot run here (it needs a
probe's output, a vendor's module, or would poison the device) says why where it stands
(``# <reason>: not run  # doctest: +SKIP``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("opmatrix", "schema", "backend", "probes", "matrix", "reports", "ci")
#: runs the examples of the modules named on its command line; prints {module: failure report}
_RUNNER = """
import doctest, importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    out = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=out.append)
    if runner.summarize(verbose=False).failed:
        failed[name] = "".join(out)[-3000:]
print(json.dumps(failed))
"""


def _files() -> list[Path]:
    return [p for top in PACKAGES for p in sorted((ROOT / top).rglob("*.py")) if ">>>" in p.read_text(encoding="utf-8")]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[0] == "opmatrix" else ["opmatrix", *parts])


def test_the_examples_are_found() -> None:
    """The collection sees the modules that carry examples (a wrong root would find none and pass)."""
    names = [_module_name(p) for p in _files()]
    assert len(names) > 40 and "opmatrix.schema.exitcode" in names and "opmatrix.backend.refaccel.kernels" in names


def test_every_skipped_example_says_why() -> None:
    unexplained = [f"{p.relative_to(ROOT)}:{i}" for p in _files()
                   for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                   if re.search(r"#\s*doctest:.*\+SKIP", line) and not re.search(r"#[^#]*\S[^#]*#\s*doctest:", line)]
    assert not unexplained, f"examples skipped without a reason: {unexplained}"


def test_examples_run() -> None:
    """In a fresh process: refaccel's examples install the device and allocate on it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPMATRIX_REFACCEL")}
    names = sorted(_module_name(p) for p in _files())
    res = subprocess.run([sys.executable, "-c", _RUNNER, *names], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    failed = json.loads(res.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{name}:\n{text}" for name, text in failed.items())

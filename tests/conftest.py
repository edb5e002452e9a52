"""Shared fixtures: the repository root, the example artifacts, a CLI runner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "schema" / "examples"


@pytest.fixture
def example_matrix_path() -> Path:
    return EXAMPLES / "softmax-matrix.yaml"


@pytest.fixture
def example_contract_path() -> Path:
    return EXAMPLES / "refaccel-contract.yaml"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m opmatrix ARGS`` in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "opmatrix", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=timeout,
    )

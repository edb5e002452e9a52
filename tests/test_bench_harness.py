"""The speed bench's baseline is PyTorch's own test_dtypes harness, selecting exactly our entries."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

from .conftest import ROOT


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_vs_opinfo", ROOT / "bench" / "bench_vs_opinfo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_vs_opinfo", module)
    spec.loader.exec_module(module)
    return module


def test_the_harness_instantiates_one_test_per_selected_entry_with_the_names_the_bench_selects() -> None:
    """``-k`` names tests ``test_dtypes_<entry>_cpu``; PyTorch's ``@ops`` must make exactly those
    (a plain name selects its variants: softmax -> softmax, softmax.with_dtype)."""
    bench = _bench()
    namespace: dict[str, Any] = {"__name__": "harness_under_test"}
    exec(compile(bench.HARNESS.format(bench=str(ROOT / "bench")), "harness", "exec"), namespace)
    made = {name for name in vars(namespace["TestCommonCPU"]) if name.startswith("test_dtypes_")}
    tests = bench.harness_tests(["softmax", "add", "nn.functional.conv2d"])
    assert sorted(tests) == ["test_dtypes_add_cpu", "test_dtypes_nn_functional_conv2d_cpu",
                             "test_dtypes_softmax_cpu", "test_dtypes_softmax_with_dtype_cpu"]
    assert set(tests) <= made
    # -k matches substrings: no other instantiated test may contain a selected name
    assert [m for m in made - set(tests) if any(t in m for t in tests)] == []

"""refaccel g2: each of the five execution paths occurs for real, decided by PyTorch's dispatcher.

Evidence is what a probe can observe: registrations for PrivateUse1, the leaf ops a
``TorchDispatchMode`` records, the fallback counter, and the exception type and message. g1 runs
in a subprocess (one process serves one generation) and must differ from g2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unittest
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opmatrix.backend.refaccel as refaccel
from opmatrix.backend import get_adapter

refaccel.install()
_G2 = refaccel.installed_generation() == "g2"


class _Leaves(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _leaves(fn: Any) -> tuple[Any, list[str]]:
    mode = _Leaves()
    with mode:
        out = fn()
    return out, mode.ops


def _has_kernel(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


@unittest.skipUnless(_G2, "this process runs another generation")
class NativePathTest(unittest.TestCase):
    """Registered PrivateUse1 kernels run, computing what the CPU computes, with no fallback."""

    def test_elementwise_reduction_matmul(self) -> None:
        a, b = torch.randn(4, 5), torch.randn(5, 3)
        x, y = a.to("refaccel"), b.to("refaccel")
        refaccel.reset_fallback_counts()
        torch.testing.assert_close((x + 1).mul(x).cpu(), (a + 1).mul(a))
        torch.testing.assert_close(x.sum(1).cpu(), a.sum(1))
        torch.testing.assert_close((x @ y).cpu(), a @ b)
        torch.testing.assert_close(torch.bmm(x[None], y[None]).cpu(), torch.bmm(a[None], b[None]))
        torch.testing.assert_close(torch.addmm(x[:, :3], x, y).cpu(), torch.addmm(a[:, :3], a, b))
        torch.testing.assert_close(torch.cumsum(x, 1).cpu(), torch.cumsum(a, 1))
        self.assertEqual(refaccel.fallback_counts(), {})
        for op in ("aten::add.Tensor", "aten::mul.Tensor", "aten::mm", "aten::bmm", "aten::addmm", "aten::linear"):
            self.assertTrue(_has_kernel(op), op)

    def test_int_and_bool_elementwise_comparison_indexing(self) -> None:
        a = torch.arange(6, dtype=torch.int32).view(2, 3)
        x = a.to("refaccel")
        self.assertTrue(torch.equal((x * 3 + x).cpu(), a * 3 + a))
        self.assertTrue(torch.equal((x > 2).cpu(), a > 2))
        self.assertTrue(torch.equal(x[:, torch.tensor([2, 0]).to("refaccel")].cpu(), a[:, [2, 0]]))
        self.assertTrue(torch.equal((x > 2).logical_not().cpu(), (a > 2).logical_not()))

    def test_linear_is_native_and_differentiable(self) -> None:
        a, w = torch.randn(2, 3, 4), torch.randn(5, 4)
        x, y = a.to("refaccel"), w.to("refaccel")
        out, ops = _leaves(lambda: torch.nn.functional.linear(x, y))
        self.assertEqual(ops, ["aten.linear.default"])
        torch.testing.assert_close(out.cpu(), torch.nn.functional.linear(a, w))
        x = a.to("refaccel").requires_grad_()
        torch.nn.functional.linear(x, y).sum().backward()
        ref = a.clone().requires_grad_()
        torch.nn.functional.linear(ref, w).sum().backward()
        torch.testing.assert_close(x.grad.cpu(), ref.grad)


@unittest.skipUnless(_G2, "this process runs another generation")
class CompositePathTest(unittest.TestCase):
    """softmax: native _softmax for the last axis of contiguous input, native components otherwise."""

    def test_last_axis_is_one_native_kernel(self) -> None:
        a = torch.randn(3, 4, 5)
        x = a.to("refaccel")
        out, ops = _leaves(lambda: torch.softmax(x, -1))
        self.assertEqual(ops, ["aten._softmax.default"])
        torch.testing.assert_close(out.cpu(), torch.softmax(a, -1))

    def test_other_axis_and_strided_input_run_as_components(self) -> None:
        a = torch.randn(3, 4, 5)
        for dim, make in ((0, lambda t: t), (-1, lambda t: t.transpose(0, 2))):
            refaccel.reset_fallback_counts()
            x = make(a.to("refaccel"))
            out, ops = _leaves(lambda: torch.softmax(x, dim))  # noqa: B023 - called at once
            self.assertNotIn("aten._softmax.default", ops)
            self.assertTrue({"aten.amax.default", "aten.exp.default", "aten.div.Tensor"} <= set(ops), ops)
            self.assertEqual(refaccel.fallback_counts(), {})
            torch.testing.assert_close(out.cpu(), torch.softmax(make(a), dim))
        self.assertFalse(_has_kernel("aten::softmax.int"))

    def test_composite_backward_matches_cpu(self) -> None:
        a = torch.randn(4, 6)
        x = a.to("refaccel").requires_grad_()
        (torch.softmax(x, 0) * torch.arange(6.0).to("refaccel")).sum().backward()
        ref = a.clone().requires_grad_()
        (torch.softmax(ref, 0) * torch.arange(6.0)).sum().backward()
        torch.testing.assert_close(x.grad.cpu(), ref.grad)


@unittest.skipUnless(_G2, "this process runs another generation")
class DecomposedPathTest(unittest.TestCase):
    """addcmul is rejected in eager and runs through torch.compile(backend='refaccel')."""

    def test_addcmul_eager_rejected_compiled_native(self) -> None:
        a, b, c = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
        x, y, z = (t.to("refaccel") for t in (a, b, c))
        with self.assertRaisesRegex(NotImplementedError, r"aten::addcmul\.out is not supported on refaccel:0"):
            torch.addcmul(x, y, z, value=0.5)
        self.assertEqual(refaccel.register_compile_backend(), "refaccel")
        refaccel.reset_fallback_counts()
        fn = torch.compile(lambda p, q, r: torch.addcmul(p, q, r, value=0.5), backend="refaccel")
        torch.testing.assert_close(fn(x, y, z).cpu(), torch.addcmul(a, b, c, value=0.5))
        self.assertEqual(refaccel.fallback_counts(), {})

    def test_compiled_graph_never_falls_back_to_host(self) -> None:
        refaccel.register_compile_backend()
        fn = torch.compile(lambda t: torch.sort(t).values, backend="refaccel")
        with self.assertRaisesRegex(Exception, "host fallback is not available inside compiled graphs"):
            fn(torch.randn(5).to("refaccel"))


@unittest.skipUnless(_G2, "this process runs another generation")
class FallbackPathTest(unittest.TestCase):
    """sort / topk run on the host through the boxed fallback, counted per overload."""

    def test_sort_topk_counted_and_correct(self) -> None:
        a = torch.randn(4, 6)
        x = a.to("refaccel")
        refaccel.reset_fallback_counts()
        values, indices = torch.sort(x, dim=1)
        self.assertEqual(values.device, x.device)
        self.assertTrue(torch.equal(values.cpu(), torch.sort(a, dim=1).values))
        self.assertTrue(torch.equal(torch.topk(x, 2).values.cpu(), torch.topk(a, 2).values))
        self.assertEqual(refaccel.fallback_counts(), {"aten::sort.values_stable": 1, "aten::topk.values": 1})
        refaccel.reset_fallback_counts()
        self.assertEqual(refaccel.fallback_counts(), {})

    def test_out_arguments_respected(self) -> None:
        a = torch.randn(6)
        values, indices = torch.empty(0, device="refaccel"), torch.empty(0, dtype=torch.long, device="refaccel")
        torch.sort(a.to("refaccel"), out=(values, indices))
        self.assertTrue(torch.equal(values.cpu(), torch.sort(a).values))
        self.assertTrue(torch.equal(indices.cpu(), torch.sort(a).indices))

    def test_adapter_observes_fallback(self) -> None:
        adapter = get_adapter("refaccel", generation="g2")
        with adapter.observe_fallback() as seen:
            torch.topk(torch.randn(5).to("refaccel"), 2)
        self.assertEqual((str(seen.state), seen.ops), ("observed", ["aten::topk.values"]))
        with adapter.observe_fallback() as seen:
            torch.ones(3, device="refaccel") + 1
        self.assertEqual((str(seen.state), seen.ops), ("not_observed", []))


@unittest.skipUnless(_G2, "this process runs another generation")
class RejectedPathTest(unittest.TestCase):
    """Unsupported calls fail cleanly with op, dtype, layout and device named; the device stays usable."""

    def test_float64_add_names_everything(self) -> None:
        x = torch.ones(2, 3, dtype=torch.float64, device="refaccel")
        with self.assertRaises(NotImplementedError) as caught:
            x + 1
        self.assertEqual(
            str(caught.exception),
            "refaccel: aten::add.Tensor does not support dtype float64 on refaccel:0 (supported: dtypes float32, "
            "bfloat16, float16, int32, int64, bool; ranks 0-8; any layout) [call: dtype float64, layout "
            "contiguous, rank 2]",
        )
        self.assertEqual(get_adapter("refaccel").classify_exception(caught.exception).outcome, "rejected")
        self.assertEqual((torch.ones(2, device="refaccel") + 1).cpu().tolist(), [2.0, 2.0])

    def test_fallback_op_in_float64_and_int_matmul_rejected(self) -> None:
        with self.assertRaisesRegex(NotImplementedError, "host fallback does not serve dtype float64"):
            torch.sort(torch.ones(3, dtype=torch.float64, device="refaccel"))
        with self.assertRaisesRegex(NotImplementedError, "aten::mm does not support dtype int64"):
            torch.ones(2, 2, dtype=torch.long, device="refaccel") @ torch.ones(2, 2, dtype=torch.long, device="refaccel")


class KernelTableTest(unittest.TestCase):
    """The kernel table is data: validated once, with messages naming the entry."""

    def test_generations_and_subset(self) -> None:
        from opmatrix.backend.refaccel.table import load_rules

        g1, g2 = load_rules("g1"), load_rules("g2")
        self.assertLess(set(g1), set(g2))
        self.assertNotIn(torch.bfloat16, g1["aten::add.Tensor"].dtypes)
        self.assertEqual(g1["aten::mul.Tensor"].defect, "storage_order")
        self.assertIsNone(g2["aten::mul.Tensor"].defect)
        with self.assertRaisesRegex(ValueError, "unknown refaccel generation 'g9'"):
            load_rules("g9")

    def test_malformed_entry_names_its_place(self) -> None:
        from opmatrix.backend.refaccel.table import _rule

        with self.assertRaisesRegex(ValueError, r"kernels\[3\]\.g2\.dtypes: 'float128' is not a torch dtype"):
            _rule("aten::x", "f", {"dtypes": ["float128"]}, {}, "kernels[3].g2")
        with self.assertRaisesRegex(ValueError, r"kernels\[3\]\.g2: unknown keys \['speed'\]"):
            _rule("aten::x", "f", {"dtypes": ["float32"], "speed": 1}, {}, "kernels[3].g2")

    def test_install_is_idempotent_and_one_generation_per_process(self) -> None:
        gen = refaccel.installed_generation()
        self.assertEqual(refaccel.install(), gen)
        self.assertEqual(refaccel.install(gen), gen)
        other = "g1" if gen == "g2" else "g2"
        with self.assertRaisesRegex(RuntimeError, f"refaccel {gen} is already installed"):
            refaccel.install(other)


_G1_SCRIPT = textwrap.dedent(
    """
    import json, torch, opmatrix.backend.refaccel as r
    r.install()
    a = torch.randn(4, 6)
    x = a.to("refaccel")
    out = {}
    out["mul_strided_wrong"] = not torch.allclose((x.t() * 2).cpu(), a.t() * 2)
    out["mul_contiguous_right"] = torch.allclose((x * 2).cpu(), a * 2)
    try:
        torch.bmm(x[None], x.t()[None]); out["bmm"] = "ran"
    except NotImplementedError as e:
        out["bmm"] = str(e)
    try:
        x.bfloat16() + 1; out["bf16_add"] = "ran"
    except NotImplementedError as e:
        out["bf16_add"] = str(e)
    r.reset_fallback_counts(); torch.cumsum(x, 1); out["cumsum"] = r.fallback_counts()
    print(json.dumps(out))
    """
)


class GenerationDiffTest(unittest.TestCase):
    """g1 is a strict subset of g2 and carries the documented non-contiguous mul defect."""

    def test_g1_in_subprocess(self) -> None:
        import json

        env = dict(os.environ, OPMATRIX_REFACCEL_GEN="g1")
        proc = subprocess.run([sys.executable, "-c", _G1_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        self.assertTrue(out["mul_strided_wrong"])
        self.assertTrue(out["mul_contiguous_right"])
        self.assertIn("aten::bmm.out is not supported on refaccel:0 (generation g1", out["bmm"])
        self.assertIn("does not support dtype bfloat16", out["bf16_add"])
        self.assertEqual(out["cumsum"], {"aten::cumsum.out": 1})


if __name__ == "__main__":
    unittest.main()

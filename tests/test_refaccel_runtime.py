"""refaccel runtime: identity, allocator statistics and OOM, streams / events, RNG, serialization."""

from __future__ import annotations

import io
import threading
import time
import unittest

import torch

import opmatrix.backend.refaccel as refaccel

refaccel.install()
MiB = 1 << 20


class IdentityTest(unittest.TestCase):
    """Two devices with name, generation, capacity, stable UUID and version strings."""

    def test_properties_and_versions(self) -> None:
        p0, p1 = (torch.refaccel.get_device_properties(i) for i in range(2))
        self.assertNotEqual(p0.uuid, p1.uuid)
        self.assertEqual(p0.uuid, torch.refaccel.get_device_properties(0).uuid)
        self.assertGreater(p0.total_memory, 0)
        self.assertEqual(p0.generation, refaccel.installed_generation())
        versions = torch.refaccel.versions()
        for key in ("driver", "firmware", "isa", "backend_version"):
            self.assertTrue(versions[key], key)
        self.assertIn(torch.float32, torch.refaccel.get_device_capability()["supported_dtypes"])

    def test_generic_apis_not_served_say_so(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "device_allocator"):
            torch.accelerator.memory_allocated()
        with self.assertRaisesRegex(RuntimeError, "capabilities"):
            torch.accelerator.get_device_capability()


class AllocatorTest(unittest.TestCase):
    """Caching allocator: allocated / reserved / peak move as documented; OOM is clean."""

    def setUp(self) -> None:
        torch.refaccel.empty_cache()

    def test_allocated_reserved_peak_empty_cache(self) -> None:
        base = torch.refaccel.memory_allocated(1)
        x = torch.empty(MiB // 4, device="refaccel:1")  # 1 MiB
        self.assertEqual(torch.refaccel.memory_allocated(1) - base, MiB)
        self.assertGreaterEqual(torch.refaccel.max_memory_allocated(1), base + MiB)
        del x
        self.assertEqual(torch.refaccel.memory_allocated(1), base)
        self.assertEqual(torch.refaccel.memory_reserved(1) - base, MiB)  # cached, not released
        torch.refaccel.empty_cache()
        self.assertEqual(torch.refaccel.memory_reserved(1), base)
        torch.refaccel.reset_peak_memory_stats(1)
        self.assertEqual(torch.refaccel.max_memory_allocated(1), base)

    def test_op_results_freed_on_del_without_gc(self) -> None:
        import gc

        x = torch.ones(MiB // 4, device="refaccel")
        gc.disable()
        try:
            for make in (lambda: x + 1, lambda: torch.sort(x[:1000]).values, lambda: torch.softmax(x[:64], 0)):
                before = torch.refaccel.memory_allocated()
                y = make()
                self.assertGreater(torch.refaccel.memory_allocated(), before)
                del y
                self.assertEqual(torch.refaccel.memory_allocated(), before)
        finally:
            gc.enable()

    def test_cached_block_is_reused(self) -> None:
        x = torch.empty(MiB, dtype=torch.uint8, device="refaccel")
        reserved = torch.refaccel.memory_reserved()
        del x
        y = torch.empty(MiB, dtype=torch.uint8, device="refaccel")
        self.assertEqual(torch.refaccel.memory_reserved(), reserved)
        del y

    def test_oom_without_allocating_and_usable_after(self) -> None:
        ooms = torch.refaccel.memory_stats()["num_ooms"]
        start = time.perf_counter()
        with self.assertRaisesRegex(torch.OutOfMemoryError, "out of memory on refaccel:0: tried to allocate 16.00 TiB"):
            torch.empty(1 << 44, dtype=torch.uint8, device="refaccel")
        self.assertLess(time.perf_counter() - start, 1.0)
        self.assertEqual(torch.refaccel.memory_stats()["num_ooms"], ooms + 1)
        self.assertEqual((torch.ones(3, device="refaccel") * 2).cpu().tolist(), [2.0, 2.0, 2.0])

    def test_capacity_is_the_limit(self) -> None:
        free, total = torch.refaccel.mem_get_info()
        self.assertEqual(total, torch.refaccel.get_device_properties(0).total_memory)
        with self.assertRaises(torch.OutOfMemoryError):
            torch.empty(free + MiB, dtype=torch.uint8, device="refaccel")


class StreamsEventsTest(unittest.TestCase):
    """Stream ordering contract: record, wait, query, synchronize, elapsed_time; thread-local current."""

    def test_cross_stream_dependency_through_event(self) -> None:
        s1, s2 = torch.refaccel.Stream(), torch.refaccel.Stream()
        a = torch.randn(64, 64)
        with torch.refaccel.stream(s1):
            y = a.to("refaccel") @ a.to("refaccel")
            done = s1.record_event()
        s2.wait_event(done)
        with torch.refaccel.stream(s2):
            z = y + 1
        s2.synchronize()
        self.assertTrue(done.query() and s1.query() and s2.query())
        torch.testing.assert_close(z.cpu(), a @ a + 1)

    def test_elapsed_time_needs_timing_and_recording(self) -> None:
        start, end = torch.refaccel.Event(enable_timing=True), torch.refaccel.Event(enable_timing=True)
        start.record()
        torch.ones(1000, device="refaccel").sum()
        end.record()
        end.synchronize()
        self.assertGreaterEqual(start.elapsed_time(end), 0.0)
        with self.assertRaisesRegex(RuntimeError, "enable_timing"):
            torch.refaccel.Event().elapsed_time(end)
        with self.assertRaisesRegex(RuntimeError, "recorded"):
            torch.refaccel.Event(enable_timing=True).elapsed_time(end)

    def test_current_stream_is_thread_local(self) -> None:
        s = torch.refaccel.Stream()
        seen: list[int] = []
        with torch.refaccel.stream(s):
            self.assertEqual(torch.refaccel.current_stream(), s)
            t = threading.Thread(target=lambda: seen.append(torch.refaccel.current_stream().stream_id))
            t.start()
            t.join()
        self.assertEqual(seen, [0])
        self.assertEqual(torch.refaccel.current_stream(), torch.refaccel.default_stream())


class RngTest(unittest.TestCase):
    """Seeded generators make randn reproducible; state round-trips."""

    def test_manual_seed_reproducible(self) -> None:
        torch.manual_seed(1234)
        a = torch.randn(8, device="refaccel").cpu()
        torch.manual_seed(1234)
        b = torch.randn(8, device="refaccel").cpu()
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, torch.randn(8, device="refaccel").cpu()))

    def test_get_set_state(self) -> None:
        state = torch.refaccel.get_rng_state()
        a = torch.rand(5, device="refaccel").cpu()
        torch.refaccel.set_rng_state(state)
        self.assertTrue(torch.equal(a, torch.rand(5, device="refaccel").cpu()))
        self.assertEqual(torch.refaccel.initial_seed(), torch.refaccel.initial_seed())


class SerializationTest(unittest.TestCase):
    """torch.save / torch.load(weights_only=True) round trips, with map_location and shared views."""

    def _round_trip(self, obj: object, **kwargs: object) -> object:
        buf = io.BytesIO()
        torch.save(obj, buf)
        buf.seek(0)
        return torch.load(buf, weights_only=True, **kwargs)

    def test_round_trip_and_map_location(self) -> None:
        a = torch.randn(3, 4)
        x = a.to("refaccel:1")
        y = self._round_trip(x)
        self.assertEqual(y.device, torch.device("refaccel:1"))
        self.assertTrue(torch.equal(y.cpu(), a))
        self.assertEqual(self._round_trip(x, map_location="cpu").device, torch.device("cpu"))
        self.assertEqual(self._round_trip(x, map_location="refaccel:0").device, torch.device("refaccel:0"))

    def test_views_keep_sharing(self) -> None:
        base = torch.arange(6.0).to("refaccel")
        loaded = self._round_trip({"base": base, "view": base[2:].view(2, 2)})
        loaded["view"].fill_(0.0)
        self.assertEqual(loaded["base"].cpu().tolist(), [0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
        self.assertEqual(loaded["view"].storage_offset(), 2)


class FaultScopeModesTest(unittest.TestCase):
    """Each injected fault mode leaves exactly its scope unusable: the call, its stream, its device."""

    def tearDown(self) -> None:
        from opmatrix.backend.refaccel import faults

        faults.clear_faults()

    def test_fail_leaves_everything_usable(self) -> None:
        from opmatrix.backend.refaccel import faults

        x = torch.ones(4, device="refaccel:0")
        faults.inject_fault("fail", "aten::mul.Tensor")
        with self.assertRaisesRegex(RuntimeError, "kernel launch failed") as raised:
            x * x
        self.assertEqual(raised.exception.status, "REFACCEL_ERROR_LAUNCH_FAILED (719)")
        self.assertIn("firmware record", str(raised.exception.__cause__))
        faults.clear_faults()
        self.assertEqual((x * 3).cpu().tolist(), [3.0] * 4)

    def test_poison_stream_spares_other_streams(self) -> None:
        from opmatrix.backend.refaccel import faults, runtime

        x = torch.ones(4, device="refaccel:0")
        bad = torch.refaccel.Stream(0)
        faults.inject_fault("poison-stream", "aten::mul.Tensor")
        with torch.refaccel.stream(bad):
            with self.assertRaises(runtime.RefaccelStreamError):
                x * x
            faults.clear_faults()
            with self.assertRaisesRegex(RuntimeError, f"stream {bad.stream_id} on refaccel:0 is unusable"):
                x + 1
        with torch.refaccel.stream(torch.refaccel.Stream(0)):
            self.assertEqual((x + 1).cpu().tolist(), [2.0] * 4)
        self.assertEqual((x + 2).cpu().tolist(), [3.0] * 4)  # the default stream too

    def test_poison_device_outlives_the_process_until_reset(self) -> None:
        import os
        import subprocess
        import sys
        import tempfile
        from unittest import mock

        from opmatrix.backend.refaccel import faults, runtime

        fresh = ("import opmatrix.backend.refaccel as r, torch; r.install(); torch.refaccel.init()\n"
                 "try:\n    torch.ones(2, device='refaccel:1').cpu(); print('works')\n"
                 "except RuntimeError as e:\n    print('fails', e)")
        with tempfile.TemporaryDirectory() as state, mock.patch.dict(os.environ, {"OPMATRIX_REFACCEL_STATE_DIR": state}):
            x = torch.ones(4, device="refaccel:1")
            faults.inject_fault("poison-device", "aten::mul.Tensor")
            with torch.refaccel.device(1), self.assertRaises(runtime.RefaccelDeviceError):
                x * x
            faults.clear_faults()
            self.assertEqual((torch.ones(2, device="refaccel:0") + 1).cpu().tolist(), [2.0, 2.0])  # device 0 works
            with self.assertRaisesRegex(RuntimeError, "refaccel:1 is unavailable"):
                torch.ones(2, device="refaccel:1")
            child = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=300)
            self.assertIn("fails", child.stdout, child.stderr)
            self.assertIn("refaccel:1 reset", runtime.reset_device(1))
            child = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, timeout=300)
            self.assertEqual(child.stdout.strip(), "works", child.stderr)
            self.assertEqual((torch.ones(2, device="refaccel:1") * 2).cpu().tolist(), [2.0, 2.0])


class MemoryClassesTest(unittest.TestCase):
    """Pinned host memory, peer access, stream priorities, graph replay, the compile cache's identity."""

    def test_pinned_memory_and_peer_copies(self) -> None:
        host = torch.arange(8.0)
        pinned = host.pin_memory()
        self.assertTrue(pinned.is_pinned())
        self.assertFalse(host.is_pinned())
        dev = torch.empty(8, device="refaccel:0")
        dev.copy_(pinned, non_blocking=True)
        torch.refaccel.synchronize()
        self.assertTrue(torch.refaccel.can_device_access_peer(0, 1))
        self.assertFalse(torch.refaccel.can_device_access_peer(0, 0))
        self.assertEqual(dev.to("refaccel:1").cpu().tolist(), host.tolist())

    def test_priorities_clamp_to_the_reported_range(self) -> None:
        least, greatest = torch.refaccel.Stream.priority_range()
        self.assertLess(greatest, least)
        self.assertEqual(torch.refaccel.Stream(priority=greatest - 5).priority, greatest)
        self.assertEqual(torch.refaccel.Stream(priority=least + 5).priority, least)

    def test_graph_replays_on_new_static_inputs(self) -> None:
        x = torch.zeros(4, device="refaccel:0")
        g = torch.refaccel.Graph()
        with torch.refaccel.graph(g):
            y = x * 2 + 1
        x.copy_(torch.arange(4.0))
        g.replay()
        self.assertEqual(y.cpu().tolist(), [1.0, 3.0, 5.0, 7.0])

    def test_compile_cache_identity_follows_its_option(self) -> None:
        import os
        from unittest import mock

        from opmatrix.backend.refaccel import compile_cache

        before = compile_cache.identity()
        with mock.patch.dict(os.environ, {compile_cache.OPTION_ENV: "1"}):
            after = compile_cache.identity()
        self.assertEqual({k for k in before if before[k] != after[k]}, {"fast_math"})
        self.assertEqual(sorted(before), ["driver", "fast_math", "generation", "runtime", "stepping", "torch"])



class RawDtypeClaimTest(unittest.TestCase):
    """A claimed dtype opmatrix has no values for is tried by allocation and byte copies; a failure
    names the step and the backend's words, cut only between words."""

    def test_failure_names_the_step(self) -> None:
        from opmatrix.backend.registry import get_adapter
        from opmatrix.probes.runtime.claims import raw_dtype_works
        from opmatrix.probes.runtime.context import Probe

        probe = Probe.from_adapter(get_adapter("refaccel", refaccel.installed_generation()), "refaccel")
        said = raw_dtype_works(probe, torch.uint4)
        assert said is not None
        self.assertTrue(said.startswith("allocation: RefaccelUnsupportedError: refaccel: aten::empty.memory_format "
                                        "does not support dtype uint4"), said)
        self.assertTrue(said.endswith(" ...") or said.endswith(")"), said)


if __name__ == "__main__":
    unittest.main()

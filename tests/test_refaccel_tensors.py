"""refaccel tensor semantics: factories, copies, views / strides / offsets, devices (CPU as reference)."""

from __future__ import annotations

import unittest

import torch

import opmatrix.backend.refaccel as refaccel

refaccel.install()


class FactoryTest(unittest.TestCase):
    """Factories allocate on the requested device with the requested dtype and shape."""

    def test_empty_zeros_full_arange(self) -> None:
        self.assertEqual(torch.empty(2, 3, device="refaccel").shape, (2, 3))
        self.assertEqual(torch.zeros(2, 3, device="refaccel").cpu().tolist(), [[0.0] * 3] * 2)
        self.assertEqual(torch.full((2,), 7, device="refaccel").cpu().tolist(), [7, 7])
        self.assertEqual(torch.arange(5, device="refaccel").cpu().tolist(), [0, 1, 2, 3, 4])

    def test_every_storable_dtype_allocates(self) -> None:
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
                      torch.int16, torch.int32, torch.int64, torch.bool):
            with self.subTest(dtype=dtype):
                t = torch.ones(3, dtype=dtype).to("refaccel")
                self.assertEqual(t.dtype, dtype)
                self.assertTrue(torch.equal(t.cpu(), torch.ones(3, dtype=dtype)))

    def test_complex_cannot_be_allocated(self) -> None:
        with self.assertRaisesRegex(NotImplementedError, "does not support dtype complex64 on refaccel:0"):
            torch.empty(2, dtype=torch.complex64, device="refaccel")

    def test_empty_strided_and_channels_last(self) -> None:
        t = torch.empty_strided((2, 3), (1, 2), device="refaccel")
        self.assertEqual(t.stride(), (1, 2))
        cl = torch.randn(1, 2, 3, 4).to(memory_format=torch.channels_last)
        self.assertEqual(cl.to("refaccel").stride(), cl.stride())


class CopyTest(unittest.TestCase):
    """Host <-> device and device <-> device copies keep values, dtype conversion included."""

    def test_round_trip(self) -> None:
        a = torch.randn(5, 7)
        self.assertTrue(torch.equal(a.to("refaccel").cpu(), a))

    def test_non_blocking_then_sync(self) -> None:
        a = torch.randn(64)
        x = a.to("refaccel", non_blocking=True)
        torch.refaccel.synchronize()
        self.assertTrue(torch.equal(x.cpu(), a))

    def test_device_to_device_and_dtype(self) -> None:
        a = torch.randn(4, 4)
        y = a.to("refaccel:0").to("refaccel:1")
        self.assertEqual(y.device, torch.device("refaccel:1"))
        torch.testing.assert_close(y.to(torch.bfloat16).cpu(), a.to(torch.bfloat16))

    def test_copy_into_strided_destination(self) -> None:
        dst = torch.zeros(3, 4, device="refaccel").t()
        dst.copy_(torch.arange(12.0).view(4, 3))
        self.assertEqual(dst.cpu().tolist(), torch.arange(12.0).view(4, 3).tolist())

    def test_item(self) -> None:
        self.assertEqual(torch.tensor([2.5]).to("refaccel").item(), 2.5)


class ViewsTest(unittest.TestCase):
    """Views share storage, keep strides and offsets, and in-place ops write through them."""

    def test_transpose_strides(self) -> None:
        self.assertEqual(torch.randn(3, 4).to("refaccel").t().stride(), (1, 4))

    def test_slice_offset_and_view(self) -> None:
        v = torch.arange(12.0).to("refaccel")[2:8].view(2, 3)
        self.assertEqual(v.storage_offset(), 2)
        self.assertEqual(v.cpu().tolist(), [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]])

    def test_in_place_through_view(self) -> None:
        base = torch.ones(4, 4, device="refaccel")
        base[1:3, ::2].mul_(5)
        expected = torch.ones(4, 4)
        expected[1:3, ::2].mul_(5)
        self.assertTrue(torch.equal(base.cpu(), expected))

    def test_expand_unfold_as_strided(self) -> None:
        x = torch.arange(6.0).to("refaccel")
        self.assertEqual(x[:3].expand(2, 3).stride(), (0, 1))
        self.assertTrue(torch.equal(x.unfold(0, 2, 2).cpu(), torch.arange(6.0).unfold(0, 2, 2)))
        self.assertTrue(torch.equal(x.as_strided((2, 2), (1, 2), 1).cpu(), torch.arange(6.0).as_strided((2, 2), (1, 2), 1)))

    def test_views_share_storage(self) -> None:
        x = torch.zeros(6, device="refaccel")
        y = x.view(2, 3)
        self.assertEqual(x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr())
        y[1].fill_(4.0)
        self.assertEqual(x.cpu().tolist(), [0.0, 0.0, 0.0, 4.0, 4.0, 4.0])

    def test_resize(self) -> None:
        x = torch.arange(4.0).to("refaccel")
        x.resize_(3, 3)
        self.assertEqual(x.shape, (3, 3))
        self.assertEqual(x.cpu().flatten()[:4].tolist(), [0.0, 1.0, 2.0, 3.0])


class DevicesTest(unittest.TestCase):
    """Two devices, generic discovery through the device module, printing."""

    def test_device_count_and_index(self) -> None:
        self.assertEqual(torch.accelerator.device_count(), 2)
        self.assertEqual(torch.refaccel.device_count(), 2)
        self.assertEqual(torch.accelerator.current_device_index(), 0)
        self.assertEqual(torch.ones(2, device="refaccel:1").device.index, 1)
        self.assertEqual((torch.ones(2, device="refaccel:1") + 1).device.index, 1)

    def test_set_device_selects_default(self) -> None:
        with torch.refaccel.device(1):
            self.assertEqual(torch.empty(1, device="refaccel").device.index, 1)
        self.assertEqual(torch.empty(1, device="refaccel").device.index, 0)

    def test_printing_uses_host_copy(self) -> None:
        text = repr(torch.tensor([1.5, float("inf")]).to("refaccel:1"))
        self.assertEqual(text, "tensor([1.5000,    inf], device='refaccel:1')")


if __name__ == "__main__":
    unittest.main()

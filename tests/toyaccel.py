"""toyaccel: a small pure-Python PrivateUse1 backend that behaves like real ones do, for tests.

Not refaccel and not a mock: a real PrivateUse1 registration whose kernels run through the
dispatcher. Its truth is declared here, and the tests check the matrix against it. Two flavours,
chosen by ``TOYACCEL_FLAVOUR`` before import (one PrivateUse1 backend per process):

``fallback`` (default), like torch_xla or a vendor plugin that falls back from *inside* kernels:
- ``add.Tensor`` is registered; it computes float32/float64 of rank <= 2 on the device, and
  int8/int16/uint8 or rank >= 3 on the host (copies to the host, computes, copies back);
- ``mm`` is registered; bfloat16 runs on the host the same way; float16 copies to the host
  and then raises an internal error;
- ``relu`` is native and its backward (``threshold_backward``) is not: the boxed fallback serves it;
- ``mul.Tensor``, ``neg``, ``abs.out`` ... are native (``abs`` and ``neg`` also for uint16 and
  uint32, which the host's kernels lack); so is ``index_select``, which reads its
  index to the host to check bounds (a copy one way) and gathers in device memory (a negative
  ``dim`` it refuses after that read); every op
  without a kernel (``sort``, the backward of ``sigmoid``, ``equal``...) is served by a boxed CPU
  fallback (copies in and out; ``equal`` returns a bool, so only in).

``minimal``, like an OpenReg-derived backend right after bring-up: empty, copies, fill, views and
a handful of elementwise ``.out`` kernels (add, mul, sub, neg, abs), no boxed fallback: every
other op is a clean "could not run" rejection.

``TOYACCEL_FALLBACK=alias`` makes the boxed fallback run host kernels over host views of the
device's memory (no copies, as a backend whose device memory is host memory can).

``TOYACCEL_FAULT=crash:mul`` (or ``abort``, ``hang``) makes the ``mul`` kernel fault;
``hostile:mul`` (``hostile-error:mul``) makes it reject (fail) with :data:`HOSTILE_MESSAGE`;
``unreadable:mul`` raises an error whose ``str()`` raises; ``wrong:mul`` (or ``wrong:abs``)
returns every other value off by one (silently wrong; ``wrong:sort``, an op the boxed fallback
serves, reverses its integer outputs: indices that select the wrong values); ``needs:mul`` refuses non-contiguous inputs and inputs of
rank 3 or more in a vendor's words ("TA_E_LAYOUT(0x31): mul kernel requires contiguous input"); ``worn:mul`` segfaults once this
process has called the kernel ``TOYACCEL_WORN_AFTER`` times (default 20): a fault from what the
worker accumulated (torch_xla's JIT running out of code memory), not from the input.
``TOYACCEL_CPP_KERNELS=PATH`` loads C++ kernels (``tests/toyaccel_kernels.cpp``, built by
:func:`build_cpp_kernels`) into the ``fallback`` flavour: ``atan2``, native for float32/16, host
fallback from inside the C++ kernel for float64, rejected for integers, a crash on empty inputs.
The C++ ``leaky_relu`` kernel is native; its backward (``leaky_relu_backward``) is served by the boxed
fallback.
The C++ ``hypot`` kernel computes float32 only and refuses every other dtype with a
``TORCH_CHECK`` ("only supports float32"). ``TOYACCEL_MEMORY_REFUSES=complex128,float64`` makes
device memory refuse those dtypes at allocation (``NotImplementedError``; with
``TOYACCEL_MEMORY_WORDS=1`` a RuntimeError in a vendor's words: "no device memory layout for
element type torch.complex128"); the C++ ``copysign`` refuses all but float32 in a vendor's words
("TA_E_DTYPE(0x21): copysign kernel accepts Float, got Double"), and
``TOYACCEL_DEVICES=2`` gives the backend two devices; ``TOYACCEL_SEED_FAILS=1`` makes the
device module's ``manual_seed_all`` raise (as ``torch.manual_seed`` calls it, so does that).
The probe reaches it with ``--backend tests.toyaccel:ToyAdapter`` (workers import it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from opmatrix.backend import Adapter

NAME = "toyaccel"
FLAVOUR = os.environ.get("TOYACCEL_FLAVOUR", "fallback")
#: the boxed fallback runs host kernels over the device's own memory (host views, no copies), as a
#: backend whose device memory is host memory can: the fallback is seen by what ran, not by copies
ALIASING_FALLBACK = os.environ.get("TOYACCEL_FALLBACK") == "alias"
_aten = torch.ops.aten
_CPU = torch.device("cpu")
_CPU_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_HOST_DTYPES = (torch.int8, torch.int16, torch.uint8)
_KEEP: list[Any] = []


# -- memory: device storages are host blocks exported through DLPack as PrivateUse1 ----------


def _allocate(numel: int, dtype: torch.dtype) -> torch.Tensor:
    alias = torch.empty(max(numel, 1), dtype=dtype)[:numel]
    capsule = torch._C._to_dlpack(alias)
    device = (ctypes.c_int32 * 2).from_address(_capsule_pointer(capsule, b"dltensor") + 8)
    device[0], device[1] = 12, 0  # kDLExtDev: PyTorch maps it to PrivateUse1
    return torch._C._from_dlpack(capsule)


def _geometry(t: torch.Tensor, storage: Any, offset: int, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    return _aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEY, t, storage, offset, list(size), list(stride))


def _strides(size: Sequence[int]) -> list[int]:
    out = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        out[i] = out[i + 1] * max(size[i + 1], 1)
    return out


def _view(t: torch.Tensor) -> torch.Tensor:
    """A host tensor aliasing a device tensor's bytes (no copy: the device's own memory)."""
    if t.device.type != NAME:
        return t
    st = t.untyped_storage()
    cpu = torch._C._construct_storage_from_data_pointer(st.data_ptr(), _CPU, st.nbytes())
    return torch.empty(0, dtype=t.dtype).set_(cpu, t.storage_offset(), t.size(), t.stride())


def _refused_dtypes() -> set[str]:
    return {d.strip() for d in os.environ.get("TOYACCEL_MEMORY_REFUSES", "").split(",") if d.strip()}


def empty_strided(size: Any, stride: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    if str(dtype).removeprefix("torch.") in _refused_dtypes():  # as a device without 64-bit units refuses
        if os.environ.get("TOYACCEL_MEMORY_WORDS"):  # the same refusal in a vendor's own words
            raise RuntimeError(f"toyaccel runtime: no device memory layout for element type {dtype}")
        raise NotImplementedError(f"toyaccel: device memory does not support dtype {dtype}")
    numel = 0 if any(s == 0 for s in size) else 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    base = _allocate(numel, dtype)
    return _geometry(base, base.untyped_storage(), 0, size, stride)


def empty(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
          memory_format: Any = None) -> torch.Tensor:
    return empty_strided(size, _strides(size), dtype=dtype)


def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    _view(dst).copy_(_view(self))
    return dst


def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_from(self, dst)


def resize_(self: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
    need = 1 + sum((n - 1) * s for n, s in zip(size, _strides(size), strict=True)) if all(size) else 0
    storage = self.untyped_storage()
    if (need + self.storage_offset()) * self.element_size() > storage.nbytes():
        storage = _allocate(need + self.storage_offset(), self.dtype).untyped_storage()
    return _geometry(self, storage, int(self.storage_offset()), size, _strides(size))


def set_storage(self: torch.Tensor, source: Any, offset: int = 0, size: Any = None, stride: Any = None) -> torch.Tensor:
    size = [source.nbytes() // self.element_size()] if size is None else size
    return _geometry(self, source, offset, size, stride or _strides(size))


def to_copy(self: torch.Tensor, **kw: Any) -> torch.Tensor:
    kw["pin_memory"] = None  # a Python backend cannot pin host memory
    kw["non_blocking"] = False
    return _aten._to_copy.default.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd),
                                             self, **kw)


# -- kernels ---------------------------------------------------------------------------------


_CALLS: dict[str, int] = {}


def _fault(op: str, *inputs: torch.Tensor) -> None:
    mode, _, target = os.environ.get("TOYACCEL_FAULT", "").partition(":")
    if target != op:
        return
    _CALLS[op] = _CALLS.get(op, 0) + 1
    if mode == "needs":  # a kernel that states the layout and the ranks it takes, in a vendor's words
        if not all(t.is_contiguous() for t in inputs):
            raise RuntimeError(f"TA_E_LAYOUT(0x31): {op} kernel requires contiguous input")
        if max((t.dim() for t in inputs), default=0) > 2:
            raise RuntimeError(f"TA_E_RANK(0x32): {op} kernel expects 2-D input or less, got "
                               f"{max(t.dim() for t in inputs)}-D")
    if mode == "worn" and _CALLS[op] > int(os.environ.get("TOYACCEL_WORN_AFTER", "20")):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
    elif mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
    elif mode == "abort":
        os.abort()
    elif mode == "hang":
        while True:
            time.sleep(3600)
    elif mode in ("hostile", "hostile-error"):  # error texts as foreign kernels write them
        kind = NotImplementedError if mode == "hostile" else RuntimeError
        raise kind(HOSTILE_MESSAGE)
    elif mode == "unreadable":
        raise _Unreadable()


class _Unreadable(RuntimeError):
    """An exception whose message cannot be read (a vendor's binding with a broken ``__str__``)."""

    def __str__(self) -> str:
        raise ValueError("the message of this error cannot be decoded")


#: an exception text with everything a foreign kernel may put there: terminal escapes, NUL, a
#: lone surrogate, YAML and HTML syntax, a carriage return and a very long line
HOSTILE_MESSAGE = ("toyaccel: \x1b[2J\x1b]0;pwned\x07 mul failed\x00 for \ud800 dtype\r\n"
                   "!!python/object:os.system &a *a {x: [1, 2]} <script>alert(1)</script> --- ... "
                   + "#" * 5000)


def _out_like(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return empty(list(ref.shape), dtype=dtype)


def _on_host(fn: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Kernel-internal host fallback: copy inputs to the host, compute, copy the result back."""
    host = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    res = fn(*host, **kwargs)
    out = _out_like(res, res.dtype)
    out.copy_(res)
    return out


def _binary(name: str, fn: Any) -> Any:
    def kernel(self: torch.Tensor, other: torch.Tensor, *, alpha: Any = 1) -> torch.Tensor:
        _fault(name, *(t for t in (self, other) if isinstance(t, torch.Tensor)))
        kw = {"alpha": alpha} if name in ("add", "sub") and alpha != 1 else {}
        if name == "add" and (self.dtype in _HOST_DTYPES or self.dim() >= 3):
            return _on_host(fn, self, other, **kw)
        res = fn(_view(self), _view(other), **kw)
        if os.environ.get("TOYACCEL_FAULT") == f"wrong:{name}" and res.numel():
            res = res.clone()  # a silently wrong kernel: every other value off by one
            res.view(-1)[::2] += 1
        out = _out_like(res, res.dtype)
        _view(out).copy_(res)
        return out

    return kernel


def _binary_out(name: str, fn: Any) -> Any:
    def kernel(self: torch.Tensor, other: torch.Tensor, *, alpha: Any = 1, out: torch.Tensor) -> torch.Tensor:
        _fault(name)
        kw = {"alpha": alpha} if alpha != 1 else {}
        res = fn(_view(self), _view(other), **kw)
        if out.shape != res.shape:
            out.resize_(res.shape)
        _view(out).copy_(res)
        return out

    return kernel


#: unsigned dtypes the device computes and the host's kernels lack (abs, neg of uint16...)
_UNSIGNED = (torch.uint16, torch.uint32)


def _unary_out(fn: Any, name: str = "") -> Any:
    def kernel(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        src = _view(self)
        wide = src.dtype in _UNSIGNED  # computed in int64, written back in the input's dtype
        res = fn(src.to(torch.int64) if wide else src)
        if os.environ.get("TOYACCEL_FAULT") == f"wrong:{name}" and res.numel():
            res = res.clone()  # a silently wrong kernel: every other value off by one
            res.view(-1)[::2] += 1
        res = res.to(src.dtype) if wide else res
        if out.shape != res.shape:
            out.resize_(res.shape)
        _view(out).copy_(res)
        return out

    return kernel


def mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    if self.dtype == torch.float16:  # falls back, then fails (torch_xla's to_sparse does this)
        self.cpu()
        raise RuntimeError("toyaccel: internal error in the mm kernel after staging its inputs on the host")
    if self.dtype == torch.bfloat16:
        return _on_host(torch.mm, self, mat2)
    res = torch.mm(_view(self), _view(mat2))
    out = _out_like(res, res.dtype)
    _view(out).copy_(res)
    return out


def index_select(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """Native: reads its index to the host to check bounds (a copy one way), then gathers in
    device memory: no fallback. A negative ``dim`` it refuses, after that read."""
    idx = index.cpu()
    if dim < 0:
        raise RuntimeError("toyaccel index_select: a negative dim is not supported")
    size = self.shape[dim] if self.dim() else 1
    if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
        raise IndexError(f"toyaccel index_select: index out of range for dimension {dim} of size {size}")
    res = torch.index_select(_view(self), dim, _view(index))
    out = _out_like(res, res.dtype)
    _view(out).copy_(res)
    return out


def relu(self: torch.Tensor) -> torch.Tensor:
    """Native; its backward (``threshold_backward``) has no kernel: the boxed fallback serves it."""
    res = torch.relu(_view(self))
    out = _out_like(res, res.dtype)
    _view(out).copy_(res)
    return out


def fill_(self: torch.Tensor, value: Any) -> torch.Tensor:
    _view(self).fill_(value)
    return self


def local_scalar_dense(self: torch.Tensor) -> Any:
    return _view(self).item()


def boxed_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Every op without a kernel: copy device tensors to the host, run there, copy results back."""
    _fault(op._schema.name.split("::")[-1])  # TOYACCEL_FAULT=crash:sgn faults abs's backward only
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def host(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.device.type == NAME:
            h = _view(v) if ALIASING_FALLBACK else v.cpu()
            pairs.append((v, h))
            return h
        if isinstance(v, (tuple, list)):
            return type(v)(host(x) for x in v)
        return v

    res = op(*host(list(args)), **{k: host(v) for k, v in kwargs.items()})
    if os.environ.get("TOYACCEL_FAULT") == f"wrong:{op._schema.name.split('::')[-1]}":
        res = _reversed_indices(res)
    written = {id(h) for h in _written(op, res)}
    for orig, h in pairs:  # in-place and out= arguments get the host's result back
        if id(h) in written:
            orig.copy_(h)
    device = pairs[0][0].device if pairs else torch.device(NAME, 0)

    def back(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.device.type == "cpu":
            found = [orig for orig, h in pairs if h is v]
            return found[0] if found else v.to(device)
        if isinstance(v, (tuple, list)):
            return type(v)(back(x) for x in v)
        return v

    return back(res)


def _reversed_indices(res: Any) -> Any:
    """A silently wrong fallback op (``wrong:sort``): every integer output reversed along its last
    dim (a sort's indices then select the values in the wrong order)."""
    if isinstance(res, torch.Tensor) and not (res.is_floating_point() or res.is_complex()) and res.dim():
        return res.flip(-1)
    if isinstance(res, (tuple, list)):
        return type(res)(_reversed_indices(r) for r in res)
    return res


def _written(op: Any, res: Any) -> list[torch.Tensor]:
    mutable = any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)
    if not mutable:
        return []
    return [r for r in (res if isinstance(res, (tuple, list)) else [res]) if isinstance(r, torch.Tensor)]


_BASICS = {
    "empty.memory_format": empty, "empty_strided": empty_strided, "_copy_from": copy_from,
    "_copy_from_and_resize": copy_from_and_resize, "resize_": resize_, "_to_copy": to_copy,
    "set_.source_Storage_storage_offset": set_storage, "fill_.Scalar": fill_, "_local_scalar_dense": local_scalar_dense,
}
_VIEWS = ("as_strided", "view", "_reshape_alias", "unfold")
_OUT = {"add.out": _binary_out("add", torch.add), "mul.out": _binary_out("mul", torch.mul),
        "sub.out": _binary_out("sub", torch.sub), "neg.out": _unary_out(torch.neg, "neg"), "abs.out": _unary_out(torch.abs, "abs")}


def _meta_view(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_META, *args, **kwargs)

    return kernel


class _Module:
    """``torch.toyaccel``: ``TOYACCEL_DEVICES`` devices (default 1), as ``torch.accelerator`` counts them."""

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        if os.environ.get("TOYACCEL_SEED_FAILS"):  # a device module whose seeding is broken
            raise RuntimeError("toyaccel: the device generator cannot be seeded")

    def device_count(self) -> int:
        return int(os.environ.get("TOYACCEL_DEVICES", "1"))

    # random ops run through the boxed fallback on the host's generator: its state is the device's
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)


def install() -> None:
    """Register the flavour named by ``TOYACCEL_FLAVOUR`` (once per process)."""
    if torch._C._get_privateuse1_backend_name() == NAME:
        return
    _setup_privateuseone_for_python_backend(NAME, backend_module=_Module())
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in {**_BASICS, **_OUT}.items():
        lib.impl(name, fn, "PrivateUse1")
    for name in _VIEWS:
        lib.impl(name, _meta_view(getattr(_aten, name).default), "PrivateUse1")
    _KEEP.append(lib)
    if FLAVOUR == "minimal":
        return
    for name, fn in {"add.Tensor": _binary("add", torch.add), "mul.Tensor": _binary("mul", torch.mul), "mm": mm,
                     "index_select": index_select, "relu": relu}.items():
        lib.impl(name, fn, "PrivateUse1")
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(boxed_fallback, "PrivateUse1")
    _KEEP.append(fallback)
    if os.environ.get("TOYACCEL_CPP_KERNELS"):
        torch.ops.load_library(os.environ["TOYACCEL_CPP_KERNELS"])


def build_cpp_kernels(build_dir: str | os.PathLike[str]) -> str:
    """Compile ``tests/toyaccel_kernels.cpp`` into a shared library (cached in ``build_dir`` by
    torch's extension builder, which rebuilds when the source changes); returns its path."""
    from pathlib import Path

    from torch.utils.cpp_extension import load

    source = Path(__file__).with_name("toyaccel_kernels.cpp")
    Path(build_dir).mkdir(parents=True, exist_ok=True)
    load(name="toyaccel_kernels", sources=[str(source)], build_directory=str(build_dir), is_python_module=False,
         verbose=False)
    # torch's builder names a rebuilt library toyaccel_kernels_v1.so, _v2 ...: the newest is this source's
    return str(max(Path(build_dir).glob("toyaccel_kernels*.so"), key=lambda f: f.stat().st_mtime))


class ToyAdapter(Adapter):
    """The adapter the probe uses: generic signals only (no fallback counter of its own)."""

    name = NAME
    device_type = NAME
    dispatch_key = "PrivateUse1"
    verified = False

    def setup(self) -> None:
        install()

    def register(self) -> None:
        install()

    def synchronize(self) -> None:
        """Every kernel finishes before it returns."""

    def compile_backend(self) -> Any:
        return None

"""Memory classes (docs/levels.md#runtime-checks-round-2): pinned host memory, peer access between
the devices of a node, DLPack export and import, sharing a device tensor with another process.

Each check exercises the memory class through PyTorch's own API and compares bytes with the
host; a backend without the class gets ``not_applicable`` with what it lacks::

    check_pinned_memory(probe)
    # passed("pin_memory() gave a pinned copy; 1048576 float32 copied host->device->host non_blocking ...")
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from .context import Probe
from .spec import Verdict, failed, not_applicable, passed

__all__ = ["check_dlpack", "check_ipc_sharing", "check_peer_access", "check_pinned_memory"]

#: elements copied (4 MiB of float32: large enough that an incomplete copy shows)
N = 1 << 20
_HOST = "the host's memory is the device's"


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"


def check_pinned_memory(probe: Probe) -> Verdict:
    """``pin_memory()`` gives a pinned copy, ``is_pinned()`` tells pinned from pageable, and
    non-blocking copies from and to pinned memory are complete once ``synchronize`` returns."""
    import torch

    if probe.host:
        return not_applicable(f"{_HOST}: there is no device to pin host memory for")
    src = torch.arange(N, dtype=torch.float32)
    try:
        pinned = src.pin_memory()
    except Exception as exc:  # noqa: BLE001 - the backend serves no pinned memory: that is the finding
        return failed(f"Tensor.pin_memory() raised {_err(exc)}",
                      f"serve a pinned host allocator for {probe.device_type} (PrivateUse1 hooks getPinnedMemoryAllocator)")
    if not pinned.is_pinned() or src.is_pinned():
        return failed(f"is_pinned() says {pinned.is_pinned()} for pin_memory()'s copy and {src.is_pinned()} for pageable memory")
    dev = torch.empty(N, dtype=torch.float32, device=probe.device())
    dev.copy_(pinned, non_blocking=True)
    back = torch.empty(N, dtype=torch.float32).pin_memory()
    probe.sync()
    back.copy_(dev, non_blocking=True)
    probe.sync()
    if not torch.equal(back, src):
        bad = int((back != src).nonzero()[0].item())
        return failed(f"a non_blocking copy through pinned memory was incomplete after synchronize (first wrong element {bad})")
    try:
        torch.empty(4, pin_memory=True)
        direct = "torch.empty(pin_memory=True) works"
    except Exception as exc:  # noqa: BLE001 - said in the evidence: pin_memory() is what the check asks
        direct = f"torch.empty(pin_memory=True) raised {_err(exc)}"
    return passed(f"pin_memory() gave a pinned copy (is_pinned True; pageable False); {N} float32 copied "
                  f"host->device->host non_blocking through pinned memory, complete after synchronize; {direct}")


def _peers(probe: Probe) -> list[int]:
    return [d.index for d in probe.adapter.devices() if d.index != probe.index]


def check_peer_access(probe: Probe) -> Verdict:
    """Device-to-device copies to and from every other device of the node are right, and
    ``can_device_access_peer`` (where the backend offers it) answers for each pair."""
    import torch

    if probe.host:
        return not_applicable(f"{_HOST}: no peer devices")
    peers = _peers(probe)
    if not peers:
        return not_applicable(f"{probe.device_type} lists one device on this node: no peer to access")
    ask = getattr(probe.module(), "can_device_access_peer", None)
    src = torch.arange(N, dtype=torch.float32)
    said = []
    for other in peers:
        here = src.to(probe.device())
        there = here.to(probe.device(other))
        again = torch.empty(N, dtype=torch.float32, device=probe.device())
        again.copy_(there)
        probe.sync()
        if not torch.equal(there.cpu(), src) or not torch.equal(again.cpu(), src):
            return failed(f"a copy {probe.device(None)} <-> {probe.device(other)} changed the values")
        said.append(f"{probe.device(other)}: copies both ways right"
                    + (f", can_device_access_peer {bool(ask(probe.index, other))}" if callable(ask) else ""))
    offered = "" if callable(ask) else f"; torch.{probe.device_type} offers no can_device_access_peer"
    return passed("; ".join(said) + offered)


def check_dlpack(probe: Probe) -> Verdict:
    """A device tensor exported through DLPack and imported back is the same memory on the
    same device (a write through one shows through the other)."""
    import torch

    if not probe.values:
        return not_applicable(f"{probe.device_type} tensors hold no data: there is no memory to export")
    x = torch.arange(16, dtype=torch.float32).to(probe.device())
    try:
        y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    except Exception as exc:  # noqa: BLE001 - export or import refused: the finding
        return failed(f"DLPack round trip of a {probe.device_type} tensor raised {_err(exc)}",
                      "export device tensors through __dlpack__ with the device's DLPack type and import them back")
    if y.device != x.device:
        return failed(f"the imported tensor lives on {y.device}, not {x.device}")
    y.copy_(torch.arange(16, dtype=torch.float32) + 1)  # a copy: the one write every backend serves
    probe.sync()
    if not torch.equal(x.cpu(), torch.arange(16, dtype=torch.float32) + 1):
        return failed("the imported tensor does not share memory with the exported one (a write did not show through)")
    return passed(f"to_dlpack -> from_dlpack kept device {y.device}, shape and values; a write shows through (shared memory)")


def _receive(tensor: Any, answers: Any) -> None:
    """Child side of :func:`check_ipc_sharing`: read the shared tensor and answer its sum."""
    answers.put(float(tensor.cpu().sum().item()))


def check_ipc_sharing(probe: Probe) -> Verdict:
    """A device tensor passed to a spawned process through ``torch.multiprocessing`` arrives
    with its values (the child reads it on the device)."""
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401 - registers the tensor reductions

    if probe.host:
        return not_applicable(f"{_HOST}: host tensors are shared through shared memory, no device memory to share")
    x = torch.arange(64, dtype=torch.float32).to(probe.device())
    try:
        ForkingPickler.dumps(x)
    except Exception as exc:  # noqa: BLE001 - the backend has no IPC handle for its storage
        return not_applicable(f"{probe.device_type} storages have no inter-process handle: torch.multiprocessing "
                              f"could not share one ({_err(exc)})")
    ctx = multiprocessing.get_context("spawn")
    answers = ctx.Queue()
    child = ctx.Process(target=_receive, args=(x, answers), daemon=True)
    child.start()
    try:
        got = answers.get(timeout=120)
    except Exception as exc:  # noqa: BLE001 - no answer: the child could not use the shared tensor
        child.kill()
        return failed(f"the spawned child did not read the shared tensor within 120 s ({_err(exc)}; exit {child.exitcode})")
    child.join(30)
    want = float(torch.arange(64, dtype=torch.float32).sum())
    if got != want:
        return failed(f"the spawned child read sum {got} from the shared tensor, not {want}")
    return passed(f"a {probe.device_type} tensor shared with a spawned process arrived right (sum {got})")

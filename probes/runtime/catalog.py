"""Every runtime check, in the bring-up order of docs/levels.md#runtime-bring-up-order, with its level and default advice.

Stages (docs/levels.md#runtime-bring-up-order): 1 enumerate and identify a device, 2 allocate,
map, copy and free memory, 3 submit a no-op and observe completion, 4 launch a small kernel,
5 multiple queues and event dependencies, 6 memory statistics, 7 process exit, crashes and
repeated initialisation. ``doctor`` prints them in this order; the matrix keeps it::

    >>> [c.name for c in CATALOG][:3]
    ['import', 'driver', 'init_messages']
"""

from __future__ import annotations

from collections.abc import Callable

from . import claims, discovery, faultcheck, memclass, memory, state, streams, streams2, tensors
from .context import Probe
from .spec import CheckSpec, Verdict

Check = Callable[[Probe], Verdict]

__all__ = ["CATALOG", "STAGES", "by_name"]

STAGES = {
    1: "enumerate and identify a device",
    2: "allocate, copy and free memory",
    3: "submit a no-op and observe completion",
    4: "launch a small kernel",
    5: "streams and events",
    6: "memory statistics and limits",
    7: "process lifecycle: fork, spawn, crashes",
}


def _w(name: str, level: int, stage: int, title: str, advice: str, run: Check | None = None) -> CheckSpec:
    return CheckSpec(name, level, stage, title, "worker", advice, run)


def _p(name: str, level: int, title: str, advice: str) -> CheckSpec:
    return CheckSpec(name, level, 7 if name != "init_messages" else 1, title, "process", advice)


CATALOG: tuple[CheckSpec, ...] = (
    # stage 1 -- level 0: discovery and compatibility
    _w("import", 0, 1, "backend package imports", "install the backend's Python package"),
    _w("driver", 0, 1, "compatible driver; initialisation", "fix the driver / device problem named in the evidence"),
    _p("init_messages", 0, "initialisation failures name their cause",
       "make each initialisation error name its cause: driver version, device busy, reset, missing firmware"),
    _w("enumerate", 0, 1, "devices enumerate", "make device_count agree with the devices the runtime lists",
       discovery.check_enumerate),
    _w("select", 0, 1, "each device can be selected", "make set_device / current_device select the device",
       discovery.check_select),
    _w("identity", 1, 1, "name, stable id, driver / firmware / ISA versions",
       "report a stable id (UUID or bus id) and driver / firmware / ISA versions", discovery.check_identity),
    _w("api_coverage", 0, 1, "generic APIs reach the backend",
       "serve device_count / current device / synchronize through torch.accelerator or torch.<device>",
       discovery.check_api_coverage),
    # stage 2 -- level 1: memory and tensor semantics
    _w("allocation", 1, 2, "empty / zeros / full for every dtype", "fix allocation for the dtypes named",
       tensors.check_allocation),
    _w("copy_h2d_d2h", 1, 2, "host <-> device copies", "fix the copy kernels for the dtypes named",
       tensors.check_copy_h2d_d2h),
    _w("copy_d2d", 1, 2, "device <-> device copies", "fix device-to-device copies (and peer copies)",
       tensors.check_copy_d2d),
    _w("copy_non_blocking", 1, 2, "non_blocking copies + synchronize",
       "non_blocking copies must be complete once synchronize returns", tensors.check_copy_non_blocking),
    _w("views", 1, 2, "views / strides / storage offsets survive .to() and .cpu()",
       "keep sizes, strides and storage offsets (set_ / as_strided) on the device", tensors.check_views),
    _w("conversion", 1, 2, "dtype conversion among claimed dtypes", "fix _to_copy for the dtype pairs named",
       tensors.check_conversion),
    _w("item", 1, 2, "scalar extraction (.item())", "fix _local_scalar_dense for the dtypes named",
       tensors.check_item),
    _w("dtype_claims", 1, 2, "claimed dtypes work; working dtypes are claimed",
       "make get_device_capability()['supported_dtypes'] list exactly what allocates and converts",
       claims.check_dtype_claims),
    _w("pinned_memory", 1, 2, "pinned host memory: pin_memory, is_pinned, non_blocking copies",
       "serve a pinned host allocator; non_blocking copies from pinned memory must be complete after synchronize",
       memclass.check_pinned_memory),
    _w("peer_access", 1, 2, "peer access: copies across the node's devices, can_device_access_peer",
       "copy between every pair of devices right (and answer can_device_access_peer)", memclass.check_peer_access),
    _w("dlpack", 1, 2, "DLPack export and import of device tensors",
       "export device tensors through DLPack and import them back as the same memory", memclass.check_dlpack),
    _w("ipc_sharing", 1, 2, "a device tensor shared with another process (torch.multiprocessing)",
       "give device storages an inter-process handle torch.multiprocessing can pass", memclass.check_ipc_sharing),
    _w("serialization", 1, 2, "torch.save / torch.load(weights_only=True, map_location)",
       "register the device for serialization and keep view relationships", state.check_serialization),
    # stage 3-5 -- submission, kernels, streams and events
    _w("noop_completion", 1, 3, "a no-op completes (synchronize, idle event)",
       "synchronize and events must complete on an idle device", streams.check_noop_completion),
    _w("kernel", 1, 4, "a small kernel computes the host result", "fix the kernel launch / argument passing",
       streams.check_kernel),
    _w("rng", 1, 4, "RNG: manual_seed, get / set state", "serve a device generator with seed and state",
       state.check_rng),
    _w("compile_cache_identity", 4, 4, "persistent compile cache: reuse when unchanged, recompile when its identity changes",
       "key the compile cache on the framework build, device generation / stepping, driver and code-generation options",
       faultcheck.check_compile_cache_identity),
    _w("stream_order", 1, 5, "stream: ops in one stream are ordered",
       "work queued on one stream must run in issue order", streams.check_stream_order),
    _w("event_cross_stream", 1, 5, "event: cross-stream dependency",
       "Stream.wait_event must hold back later work until the event completes", streams.check_event_cross_stream),
    _w("event_query", 1, 5, "event / stream query and synchronize",
       "query() must report completion after synchronize", streams.check_event_query),
    _w("event_elapsed_time", 1, 5, "event elapsed_time", "serve timing events (enable_timing=True)",
       streams.check_event_elapsed_time),
    _w("stream_cycle", 1, 5, "cyclic event waits complete or fail clearly, never hang",
       "bind an event wait to the event's last record, or detect the cycle and raise", streams2.check_stream_cycle),
    _w("stream_priority", 1, 5, "stream priorities: range reported, a high-priority stream works",
       "report Stream.priority_range() and create streams at the priorities asked", streams2.check_stream_priority),
    _w("graph_replay", 4, 5, "graph capture and replay",
       "capture device work into a graph that replays on new values in its static inputs", streams2.check_graph_replay),
    # stage 6 -- memory statistics, limits and fault records
    _w("error_cause", 1, 6, "a runtime error keeps its cause chain and status code",
       "keep the driver's status on the exception or raise from the lower error", faultcheck.check_error_cause),
    _w("memory_stats", 1, 6, "allocated / reserved / peak statistics",
       "serve memory_allocated / memory_reserved / max_memory_allocated as documented", memory.check_memory_stats),
    _w("empty_cache", 1, 6, "empty_cache releases reserved memory", "empty_cache must return cached blocks",
       memory.check_empty_cache),
    _w("oom", 1, 6, "OOM: over capacity raises torch.OutOfMemoryError, device usable",
       "raise torch.OutOfMemoryError above capacity and keep the device usable", memory.check_oom),
    # stage 7 -- process lifecycle (each in its own process, with a deadline)
    _p("fork_before_init", 1, "fork before initialisation", "device discovery must not initialise the runtime"),
    _p("fork_after_init", 1, "fork after initialisation fails clearly",
       "a child forked after initialisation must fail with an error naming it and recommending spawn"),
    _p("spawn", 1, "spawn child", "spawned children must initialise the backend themselves"),
    _p("forkserver", 1, "forkserver child", "forkserver children must initialise the backend themselves"),
    _p("repeated_children", 1, "repeated child creation", "each new process must initialise after the last exited"),
    _p("child_crash", 1, "a crashing child", "a crashed process must not leave the device busy"),
    _p("child_exit", 1, "a clean child exit", "exit hooks must let a process leave cleanly"),
    _p("parent_continues", 1, "parent continues after its children", "children must not disturb the parent's device"),
    _p("dataloader_spawn", 1, "DataLoader workers under spawn", "DataLoader workers must start under spawn"),
)

_BY_NAME = {spec.name: spec for spec in CATALOG}


def by_name(name: str) -> CheckSpec:
    """The check called ``name``; KeyError names the known checks."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown runtime check {name!r}; known: {', '.join(_BY_NAME)}") from None

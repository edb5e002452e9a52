"""``torch.refaccel``: the device module PyTorch finds through ``torch.get_device_module``.

It serves what a pure-Python backend cannot serve through PyTorch's generic C++ APIs: memory
statistics, device properties and capability, streams, events and generators. Which generic API
reaches refaccel (torch 2.13, pure-Python PrivateUse1):

* served generically: ``torch.accelerator.device_count / is_available / current_accelerator``,
  ``torch.manual_seed`` (calls ``manual_seed_all`` here), ``torch.get_device_module``;
* own module only: ``memory_allocated``/``memory_reserved``/``max_memory_allocated``/
  ``memory_stats``/``empty_cache``/``reset_peak_memory_stats``, ``get_device_capability``,
  ``get_device_properties``, ``Stream``/``Event``/``current_stream``, ``synchronize``,
  ``set_device``/``current_device``, RNG state;
* not served: ``torch.accelerator.memory_*`` (no C++ device allocator), ``torch.accelerator.
  get_device_capability`` (C++ hooks), ``torch.Stream``/``torch.Event`` (the Python device guard has
  no streams), ``torch.Generator(device="refaccel")``, ``torch.accelerator.set_device_index``
  (the Python guard always reports device 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import basics, compile_cache, graphs, memclass, memory, rng, runtime, streams
from .table import storable_dtypes

__all__ = ["RefaccelModule", "DeviceProperties"]


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` reports (after ``torch.cuda.get_device_properties``)."""

    name: str
    generation: str
    total_memory: int
    uuid: str
    isa: str
    firmware: str
    driver: str | None
    index: int


def _index(device: Any = None) -> int:
    return streams._index(device)


class RefaccelModule:
    """The ``torch.refaccel`` namespace (an instance, registered with ``_register_device_module``)."""

    Stream = streams.Stream
    Event = streams.Event
    current_stream = staticmethod(streams.current_stream)
    default_stream = staticmethod(streams.default_stream)
    set_stream = staticmethod(streams.set_stream)
    stream = staticmethod(streams.stream)
    manual_seed_all = staticmethod(rng.manual_seed_all)
    OutOfMemoryError = torch.OutOfMemoryError
    can_device_access_peer = staticmethod(memclass.can_device_access_peer)
    Graph = graphs.Graph
    graph = staticmethod(graphs.graph)
    compile_cache_identity = staticmethod(compile_cache.identity)
    compile_cache_stats = staticmethod(compile_cache.stats)
    #: an environment option that changes the code the compiler generates (part of the identity)
    COMPILE_OPTION_ENV = compile_cache.OPTION_ENV

    # -- discovery and lifecycle (discovery never initialises) --------------------------------

    @staticmethod
    def device_count() -> int:
        """Number of devices (does not initialise the runtime)."""
        return runtime.device_count()

    @staticmethod
    def is_available() -> bool:
        """True when at least one device exists and the driver looks usable (no initialisation)."""
        return runtime.device_count() > 0 and runtime._init_failure() is None

    @staticmethod
    def is_initialized() -> bool:
        """Whether this process initialised the runtime."""
        return runtime.is_initialized()

    @staticmethod
    def init() -> None:
        """Initialise now; raises ``RefaccelInitError`` naming the cause when it cannot."""
        runtime.ensure_ready()

    _lazy_init = init

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return runtime._STATE.forked_from is not None

    @staticmethod
    def current_device() -> int:
        """Default device index of this process."""
        return basics.current_device()

    @staticmethod
    def set_device(device: Any) -> None:
        """Select the default device."""
        basics.set_current_device(_index(device))

    @staticmethod
    @contextlib.contextmanager
    def device(device: Any) -> Iterator[None]:
        """Within the block, ``device`` is the default device."""
        before = basics.current_device()
        basics.set_current_device(_index(device))
        try:
            yield
        finally:
            basics.set_current_device(before)

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Wait for all work on a device."""
        streams.synchronize(device)

    # -- identity --------------------------------------------------------------------------------

    @staticmethod
    def get_device_properties(device: Any = None) -> DeviceProperties:
        """Name, generation, memory capacity, stable UUID and versions of a device."""
        spec = runtime.describe_devices()[_index(device)]
        return DeviceProperties(
            spec.name, spec.generation, spec.memory_bytes, spec.uuid, spec.isa, spec.firmware,
            runtime.versions()["driver"], spec.index,
        )

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        """Marketing name of a device."""
        return runtime.describe_devices()[_index(device)].name

    @staticmethod
    def get_device_capability(device: Any = None) -> dict[str, Any]:
        """Claimed dtypes and ISA, shaped like ``torch.accelerator.get_device_capability``."""
        spec = runtime.describe_devices()[_index(device)]
        return {"supported_dtypes": list(storable_dtypes()), "isa": spec.isa, "generation": spec.generation}

    @staticmethod
    def versions() -> dict[str, str | None]:
        """Driver / firmware / ISA / stepping / runtime version strings."""
        return runtime.versions()

    # -- memory ------------------------------------------------------------------------------------

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        """Allocator counters of a device."""
        return memory.memory_stats(_index(device))

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """Bytes in live allocations."""
        return memory.memory_stats(_index(device))["allocated_bytes"]

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        """Bytes held by the allocator (live + cached)."""
        return memory.memory_stats(_index(device))["reserved_bytes"]

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        """Peak of ``memory_allocated`` since the last reset."""
        return memory.memory_stats(_index(device))["peak_allocated_bytes"]

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        """Peak of ``memory_reserved`` since the last reset."""
        return memory.memory_stats(_index(device))["peak_reserved_bytes"]

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        """Restart peak tracking."""
        memory.reset_peak_memory_stats(_index(device))

    @staticmethod
    def empty_cache() -> None:
        """Release cached blocks (reserved drops to allocated)."""
        memory.empty_cache()

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """(free, total) bytes of a device."""
        stats = memory.memory_stats(_index(device))
        return stats["capacity_bytes"] - stats["reserved_bytes"], stats["capacity_bytes"]

    # -- RNG -----------------------------------------------------------------------------------------

    @staticmethod
    def manual_seed(seed: int) -> None:
        """Seed the current device's generator."""
        rng.manual_seed(seed, basics.current_device())

    @staticmethod
    def seed() -> int:
        """Seed the current device's generator randomly."""
        return rng.seed(basics.current_device())

    @staticmethod
    def seed_all() -> None:
        """Seed every device's generator randomly."""
        for i in range(runtime.device_count()):
            rng.seed(i)

    @staticmethod
    def initial_seed() -> int:
        """Seed of the current device's generator."""
        return rng.initial_seed(basics.current_device())

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        """Generator state of a device (CPU uint8 tensor)."""
        return rng.get_rng_state(_index(device))

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        """Restore a device's generator state."""
        rng.set_rng_state(state, _index(device))

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        """States of all devices."""
        return [rng.get_rng_state(i) for i in range(runtime.device_count())]

    @staticmethod
    def set_rng_state_all(states: list[torch.Tensor]) -> None:
        """Restore all devices' states."""
        for i, state in enumerate(states):
            rng.set_rng_state(state, i)

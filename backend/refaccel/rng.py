"""Per-device random number generators (Philox-free: a host Mersenne generator per device).

Random kernels (``normal_``, ``uniform_``, ``random_``, ``bernoulli_``) draw from the device's
generator unless the call passes one, so::

    >>> import torch; from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> torch.refaccel.manual_seed(7); a = torch.randn(3, device="refaccel")
    >>> torch.refaccel.manual_seed(7); b = torch.randn(3, device="refaccel")
    >>> torch.equal(a.cpu(), b.cpu())
    True

``torch.manual_seed`` reaches these generators through the device module's ``manual_seed_all``.
A ``torch.Generator(device="refaccel")`` is not served (generators are C++ hooks).
"""

from __future__ import annotations

import threading

import torch

from . import runtime

__all__ = ["generator", "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state"]

_DEFAULT_SEED = 67280421310721  # the default seed of PyTorch's CPU generator
_GENERATORS: dict[int, torch.Generator] = {}
_LOCK = threading.Lock()


def generator(index: int = 0) -> torch.Generator:
    """The generator of ``refaccel:index`` (created on first use with the default seed)."""
    gen = _GENERATORS.get(index)
    if gen is None:
        with _LOCK:
            if index not in _GENERATORS:
                if not 0 <= index < runtime.device_count():
                    raise RuntimeError(f"refaccel: invalid device index {index}")
                g = torch.Generator()
                g.manual_seed(_DEFAULT_SEED)
                _GENERATORS[index] = g
            gen = _GENERATORS[index]
    return gen


def manual_seed(seed: int, index: int = 0) -> None:
    """Seed one device's generator."""
    generator(index).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (what ``torch.manual_seed`` calls)."""
    for i in range(runtime.device_count()):
        manual_seed(seed, i)


def seed(index: int = 0) -> int:
    """Seed one device's generator non-deterministically; returns the seed."""
    return generator(index).seed()


def initial_seed(index: int = 0) -> int:
    """The seed the device's generator was last seeded with."""
    return generator(index).initial_seed()


def get_rng_state(index: int = 0) -> torch.Tensor:
    """The generator state as a CPU uint8 tensor."""
    return generator(index).get_state()


def set_rng_state(state: torch.Tensor, index: int = 0) -> None:
    """Restore a state returned by ``get_rng_state``."""
    generator(index).set_state(state.cpu() if state.device.type != "cpu" else state)

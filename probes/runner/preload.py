"""Imported by the workers' forkserver (:mod:`.zygote`): torch and the runner's worker side, once.

Nothing here creates a tensor on a device, starts a thread pool or imports the backend under
test (a task kind's own imports come from its warm module, e.g. :mod:`opmatrix.probes.ops.warm`).
torch's device-backend autoload (out-of-tree backends registered as ``torch.backends`` entry
points, imported by ``import torch``) is switched off for this import and run by each worker
instead (:func:`load_deferred_backends`): a vendor's extension may initialise its runtime when
imported, and a forked child must not inherit that.
"""

from __future__ import annotations

import os

__all__ = ["AUTOLOAD_DEFERRED", "load_deferred_backends"]

_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"

_before = os.environ.get(_AUTOLOAD)
os.environ[_AUTOLOAD] = "0"
try:
    import torch
finally:
    if _before is None:
        os.environ.pop(_AUTOLOAD, None)
    else:
        os.environ[_AUTOLOAD] = _before

#: whether this import skipped torch's device-backend autoload, which each worker then runs
AUTOLOAD_DEFERRED = True

import gc  # noqa: E402

import opmatrix.backend.registry  # noqa: E402,F401
import opmatrix.probes.runner.worker  # noqa: E402,F401

# what the imports made lives as long as the server and its children: collections skip it, so a
# forked worker's collections do not write to (and so copy) the pages it shares with the server
gc.freeze()


def load_deferred_backends() -> None:
    """In a worker forked from the server: the device-backend autoload ``import torch`` would have done."""
    enabled = getattr(torch, "_is_device_backend_autoload_enabled", lambda: False)
    if enabled():  # reads the worker's environment: the user's setting, as ``import torch`` would
        torch._import_device_backends()

"""opmatrix.backend: adapters that tell the probes how to drive one device backend.

    >>> from opmatrix.backend import get_adapter
    >>> get_adapter("cpu").device_type
    'cpu'
"""

from .base import Adapter, FallbackSeen, Rejection
from .registry import BUILTIN, UnknownBackend, backend_names, get_adapter

__all__ = ["Adapter", "BUILTIN", "FallbackSeen", "Rejection", "UnknownBackend", "backend_names", "get_adapter"]

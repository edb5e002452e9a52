"""How a backend's initialisation can be made to fail on purpose, declared by the backend.

The ``init_messages`` runtime check provokes each declared failure in a child process and checks
that the error names its cause (driver version, missing driver or firmware, device busy, device
in reset) and contains the words the backend says it does. An adapter declares its modes with
:meth:`~opmatrix.backend.base.Adapter.init_failure_modes`; a plain PrivateUse1 module
(``--backend privateuse1:pkg.mod``) with a module attribute::

    OPMATRIX_INIT_FAILURE_MODES = [
        {"mode": "driver_mismatch", "env": {"MYACCEL_FAKE_DRIVER": "1.0"},
         "cause": "unsupported_driver", "words": ["driver", "1.0"]},
    ]

``cause`` is one of ``unsupported_driver``, ``missing_driver``, ``device_busy``,
``device_reset`` (the causes :mod:`opmatrix.probes.runtime.initfail` tells apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CAUSES", "MODULE_ATTR", "InitFailureMode", "modes_from_module"]

MODULE_ATTR = "OPMATRIX_INIT_FAILURE_MODES"
CAUSES = ("unsupported_driver", "missing_driver", "device_busy", "device_reset")


@dataclass(frozen=True)
class InitFailureMode:
    """One provokable initialisation failure: the environment that causes it, the cause its
    message must name and words it must contain."""

    mode: str
    env: tuple[tuple[str, str], ...]
    cause: str
    words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"init failure mode {self.mode!r}: cause {self.cause!r} is not one of {', '.join(CAUSES)}")


def modes_from_module(module: Any) -> tuple[InitFailureMode, ...]:
    """The modes a module declares in ``OPMATRIX_INIT_FAILURE_MODES`` (none: empty); a malformed
    declaration raises ``ValueError`` naming the module, the entry and what is wrong."""
    declared = getattr(module, MODULE_ATTR, None)
    if declared is None:
        return ()
    where = f"{getattr(module, '__name__', module)}.{MODULE_ATTR}"
    if not isinstance(declared, (list, tuple)):
        raise ValueError(f"{where}: expected a list of mappings, got {type(declared).__name__}")
    modes = []
    for i, item in enumerate(declared):
        try:
            env = item["env"]
            modes.append(InitFailureMode(str(item["mode"]), tuple((str(k), str(v)) for k, v in env.items()),
                                         str(item["cause"]), tuple(str(w) for w in item.get("words", ()))))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"{where}[{i}]: expected {{mode, env: {{VAR: value}}, cause, words}}: {exc}") from None
    return tuple(modes)

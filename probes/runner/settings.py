"""The runner's environment settings, checked before any worker starts: a value that means
nothing is refused (exit 2) rather than silently read as the default::

    OPMATRIX_WORKER_START=spwan opmatrix probe ...
    # OPMATRIX_WORKER_START: unknown value 'spwan' (choose from spawn, fork, or unset it for the default)
"""

from __future__ import annotations

import os

__all__ = ["SETTINGS", "setting_problems"]

#: setting -> the values it takes ("" is unset: the default)
SETTINGS: dict[str, tuple[str, ...]] = {
    "OPMATRIX_WORKER_START": ("spawn", "fork"),
    "OPMATRIX_PROGRESS": ("bar", "lines"),
    "OPMATRIX_NO_CACHE": ("1", "0", "true", "false", "yes", "no", "on", "off"),
}


def setting_problems(environ: dict[str, str] | None = None) -> list[str]:
    """One line per runner setting whose value is not one it takes (case and spaces aside)."""
    env = os.environ if environ is None else environ
    problems = []
    for name, values in SETTINGS.items():
        text = env.get(name, "").strip().lower()
        if text and text not in values:
            problems.append(f"{name}: unknown value {env[name]!r} (choose from {', '.join(values)}, or unset it for "
                            "the default)")
    return problems

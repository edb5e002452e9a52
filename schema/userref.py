"""Import the user's own code named on the command line (``pkg.mod:attr``, ``privateuse1:pkg.mod``).

``python -m opmatrix`` finds modules in the current directory (it puts it first on ``sys.path``);
the ``opmatrix`` console script does not. So that both find ``tests.example_adapter`` from a
clone's root, or ``mymodels`` beside the user's notebook, a module that is not installed is
looked for in the current directory, which then joins ``sys.path`` and ``PYTHONPATH``: workers
and child processes import the module themselves and must find it the same way::

    >>> import_user_module("json").__name__
    'json'
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["child_env", "import_failure", "import_user_module"]


def _in_cwd(name: str) -> bool:
    top = name.split(".")[0]
    here = Path.cwd()
    return (here / top).is_dir() or (here / f"{top}.py").is_file()


def _add_cwd() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)  # after the installed packages: a local folder never shadows one
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, cwd])
    importlib.invalidate_caches()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an opmatrix child started as ``python -m``: it imports the user's code
    the way the console script does. ``-m`` puts the current directory first on ``sys.path``, so a
    folder named like the backend's package there (its source checkout, without the built
    extension) would shadow the installed package in the child only; ``PYTHONSAFEPATH``
    (Python 3.11+) keeps it off, and :func:`import_user_module` still finds a module that is
    only in the current directory."""
    return {**os.environ, "PYTHONSAFEPATH": "1", **(extra or {})}


def import_user_module(name: str) -> ModuleType:
    """``importlib.import_module(name)``, falling back to the current directory (see the module doc)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (name == missing or name.startswith(missing + ".")) or not _in_cwd(name):
            raise
    _add_cwd()
    return importlib.import_module(name)


def import_failure(exc: BaseException) -> str:
    """An import's failure as one line: the exception and, when there is one, its cause."""
    cause = exc.__cause__ or exc.__context__
    because = f" (caused by {type(cause).__name__}: {cause})" if cause is not None else ""
    return " ".join(f"{type(exc).__name__}: {exc}{because}".split())

"""A disk cache of generated OpInfo samples, per torch build, where caching them is sound.

OpInfo's ``sample_inputs`` costs about 2 ms a sample (a quarter of a probe's CPU on the common
ops); the samples depend only on the torch files that define them, the OpInfo, the dtype and
the seed. So a task's samples are saved once (``torch.save``) and loaded with
``torch.load(weights_only=True)`` by every later run on the same torch install::

    samples = load_samples(entry, torch.float32, seed=0, limit=None)   # None: a miss
    ...generate...
    store_samples(entry, torch.float32, 0, None, samples)

Sound only for plain data, so a set of samples is stored only when every sample uses OpInfo's
default output processing (the identity lambda; other lambdas cannot be saved) and every tensor
is a plain strided tensor without conj/neg bits or grad; the global RNG state after generation
is stored too and restored on a hit, so the rest of a task draws the same random numbers as
without the cache. Location: ``samples/`` under the cache root (``OPMATRIX_NO_CACHE=1`` turns
it off); a broken entry is a miss.
"""

from __future__ import annotations

import contextlib
import functools
import random
from pathlib import Path
from typing import Any

import torch

from opmatrix.schema.files import cache_dir

__all__ = ["load_samples", "store_samples"]


@functools.lru_cache(maxsize=1)
def _default_code() -> Any:
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(torch.empty(0)).output_process_fn_grad.__code__


def _path(entry: Any, dtype: torch.dtype, seed: int, limit: int | None) -> Path | None:
    from .source import _index_path  # keyed by the very files that define op_db and its samples

    folder, index = cache_dir("samples"), _index_path()
    if folder is None or index is None:
        return None
    dname = str(dtype).removeprefix("torch.")
    return folder / index.stem.removeprefix("names-") / f"{entry.full_name}-{dname}-s{seed}-l{limit}.pt"


def _plain(obj: Any) -> bool:
    """Whether ``obj`` holds only plain tensors and data that ``weights_only`` loading restores."""
    if isinstance(obj, torch.Tensor):
        return (obj.layout is torch.strided and not obj.is_nested and not obj.is_conj() and not obj.is_neg()
                and not obj.requires_grad and type(obj) is torch.Tensor)
    if isinstance(obj, (tuple, list)):
        return all(_plain(o) for o in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    return obj is None or isinstance(obj, (bool, int, float, complex, str, torch.dtype))


def store_samples(entry: Any, dtype: torch.dtype, seed: int, limit: int | None, samples: list[Any]) -> None:
    """Save ``samples`` (right after generating them) when that is sound; never raises."""
    path = _path(entry, dtype, seed, limit)
    if path is None or path.exists():
        return
    rows = []
    for s in samples:
        if getattr(s.output_process_fn_grad, "__code__", None) is not _default_code():
            return
        row = {"input": s.input, "args": tuple(s.args), "kwargs": dict(s.kwargs),
               "broadcasts_input": bool(s.broadcasts_input), "name": str(s.name)}
        if not _plain(row):
            return
        rows.append(row)
    state = {"rows": rows, "torch_rng": torch.get_rng_state(), "py_rng": random.getstate()}
    with contextlib.suppress(Exception):  # a cache only ever saves time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(state)}.tmp")
        torch.save(state, tmp)
        tmp.replace(path)


def load_samples(entry: Any, dtype: torch.dtype, seed: int, limit: int | None) -> list[Any] | None:
    """The samples saved for this (OpInfo, dtype, seed, limit), with the RNG state restored; None on a miss."""
    path = _path(entry, dtype, seed, limit)
    if path is None or not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=True)
        from torch.testing._internal.opinfo.core import SampleInput

        samples = [SampleInput(r["input"], args=tuple(r["args"]), kwargs=dict(r["kwargs"]),
                               broadcasts_input=r["broadcasts_input"], name=r["name"]) for r in state["rows"]]
        py_rng = state["py_rng"]
        random.setstate((py_rng[0], tuple(py_rng[1]), py_rng[2]))
        torch.set_rng_state(state["torch_rng"])
    except Exception:  # noqa: BLE001 - a broken or foreign entry is a miss
        return None
    return samples

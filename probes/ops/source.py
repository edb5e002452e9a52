"""The op source: PyTorch's OpInfo database, selected by name, with deterministic samples.

Each OpInfo is addressed by its full name (``softmax``, ``softmax.with_dtype``)::

    >>> [o.full_name for o in select_ops(["softmax"])]  # imports OpInfo (seconds): not run  # doctest: +SKIP
    ['softmax', 'softmax.with_dtype']

Samples are generated once per (OpInfo, dtype) on the CPU with a fixed seed; rank and layout
variants are derived from them by transformation (``layouts.py``), never generated again.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import hashlib
import importlib.util
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmatrix.schema.files import cache_dir, read_cache_json, say_cache_miss, write_cache_entry

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput

__all__ = ["OpEntry", "UnknownOp", "adopt_index", "all_ops", "generate_samples", "index_cached", "index_data", "op_names",
           "select_ops", "source_hash", "values_undefined"]


class UnknownOp(ValueError):
    """An ``--ops`` name that matches no OpInfo; the message suggests the closest names."""


class OpEntry:
    """One OpInfo, by its full name; the OpInfo object itself is looked up when first used.

    Entries selected from the cached name index (see :func:`op_names`) carry only names, so
    planning never imports ``op_db``; ``entry.info`` imports it on first use.
    """

    __slots__ = ("full_name", "_name", "_info")

    def __init__(self, full_name: str, info: OpInfo | None = None, name: str | None = None):
        self.full_name = full_name
        self._info = info
        self._name = name if name is not None else (str(info.name) if info is not None else full_name)

    @property
    def name(self) -> str:
        """The OpInfo's name without its variant (``softmax`` for ``softmax.with_dtype``)."""
        return self._name

    @property
    def info(self) -> OpInfo:
        """The OpInfo (imports ``op_db`` the first time any entry needs one)."""
        if self._info is None:
            self._info = _by_full_name()[self.full_name].info
        return self._info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpEntry) and other.full_name == self.full_name

    def __hash__(self) -> int:
        return hash(self.full_name)

    def __repr__(self) -> str:
        return f"OpEntry({self.full_name!r})"


@functools.lru_cache(maxsize=1)
def all_ops() -> tuple[OpEntry, ...]:
    """Every OpInfo of ``op_db`` (importing it takes a few seconds, once per process)."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for info in op_db:
        full = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        out.append(OpEntry(full, info))
    _store_index(out)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _by_full_name() -> dict[str, OpEntry]:
    return {o.full_name: o for o in all_ops()}


# -- the name index: plan --ops without importing op_db ------------------------------------

#: files whose contents define op_db's names (and the torch build)
_INDEX_FILES = ("version.py", "testing/_internal/common_methods_invocations.py", "testing/_internal/opinfo")


def _torch_root() -> Path | None:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    return Path(spec.origin).parent if spec is not None and spec.origin else None


@functools.lru_cache(maxsize=1)  # torch's files do not change under a running process
def _index_path() -> Path | None:
    """The index file for the installed torch: keyed by the stat of the files op_db is made of."""
    folder, root = cache_dir("opinfo"), _torch_root()
    if folder is None or root is None:
        return None
    h = hashlib.sha256(str(root).encode())
    for rel in _INDEX_FILES:
        target = root / rel
        paths = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                return None
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return folder / f"names-{h.hexdigest()[:20]}.json"


def _index_data(entries: Iterable[OpEntry]) -> dict[str, Any]:
    import torch

    ops = [[e.full_name, e.name] for e in entries]
    return {"torch": str(torch.__version__), "git": str(getattr(torch.version, "git_version", "")), "ops": ops,
            "digest": _ops_digest(ops)}


def _ops_digest(ops: object) -> str:
    return hashlib.sha256(json.dumps(ops, sort_keys=True).encode()).hexdigest()


def _store_index(entries: list[OpEntry]) -> None:
    path = _index_path()
    if path is None or _index() is not None:
        return
    if write_cache_entry(path, json.dumps(_index_data(entries), sort_keys=True)):
        _index.cache_clear()  # read back from now on, as the next run will


def index_data() -> dict[str, Any]:
    """OpInfo's name index as plain data (imports ``op_db``, and caches the index on disk).

    A first run's zygote computes it for the orchestrator (:func:`adopt_index`), which then plans
    without importing torch at all."""
    return _index_data(all_ops())


def _installed_torch() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def index_problem(data: object) -> str | None:
    """Why ``data`` is not OpInfo's name index for the installed torch (None when it is): not the
    shape, no ops (an emptied file), ops that do not hash to its digest, or another torch's."""
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list) or "torch" not in data:
        return "is not an OpInfo name index"
    if not data["ops"]:
        return "names no OpInfo (an emptied index)"
    if "digest" not in data:
        return "has no digest (written by an older opmatrix)"
    if data.get("digest") != _ops_digest(data["ops"]):
        return "does not match its own digest (edited or torn)"
    installed = _installed_torch()
    if installed is not None and str(data["torch"]).split("+")[0] != installed.split("+")[0]:
        return f"was made for torch {data['torch']}, not the installed {installed}"
    return None


def _parse_index(data: object) -> dict[str, Any] | None:
    if index_problem(data) is not None:
        return None
    assert isinstance(data, dict)
    try:
        ops = [OpEntry(str(full), name=str(name)) for full, name in data["ops"]]
        return {"torch": str(data["torch"]), "git": str(data["git"]), "ops": tuple(ops)}
    except (KeyError, TypeError, ValueError):
        return None


_ADOPTED: list[dict[str, Any]] = []  # an index another process built for this one (adopt_index)


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, Any] | None:
    if _ADOPTED:
        return _ADOPTED[0]
    path = _index_path()
    if path is None:
        return None
    data = read_cache_json(path)  # a FIFO, a link, a huge or torn file: a miss, said once
    if data is None:
        return None  # a miss: all_ops() imports op_db and writes the index again
    problem = index_problem(data)
    if problem is not None:
        say_cache_miss(path, problem)
        return None
    return _parse_index(data)


def adopt_index(data: object) -> bool:
    """Use ``data`` (what :func:`index_data` returned in another process of this torch install)
    as the name index; False, and nothing changed, when it is not one."""
    parsed = _parse_index(data)
    if parsed is None:
        return False
    _ADOPTED[:] = [parsed]
    _index.cache_clear()
    return True


def index_cached() -> bool:
    """Whether OpInfo's name index for this torch is cached (else planning imports ``op_db``)."""
    return _index() is not None


def op_names() -> tuple[OpEntry, ...]:
    """Every OpInfo as a name-only entry, from the cached index when there is one, else ``op_db``."""
    index = _index()
    return index["ops"] if index is not None else all_ops()  # type: ignore[no-any-return]


def select_ops(patterns: Sequence[str] | None) -> list[OpEntry]:
    """OpInfos whose name or full name matches one of ``patterns`` (fnmatch); all when None.

    A plain name selects the OpInfo and its variants (``softmax`` -> ``softmax``,
    ``softmax.with_dtype``). A pattern that matches nothing raises :class:`UnknownOp`.
    """
    ops = op_names()
    if not patterns:
        return list(ops)
    chosen: dict[str, OpEntry] = {}
    for pattern in patterns:
        hits = [o for o in ops if fnmatch.fnmatchcase(o.full_name, pattern) or fnmatch.fnmatchcase(o.name, pattern)]
        if not hits:
            names = sorted({o.full_name for o in ops})
            close = difflib.get_close_matches(pattern, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownOp(f"--ops: {pattern!r} matches no OpInfo{hint}")
        for o in hits:
            chosen[o.full_name] = o
    return [chosen[k] for k in sorted(chosen)]


def source_hash(entries: Iterable[OpEntry]) -> str:
    """Identity of the op source: torch build plus the selected OpInfo names."""
    index = _index()
    if index is not None:  # the versions of the very torch files the index is keyed by
        version, git = index["torch"], index["git"]
    else:
        import torch

        version, git = torch.__version__, str(getattr(torch.version, "git_version", ""))
    h = hashlib.sha256()
    h.update(version.encode())
    h.update(git.encode())
    for e in entries:
        h.update(e.full_name.encode() + b"\0")
    return h.hexdigest()[:16]


def _sample_iter(info: OpInfo, dtype: torch.dtype, requires_grad: bool = False) -> Iterable[SampleInput]:
    """What ``info.sample_inputs("cpu", dtype, set_seed=False)`` yields, without its tracker.

    ``OpInfo.sample_inputs`` wraps ``sample_inputs_func`` in a ``TrackedInputIter`` that looks for
    the running unittest by ``inspect.stack()`` (reading the source of every frame) once per
    call and once per op: outside a test it finds none and changes nothing, but from a worker's
    deep stack it cost more than generating the samples. The function it wraps is called here,
    with what ``sample_inputs`` adds when not in a test: nothing (no subtests, no conjugated
    extras, every sample). An OpInfo without that function takes the public way.
    """
    func = getattr(info, "sample_inputs_func", None)
    if func is None or type(info).sample_inputs is not _opinfo_sample_inputs():
        return info.sample_inputs("cpu", dtype, requires_grad=requires_grad, set_seed=False)  # type: ignore[no-any-return]
    return func(info, "cpu", dtype, requires_grad)  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1)
def _opinfo_sample_inputs() -> Callable[..., Iterable[SampleInput]]:
    from torch.testing._internal.opinfo.core import OpInfo

    return OpInfo.sample_inputs


def generate_samples(entry: OpEntry, dtype: torch.dtype, *, seed: int = 0, limit: int | None = None,
                     requires_grad: bool = False, partial: list[str] | None = None) -> list[SampleInput]:
    """CPU samples of ``entry`` at ``dtype``, reproducible (seeded once per call).

    ``requires_grad``: OpInfo's gradient generation (it marks the tensors whose gradients its
    own tests take: never running statistics or loss targets). ``partial``: when given, a
    generator that raises after yielding samples keeps those, and why it stopped is appended.

    Generated every time: without OpInfo's stack crawl (:func:`_sample_iter`) the 1,794 samples
    of ten common ops at 11 dtypes take 0.07 s, five times less than loading them back from a
    disk cache did (that cache is gone).
    """
    import random

    import torch

    # seed once per (op, dtype): OpInfo's default re-seeds before every sample (126 us each).
    # Samples are made on the host: only the host's generator is seeded. torch.manual_seed
    # would also call the backend's own manual_seed_all, whose failure is the runtime check
    # ``rng``'s finding, never a reason that OpInfo yields no samples.
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    samples: list[SampleInput] = []
    try:
        for i, s in enumerate(_sample_iter(entry.info, dtype, requires_grad)):
            if limit is not None and i >= limit:
                break
            samples.append(s)
    except Exception as exc:
        # OpInfo's generator raised part way (it computes some samples with ops the dtype lacks:
        # matrix_power's via svd): the samples it yielded stand, the rest are said to be missing
        if partial is None or not samples:
            raise
        partial.append(f"OpInfo's sample generation raised after {len(samples)} samples "
                       f"({type(exc).__name__}: {str(exc)[:160]})")
    return samples


def _skip_reason(decorator: object) -> str | None:
    """The reason string a ``unittest.skip(reason)`` decorator closes over, if it is one."""
    cells = getattr(decorator, "__closure__", None) or ()
    reasons = [c.cell_contents for c in cells if isinstance(c.cell_contents, str)]
    return reasons[0] if reasons else None


def values_undefined(entry: OpEntry, dtype: torch.dtype) -> str | None:
    """Why OpInfo says this op's outputs cannot be compared with the CPU's, on any device.

    PyTorch's ``test_compare_cpu`` (device vs CPU, the comparison opmatrix makes) is skipped for
    ops whose values are random (``svd_lowrank``, ``fractional_max_pool2d``, ``rrelu``) or
    undefined for some inputs (shifts past the bit width, overflowing casts, ``unique`` order).
    Those skips, when they hold for every device and this dtype, are read here: the probe then
    compares shapes and dtypes only and says why. A skip that holds only under a condition
    ("when dropout_p > 0") is left to the sample (see the engine).
    """
    for info in getattr(entry.info, "decorators", None) or ():
        if getattr(info, "cls_name", None) != "TestCommon" or getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if getattr(info, "device_type", None) is not None or not getattr(info, "active_if", True):
            continue
        dtypes = getattr(info, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        for decorator in getattr(info, "decorators", ()):
            reason = _skip_reason(decorator)
            if reason and ("non-deterministic" in reason or "undefined" in reason) and "when" not in reason:
                return f"values not compared: OpInfo skips the CPU comparison ({reason})"
    return None

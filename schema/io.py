"""Safe, strict, deterministic YAML IO for every opmatrix artifact.

Loading accepts plain YAML only (no Python tags: nothing in a document ever runs), rejects
duplicate keys with their line numbers, and turns validation errors into messages that name the
file, the path inside it, the line, and what was expected::

    m.yaml:14: operators.aten.softmax.int[1].path: 'nativ' is not one of native, composite,
    decomposed, fallback, rejected

Dumping is deterministic: sorted keys, defaults left out, byte-identical on re-dump, a header
naming the command that produced the file, written atomically and only when the bytes change.
libyaml's C loader and dumper are used when present, pure Python otherwise.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .contract import Contract
from .files import write_bytes_atomic, write_text_atomic
from .gcpause import gc_paused
from .integrity import PARSED_DIGEST, parsed_content
from .lines import LineIndex
from .matrix import SCHEMA_VERSION, Matrix
from .perf import CompatReport, PerfRecord
from .sidecar import load_cached, remember
from .yamlload import HAVE_LIBYAML, ArtifactError, loads_yaml

#: artifacts that name their kind in a top-level ``kind`` field
_KINDS: dict[str, type[BaseModel]] = {"perf-record": PerfRecord, "compat-report": CompatReport}

__all__ = [
    "UsageError",
    "ArtifactError",
    "dump_model",
    "HAVE_LIBYAML",
    "dump_yaml",
    "dumps_model",
    "load_contract",
    "load_document",
    "load_matrix",
    "load_model",
    "loads_yaml",
    "validate_file",
    "write_text_atomic",
]

M = TypeVar("M", bound=BaseModel)


class UsageError(ValueError):
    """Invalid input named on the command line (unknown backend, op, dtype ...): exit 2."""


def _read(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ArtifactError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ArtifactError([f"{path}: is a directory, expected a YAML file"]) from None
    except UnicodeDecodeError as exc:
        raise ArtifactError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except OSError as exc:
        raise ArtifactError([f"{path}: cannot read: {exc.strerror}"]) from None


def load_document(path: str | os.PathLike[str], *, pure: bool = False) -> Any:
    """Read and safely parse one YAML file."""
    return loads_yaml(_read(path), str(path), pure=pure)


# -- validation messages -------------------------------------------------------------------


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<document>"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class whose field set applies at ``loc`` (for unknown-field suggestions)."""
    import typing

    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            # a dict key (e.g. the op name under ``operators``): keep the value type
            continue
        ann = field.annotation
        current = _unwrap(ann, typing)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(ann: Any, typing: Any) -> Any:
    for _ in range(4):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if not args:
            return ann
        ann = args[-1]
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
    return ann


def _describe_error(err: dict[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "enum":
        allowed = ctx.get("expected", "")
        allowed = allowed.replace("'", "").replace(" or ", ", ")
        return f"{value!r} is not one of {allowed}"
    if kind == "extra_forbidden":
        loc = tuple(err["loc"])
        parent = _model_at(model, loc[:-1])
        name = str(loc[-1])
        if parent is not None:
            fields = sorted(parent.model_fields)
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return f"unknown field {name!r}{hint} (allowed: {', '.join(fields)})"
        return f"unknown field {name!r}"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"{value!r} is not allowed; expected {ctx.get('expected')}"
    msg = err.get("msg", kind)
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if not err["loc"]:  # a whole-document invariant (e.g. integrity): the input is the whole file
        return msg
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{msg[0].lower() + msg[1:] if msg else kind} (got {shown})"


def _validation_messages(exc: ValidationError, model: type[BaseModel], where: str, text: str | None) -> list[str]:
    out = []
    index = LineIndex(text) if text is not None else None  # built once: all errors in one parse's time
    for err in exc.errors():
        loc = tuple(err["loc"])
        message = _describe_error(dict(err), model)
        located = _located(message) if not loc else []
        if located:  # a whole-document check that names its own paths: one message per path, with its line
            for path, text in located:
                line = index.line_of(path) if index is not None else None
                out.append(f"{where}:{line}: {text}" if line else f"{where}: {text}")
            continue
        line = index.line_of(loc) if index is not None else None
        prefix = f"{where}:{line}" if line else where
        out.append(f"{prefix}: {_format_loc(loc)}: {message}")
    return out


_PATH_PART = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def _located(message: str) -> list[tuple[tuple[Any, ...], str]]:
    """``"a.b[0].c: msg"`` lines of a document-level error, as (path, line text); [] when not of that form."""
    out: list[tuple[tuple[Any, ...], str]] = []
    for text in message.split("\n"):
        head, sep, _ = text.partition(": ")
        parts = list(_PATH_PART.finditer(head)) if sep else []
        if not parts or "".join(p.group(0) for p in parts) != head:
            return []
        out.append((tuple(int(p.group(2)) if p.group(2) else p.group(1) for p in parts), text))
    return out


def validate_data(data: Any, model: type[M], where: str, text: str | None = None) -> M:
    """Validate parsed data against ``model``; errors name ``where`` and the path inside."""
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "an empty document"
        raise ArtifactError([f"{where}: expected a mapping at the top level, got {kind}"])
    sealed = parsed_content(data, SCHEMA_VERSION) if model is Matrix else None
    return _validate(data, model, where, text, sealed[0] if sealed else None)


def _validate(data: dict[str, Any], model: type[M], where: str, text: str | None, digest: str | None) -> M:
    try:
        return model.model_validate(data, context={PARSED_DIGEST: digest} if digest else None)
    except ValidationError as exc:
        raise ArtifactError(_validation_messages(exc, model, where, text)) from None


@gc_paused()
def load_model(path: str | os.PathLike[str], model: type[M], *, pure: bool = False) -> M:
    """Load and validate one artifact file as ``model``."""
    text = _read(path)
    data = loads_yaml(text, str(path), pure=pure)
    return validate_data(data, model, str(path), text)


@gc_paused()
def load_matrix(path: str | os.PathLike[str], *, pure: bool = False) -> Matrix:
    """Load a matrix file (strictly); bytes loaded before come from the validated-model cache."""
    if pure:
        return load_model(path, Matrix, pure=True)

    def parse(text: str, where: str) -> tuple[Matrix, str | None]:
        data = loads_yaml(text, where)
        if not isinstance(data, dict):
            return validate_data(data, Matrix, where, text), None  # raises, naming what it got
        digest, content = parsed_content(data, SCHEMA_VERSION) or (None, "")
        loaded = _validate(data, Matrix, where, text, digest)
        if loaded.integrity is None or digest != loaded.integrity.digest:
            return loaded, None
        # a sealed document is the writer's plain data, and its canonical JSON (the digest's) is
        # already made: the cache entry is that JSON behind the seal (sidecar.entry_text)
        return loaded, content

    return load_cached(path, Matrix, parse, lambda: load_model(path, Matrix))


def load_contract(path: str | os.PathLike[str]) -> Contract:
    """Load a contract file (strictly)."""
    return load_model(path, Contract)


def kind_of(data: Any) -> type[BaseModel] | None:
    """Which artifact a parsed document is: a matrix has ``operators``, a contract ``level``."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") in _KINDS:
        return _KINDS[data["kind"]]
    if "operators" in data or "backend" in data and isinstance(data.get("backend"), dict):
        return Matrix
    if "level" in data or "requirements" in data or "release" in data:
        return Contract
    return None


@gc_paused()
def validate_file(path: str | os.PathLike[str]) -> BaseModel:
    """Validate a matrix or a contract, telling which from its top-level keys."""
    text = _read(path)
    data = loads_yaml(text, str(path))
    model = kind_of(data)
    if model is None:
        top = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
        raise ArtifactError(
            [
                f"{path}: neither a matrix (needs 'operators' and a 'backend' mapping) nor a contract "
                f"(needs 'level' and 'release'); top-level keys: {top or 'none'}"
            ]
        )
    return validate_data(data, model, str(path), text)


# -- dumping -------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def model_to_data(model: BaseModel) -> dict[str, Any]:
    """Plain data for a model: JSON types, defaults left out (``schema_version`` kept)."""
    data = model.model_dump(mode="json", exclude_defaults=True)
    if "schema_version" in type(model).model_fields:
        data = {"schema_version": model.schema_version, **data}  # type: ignore[attr-defined]
    return data  # type: ignore[no-any-return]


def _represent_list(dumper: Any, data: list[Any]) -> Any:
    # short lists of scalars (dtypes, layouts, component ops) read best on one line
    flow = all(isinstance(v, (str, int, float, bool)) or v is None for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _make_dumper(base: type) -> type:
    dumper: Any = type("OpmatrixDumper", (base,), {})
    dumper.add_representer(list, _represent_list)
    return dumper


_DUMPERS = {True: _make_dumper(yaml.SafeDumper), False: _make_dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper))}


def _dumper(pure: bool) -> type:
    return _DUMPERS[pure or not HAVE_LIBYAML]


def dump_yaml(data: Any, *, header: str = "", pure: bool = False) -> str:
    """Deterministic YAML text: sorted keys, block style, unicode kept, a ``#`` header."""
    body = yaml.dump(
        _plain(data),
        Dumper=_dumper(pure),
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
    )
    head = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return head + body


def _dumps(model: BaseModel, command: str, pure: bool) -> tuple[str, dict[str, Any]]:
    """The YAML text of an artifact and the plain data it holds."""
    if isinstance(model, Matrix):
        model = model.seal()  # counts and digest: a cut or edited copy is detected on load
    kind = type(model).__name__.lower()
    version = getattr(model, "schema_version", None)
    shown = f", schema version {version}" if version is not None else ""
    header = f"opmatrix {kind}{shown} (JSON Schema: `opmatrix schema {kind}`)."
    if command:
        header += f"\nGenerated by: {command}\nRegenerate it with the same command; do not edit by hand."
    data = model_to_data(model)
    return dump_yaml(data, header=header, pure=pure), data


def dumps_model(model: BaseModel, *, command: str = "", pure: bool = False) -> str:
    """YAML text of an artifact with a header naming the command that produced it."""
    return _dumps(model, command, pure)[0]


@gc_paused()
def dump_model(model: BaseModel, path: str | os.PathLike[str], *, command: str = "") -> bool:
    """Write an artifact to ``path`` (atomic, only if changed); True when written.

    A matrix's validated model is also stored in the validated-model cache under the bytes
    written (:func:`~.sidecar.remember`), so that the first ``query`` or ``report`` of a fresh
    matrix does not parse the YAML again.
    """
    text, data = _dumps(model, command, False)
    raw = text.encode("utf-8")
    written = write_bytes_atomic(path, raw)
    if isinstance(model, Matrix):
        remember(raw, Matrix, data)
    return written


"""Strict YAML parsing: plain data only, no duplicate keys, no aliases, no tags.

PyYAML's constructor builds every node through Python generators (about 1 s per MB even with
libyaml), and composing the node tree alone costs most of that, so when libyaml is present a
document is built straight from libyaml's parse events: one loop keeps a stack of the dicts and
lists being filled, types plain scalars by their first character (only those that may be a
number, a bool or null go through YAML 1.1's resolvers), and checks the same rules as the strict
loader (no anchor or alias, no duplicate key, no explicit tag, one document).

Anything the walk does not accept (an error, a timestamp, a merge key) is parsed again by the
strict constructor-based loader, so what is accepted and every error message stay exactly those
of :func:`loads_yaml`'s strict loader::

    >>> loads_yaml("a: 1\\nb: [x, 2.5, null]")
    {'a': 1, 'b': ['x', 2.5, None]}
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

__all__ = ["HAVE_LIBYAML", "MAX_DEPTH", "ArtifactError", "dumps_json", "loads_json", "loads_yaml"]

#: deepest nesting of mappings and lists an artifact may have (a matrix needs about 8): a deeper
#: document is hostile or broken, refused before it can exhaust the parser's stack
MAX_DEPTH = 64

HAVE_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


class ArtifactError(ValueError):
    """An artifact could not be read: every message names the file and where inside it."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("\n".join(messages))


# -- the strict constructor-based loader (the reference for what is accepted) ---------------


def _make_loader(pure: bool) -> type:
    base = yaml.CSafeLoader if HAVE_LIBYAML and not pure else yaml.SafeLoader

    class StrictLoader(base):  # type: ignore[valid-type, misc]
        """Safe loader that rejects duplicate keys (SafeLoader silently keeps the last one)."""

    def construct_object(loader: Any, node: yaml.Node, deep: bool = False) -> Any:
        if node in loader.constructed_objects or node in loader.recursive_objects:
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases (*name) are not allowed in opmatrix artifacts; write the value out",
                node.start_mark,
            )
        return base.construct_object(loader, node, deep=deep)  # type: ignore[attr-defined]

    StrictLoader.construct_object = construct_object  # type: ignore[method-assign]

    def construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain scalar", key_node.start_mark
                ) from None
            line = key_node.start_mark.line + 1
            if key in out:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first_line[key]}); remove one of them",
                    key_node.start_mark,
                )
            first_line[key] = line
            out[key] = loader.construct_object(value_node, deep=deep)
        return out

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

    def construct_timestamp(loader: Any, node: yaml.ScalarNode) -> Any:
        try:
            return base.construct_yaml_timestamp(loader, node)  # type: ignore[attr-defined]
        except ValueError as exc:  # 2099-02-30 matches the date pattern, then datetime refuses it
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is not a real date ({exc}); write YYYY-MM-DD with a day the month has",
                node.start_mark,
            ) from None

    StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", construct_timestamp)
    return StrictLoader


_LOADERS: dict[bool, type] = {}


def _loader(pure: bool) -> type:
    if pure not in _LOADERS:
        _LOADERS[pure] = _make_loader(pure)
    return _LOADERS[pure]


def _strict_load(text: str, where: str, pure: bool) -> Any:
    try:
        data = yaml.load(text, Loader=_loader(pure))  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise _too_deep(where, "?") from None
    except yaml.constructor.ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        problem = exc.problem or str(exc)
        if "could not determine a constructor" in problem:
            tag = problem.split("tag", 1)[-1].strip().strip("'")
            tag = tag.replace("tag:yaml.org,2002:", "!!")
            problem = f"YAML tag {tag!r} is not allowed: opmatrix reads plain YAML only (nothing in a file runs)"
        raise ArtifactError([f"{where}:{line}: {problem}"]) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ArtifactError([f"{where}:{line}: malformed YAML: {exc.problem}"]) from None
    except yaml.YAMLError as exc:
        raise ArtifactError([f"{where}: malformed YAML: {exc}"]) from None
    if _depth_exceeds(data, MAX_DEPTH):
        raise _too_deep(where, "?")
    return data


# -- the fast path ---------------------------------------------------------------------------

_T = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _T + "str", _T + "map", _T + "seq"
#: first characters a plain scalar of another type than str can start with (YAML 1.1 resolvers)
_MAYBE_TYPED = frozenset("-+.0123456789yYnNtTfFoO~=<")
_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
#: decimals YAML 1.1 and Python's float() read alike (YAML wants a sign in the exponent)
_PLAIN_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?\Z")
#: the only plain scalars starting with a letter that YAML 1.1 types (bools and nulls)
_WORDS = frozenset("yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF null Null NULL ~".split())
_WORDS_START = frozenset(w[0] for w in _WORDS)
_SAFE = yaml.constructor.SafeConstructor()


class _Fallback(Exception):
    """The fast walk met something only the strict loader may judge."""


class _TooDeep(Exception):
    """Nesting deeper than MAX_DEPTH, at this line."""

    def __init__(self, line: int | str) -> None:
        super().__init__(line)
        self.line = line


def _too_deep(where: str, line: int | str) -> ArtifactError:
    return ArtifactError([f"{where}:{line}: nested more than {MAX_DEPTH} levels deep: not an opmatrix artifact "
                          "(hostile or broken input)"])


def _depth_exceeds(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists / dicts more than ``limit`` levels (iterative: no recursion)."""
    todo = [(data, 0)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            if depth >= limit:
                return True
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def _int(node: ScalarNode) -> int:
    value = node.value
    if _PLAIN_INT.match(value):
        return int(value)
    return _SAFE.construct_yaml_int(node)  # type: ignore[no-any-return]


_SCALARS: dict[str, Any] = {
    _T + "int": _int,
    _T + "float": _SAFE.construct_yaml_float,
    _T + "bool": _SAFE.construct_yaml_bool,
    _T + "null": lambda node: None,
    _T + "timestamp": _SAFE.construct_yaml_timestamp,
}
_KEY_CLASSES = frozenset((str, int, float, bool, type(None)))


_RESOLVER = yaml.resolver.Resolver()
_NO_KEY = object()


def _plain(value: str) -> Any:
    """A plain (unquoted, untagged) scalar, typed as YAML 1.1's resolvers type it."""
    if not value:
        return None
    first = value[0]
    if first in _WORDS_START:
        if value not in _WORDS:  # "native", "float32", "ok": no resolver matches a word outside the set
            return value
    elif first not in _MAYBE_TYPED:
        return value
    elif _PLAIN_INT.match(value):
        return int(value)
    elif _PLAIN_FLOAT.match(value):
        return float(value)
    tag = _RESOLVER.resolve(ScalarNode, value, (True, False))
    if tag == _STR:
        return value
    make = _SCALARS.get(tag)
    if make is None:
        raise _Fallback
    return make(ScalarNode(tag, value))


def _from_events(text: str) -> Any:
    """Build plain data straight from libyaml's parse events (no node tree, no resolver per scalar).

    Containers under construction sit on a stack, a mapping with the key waiting for its value;
    an anchor, an alias, an explicit tag, a non-scalar or repeated key, or a second document is
    left to the strict loader (:class:`_Fallback`). The loop is written out (no helper per value):
    creating libyaml's event objects is most of a parse, and this loop is the rest.
    """
    root: list[Any] = []
    box: Any = root  # the container being filled
    key: Any = _NO_KEY  # its pending key, when it is a mapping
    stack: list[tuple[Any, Any]] = []  # the containers around it, with their pending keys
    documents = 0
    value: Any
    typed: dict[str, Any] = {}  # plain scalar -> its value: a matrix repeats its keys and words thousands of times
    parser: Any = yaml.CSafeLoader(text)
    next_event = parser.get_event  # one call per event: yaml.parse's generator adds a check_event
    try:
        while True:
            event = next_event()
            cls = event.__class__
            if cls is StreamEndEvent or event is None:
                break
            if cls is ScalarEvent:
                if event.anchor is not None or event.tag not in (None, "!"):
                    raise _Fallback
                value = event.value
                if not event.style and event.implicit[0]:
                    plain = typed.get(value, _NO_KEY)
                    if plain is _NO_KEY:
                        plain = typed[value] = _plain(value)
                    value = plain
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _Fallback
                if len(stack) >= MAX_DEPTH:
                    raise _TooDeep(event.start_mark.line + 1)
                stack.append((box, key))
                box, key = ({} if cls is MappingStartEvent else []), _NO_KEY
                continue
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                value = box
                box, key = stack.pop()
            elif cls is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise _Fallback
                continue
            elif cls is AliasEvent:
                raise _Fallback
            else:
                continue
            if box.__class__ is list:
                box.append(value)
            elif key is _NO_KEY:
                if value.__class__ not in _KEY_CLASSES or value in box:
                    raise _Fallback
                key = value
            else:
                box[key] = value
                key = _NO_KEY
    finally:
        parser.dispose()
    return root[0] if root else None


def loads_yaml(text: str, where: str = "<string>", *, pure: bool = False) -> Any:
    """Parse YAML text safely; errors become :class:`ArtifactError` naming ``where`` and the line."""
    if HAVE_LIBYAML and not pure:
        try:
            return _from_events(text)
        except _TooDeep as exc:
            raise _too_deep(where, exc.line) from None
        except (_Fallback, yaml.YAMLError, RecursionError, ValueError):
            pass  # the strict loader decides, and words the error
    return _strict_load(text, where, pure)


def loads_json(text: str | bytes, where: str) -> Any:
    """``json.loads`` whose nesting is bounded: a document too deep to read is an ArtifactError (exit 2).

    The bound is the interpreter's recursion limit (about a thousand levels), where the C decoder
    stops; a record that deep fails its schema anyway. Malformed JSON raises ``json.JSONDecodeError``
    as usual (a torn journal line is the caller's to judge).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ArtifactError([f"{where}: JSON nested too deeply to read (more than about "
                             f"{sys.getrecursionlimit()} levels): not an opmatrix artifact"]) from None


def dumps_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes valid JSON: a non-finite float (a wrong cell's infinite error)
    becomes the string ``"inf"``, ``"-inf"`` or ``"nan"``, where ``json.dumps`` would write
    ``Infinity``, which no JSON parser but Python's reads."""
    return json.dumps(_finite(data), allow_nan=False, **kwargs)


def _finite(data: Any) -> Any:
    if isinstance(data, float) and not math.isfinite(data):
        return "nan" if data != data else ("inf" if data > 0 else "-inf")
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data

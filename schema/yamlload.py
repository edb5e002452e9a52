"""Strict YAML parsing: plain data only, no duplicate keys, no aliases, no tags.

PyYAML's constructor builds every node through Python generators (about 1 s per MB even with
libyaml), so a large matrix is parsed in two steps when libyaml is present:

1. libyaml composes the node tree in C, with a resolver that tags plain scalars by their first
   character instead of trying every implicit-type regex on each one;
2. one small recursive walk turns nodes into dicts, lists and scalars, checking the same rules
   as the strict loader (an alias is a node seen twice; a duplicate key; a tag other than
   str/int/float/bool/null/map/seq).

Anything the walk does not accept (an error, a timestamp, a merge key) is parsed again by the
strict constructor-based loader, so what is accepted and every error message stay exactly those
of :func:`loads_yaml`'s strict loader::

    >>> loads_yaml("a: 1\\nb: [x, 2.5, null]")
    {'a': 1, 'b': ['x', 2.5, None]}
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

__all__ = ["HAVE_LIBYAML", "ArtifactError", "loads_yaml"]

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
    return StrictLoader


_LOADERS: dict[bool, type] = {}


def _loader(pure: bool) -> type:
    if pure not in _LOADERS:
        _LOADERS[pure] = _make_loader(pure)
    return _LOADERS[pure]


def _strict_load(text: str, where: str, pure: bool) -> Any:
    try:
        return yaml.load(text, Loader=_loader(pure))  # noqa: S506 - a SafeLoader subclass
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


# -- the fast path ---------------------------------------------------------------------------

_T = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _T + "str", _T + "map", _T + "seq"
#: first characters a plain scalar of another type than str can start with (YAML 1.1 resolvers)
_MAYBE_TYPED = frozenset("-+.0123456789yYnNtTfFoO~=<")
_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_SAFE = yaml.constructor.SafeConstructor()


class _Fallback(Exception):
    """The fast walk met something only the strict loader may judge."""


if HAVE_LIBYAML:

    class _FastComposer(yaml.CSafeLoader):  # type: ignore[misc]
        """libyaml's composer; plain scalars that cannot be typed are str without a regex."""

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is ScalarNode and implicit[0] and value and value[0] not in _MAYBE_TYPED:
                return _STR
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]


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
_KEY_TYPES = (str, int, float, bool, type(None))


def _build(node: Any, seen: set[int]) -> Any:
    if id(node) in seen:
        raise _Fallback  # an alias: the same node twice
    seen.add(id(node))
    cls = node.__class__
    if cls is ScalarNode:
        if node.tag == _STR:
            return node.value
        make = _SCALARS.get(node.tag)
        if make is None:
            raise _Fallback
        return make(node)
    if cls is MappingNode:
        if node.tag != _MAP:
            raise _Fallback
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _build(key_node, seen)
            if not isinstance(key, _KEY_TYPES) or key in out:
                raise _Fallback
            out[key] = _build(value_node, seen)
        return out
    if cls is SequenceNode:
        if node.tag != _SEQ:
            raise _Fallback
        return [_build(item, seen) for item in node.value]
    raise _Fallback


def loads_yaml(text: str, where: str = "<string>", *, pure: bool = False) -> Any:
    """Parse YAML text safely; errors become :class:`ArtifactError` naming ``where`` and the line."""
    if HAVE_LIBYAML and not pure:
        try:
            node = yaml.compose(text, Loader=_FastComposer)  # noqa: S506 - composes nodes, constructs nothing
            return None if node is None else _build(node, set())
        except (_Fallback, yaml.YAMLError, RecursionError, ValueError):
            pass  # the strict loader decides, and words the error
    return _strict_load(text, where, pure)

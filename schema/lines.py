"""Where a validation error sits in a YAML file: a line index built once per file.

A matrix with many invalid values must report all of them in about the time of one parse, so
the document's node tree is composed once (libyaml when present) and each error's path is
looked up in it, with a key table per mapping built on first use::

    index = LineIndex(text)
    index.line_of(("operators", "aten.softmax.int", 1, "path"))   # -> 14
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["LineIndex"]


class LineIndex:
    """Line numbers (1-based) of the nodes of one YAML text, composed once."""

    def __init__(self, text: str):
        loader = getattr(yaml, "CSafeLoader", None) if getattr(yaml, "__with_libyaml__", False) else None
        try:
            self.root: yaml.Node | None = yaml.compose(text, Loader=loader or yaml.SafeLoader)  # noqa: S506
        except yaml.YAMLError:
            self.root = None
        self._keys: dict[int, dict[str, tuple[Any, Any]]] = {}

    def _children(self, node: yaml.MappingNode) -> dict[str, tuple[Any, Any]]:
        table = self._keys.get(id(node))
        if table is None:
            table = {}
            for k, v in node.value:
                table.setdefault(str(k.value), (k, v))
            self._keys[id(node)] = table
        return table

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        """Line of the node at ``loc`` (the key's line for a mapping member), when it can be found."""
        node: Any = self.root
        line = None
        for part in loc:
            if node is None:
                break
            line = node.start_mark.line + 1
            if isinstance(node, yaml.MappingNode):
                hit = self._children(node).get(str(part))
                node = hit[1] if hit else None
                if hit:
                    line = hit[0].start_mark.line + 1
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
        if node is not None:
            line = node.start_mark.line + 1
        return line

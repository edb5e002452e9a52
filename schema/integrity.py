"""Artifacts that prove themselves: a matrix carries its own counts and a digest of its content.

A matrix written by opmatrix ends its header block with::

    integrity:
      cells: 1530
      digest: sha256:3f1c...
      operators: 12

Every loader checks them (:meth:`opmatrix.schema.Matrix` validation): a file cut short (a
truncated copy, a matrix cut at an operator boundary) no longer holds the cells it says, and a
hand-edited one no longer matches its digest; both are invalid (exit 2), named as such. Files
written before this block existed have none and still load.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from .base import Model

__all__ = ["Integrity", "content_digest"]


class Integrity(Model):
    """The matrix's own counts and the SHA-256 of its content (everything but this block)."""

    cells: int = Field(ge=0, description="probed cells: the expansion of every entry")
    operators: int = Field(ge=0, description="operator overloads with entries")
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256 of the canonical JSON of the content")


def content_digest(data: Any) -> str:
    """``sha256:<hex>`` of ``data`` as canonical JSON (sorted keys, no spaces, inf/nan kept)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

"""Artifacts that prove themselves: a matrix carries its own counts and a digest of its content.

A matrix written by opmatrix ends its header block with::

    integrity:
      cells: 1530
      digest: sha256:3f1c...
      operators: 12

Every loader checks them (:meth:`opmatrix.schema.Matrix` validation): a file cut short (a
truncated copy, a matrix cut at an operator boundary) no longer holds the cells it says, and a
hand-edited one no longer matches its digest; both are invalid (exit 2), named as such. Files
written before this block existed have none and still load, but the gate and ``validate --strict``
refuse them unless ``--allow-unsealed``. The seal detects corruption and edits; it is not a
signature (anyone can recompute it): docs/seals.md says how to sign artifacts for authenticity.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from .base import Model

__all__ = ["PARSED_DIGEST", "Integrity", "content_digest", "parsed_content"]


class Integrity(Model):
    """The matrix's own counts and the SHA-256 of its content (everything but this block)."""

    cells: int = Field(ge=0, description="probed cells: the expansion of every entry")
    operators: int = Field(ge=0, description="operator overloads with entries")
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256 of the canonical JSON of the content")


def _canonical(data: Any) -> str:
    """``data`` as canonical JSON: sorted keys, no spaces, inf/nan kept."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_digest(data: Any) -> str:
    """``sha256:<hex>`` of ``data`` as canonical JSON (sorted keys, no spaces, inf/nan kept)."""
    return _sha256(_canonical(data))


#: validation context value set by the file loaders: the digest of the parsed document itself
#: (:func:`parsed_content`); when it equals the seal, the document is byte for byte the content the
#: writer sealed, and the model's own digest (a full dump, twice the cost) need not be recomputed
PARSED_DIGEST = "opmatrix.parsed_digest"


def parsed_content(data: Any, schema_version: int) -> tuple[str, str] | None:
    """The integrity digest of a parsed matrix document as it stands, with the JSON it was taken of.

    None when the document has no seal. A writer seals the content it dumps (defaults left out,
    ``schema_version`` kept), so for a file it wrote the digest equals ``Matrix.digest()`` of the
    validated model; for anything else (defaults written out, an edit) it differs and the model's
    digest decides. The JSON (the content without its ``integrity`` block, as canonical JSON) is
    returned too: the validated-model cache stores it rather than encoding the document again.
    """
    if not isinstance(data, dict) or "integrity" not in data:
        return None
    content = {k: v for k, v in data.items() if k != "integrity"}
    content.setdefault("schema_version", schema_version)
    try:
        text = _canonical(content)
    except (TypeError, ValueError):  # not plain JSON data (a YAML timestamp): validation will say
        return None
    return _sha256(text), text

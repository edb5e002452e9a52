"""Check that a built documentation site loads nothing from another host (an air-gapped lab reads it).

A page may *link* anywhere (a reader follows a link by choice); what it must not do is *load* a
stylesheet, font, script, image or frame from the network when opened. Usage, after `make docs`::

    python bench/offline_docs.py site-docs      # exit 1 naming each page and the remote resource
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

#: an HTML element that loads what it names (a <link> of any rel: preconnect, stylesheet, icon)
_LOADING_TAG = re.compile(r"<(?:link|script|img|iframe|source|audio|video|embed)\b[^>]*?"
                          r"\b(?:href|src|srcset)\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)", re.I)
#: a stylesheet import or url() of a remote file (data: URIs that mention http:// are not fetches)
_CSS_REMOTE = re.compile(r"(?:@import\s+(?:url\()?|url\()\s*[\"']?((?:https?:)?//[^\"')\s]+)", re.I)


def remote_loads(site: Path) -> Iterator[tuple[str, str]]:
    """(file relative to ``site``, remote URL) for every resource a page or stylesheet would fetch."""
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        pattern = _LOADING_TAG if path.suffix == ".html" else _CSS_REMOTE
        for match in pattern.finditer(text):
            yield str(path.relative_to(site)), match.group(1)


def main(argv: list[str]) -> int:
    """Exit 0 when ``argv[0]`` (a built site) loads nothing remote, else 1 with one line per finding."""
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python bench/offline_docs.py SITE_DIR (a built docs site, e.g. site-docs)", file=sys.stderr)
        return 2
    found = list(remote_loads(Path(argv[0])))
    for page, url in found[:20]:
        print(f"{argv[0]}/{page}: loads {url} from the network (an offline reader gets nothing)", file=sys.stderr)
    if found:
        print(f"offline docs: {len(found)} remote load(s); bundle them or switch them off (mkdocs.yml)", file=sys.stderr)
        return 1
    print(f"offline docs: {argv[0]} loads nothing from another host")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Regenerate the README's screenshot (docs/img/site.png) from the site the README's tour renders.

The picture is what a newcomer sees at the end of the tour: the verdict banner, the operator grid
and the coverage chart of refaccel g2, in Debian's Chromium (headless, never a downloaded
browser). Run the tour first (README, "First contact"), then::

    .venv/bin/python bench/readme_screenshot.py                 # reads out/tour/site/index.html
    .venv/bin/python bench/readme_screenshot.py --site DIR --out docs/img/site.png
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("OPMATRIX_CHROMIUM", "/usr/bin/chromium")
#: the README shows it at this size: wide enough for the grid's columns, tall enough for the chart
VIEWPORT = {"width": 1100, "height": 820}


def main(argv: list[str]) -> int:
    """Write the screenshot; exit 2 naming what is missing (the site, Chromium, playwright)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default=str(ROOT / "out" / "tour" / "site"), help="the tour's site folder")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "site.png"), help="the PNG to write")
    args = parser.parse_args(argv)
    index = Path(args.site) / "index.html"
    if not index.is_file():
        print(f"readme_screenshot: {index} does not exist: run the README's tour first (it ends with "
              "opmatrix report ... --out out/tour/site)", file=sys.stderr)
        return 2
    if not Path(CHROMIUM).exists():
        print(f"readme_screenshot: no Chromium at {CHROMIUM}: make browser-deps installs Debian's", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("readme_screenshot: the Python package playwright is missing: pip install -e '.[test]'", file=sys.stderr)
        return 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(index.resolve().as_uri())
        word = page.inner_text("#verdict .word").strip() if page.query_selector("#verdict .word") else ""
        page.screenshot(path=args.out)
        browser.close()
    if not word:
        print(f"readme_screenshot: {index} shows no verdict: render it with --gate (the tour's gate.json)",
              file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({VIEWPORT['width']}x{VIEWPORT['height']}, verdict {word!r}) from {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The files a site render owns: written inside ``--out`` only, listed in a manifest, nothing else touched.

A render plans every page first, then :class:`SiteFiles` writes them::

    files = SiteFiles(out_dir)          # reads out_dir/.opmatrix-manifest.json (what the last render wrote)
    files.add("index.html", html)       # refuses a path through a symlink or out of out_dir
    files.commit(result)                # refuses to overwrite a file it did not write; removes only
                                        # files of the old manifest that this render no longer makes

Files a user keeps beside the site (their own ``diff.html``, notes, a symlinked folder) are
never overwritten, followed or deleted: a clash is an :class:`~opmatrix.schema.ArtifactError`
naming the file (exit 2), raised before anything is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from opmatrix.schema import ArtifactError

__all__ = ["MANIFEST", "SiteFiles"]

MANIFEST = ".opmatrix-manifest.json"


class SiteFiles:
    """Planned pages of one render, checked and then written (see the module docstring)."""

    def __init__(self, out_dir: Path):
        self.out = out_dir
        self.root = out_dir.resolve()
        self.pages: dict[str, bytes] = {}
        self.old = self._read_manifest()

    def _read_manifest(self) -> set[str]:
        try:
            data = json.loads((self.out / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        files = data.get("files") if isinstance(data, dict) else None
        return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()

    def _inside(self, rel: str) -> Path:
        """The path of ``rel`` under ``out``, refusing symlinks and anything that leaves ``out``."""
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise ArtifactError([f"{self.out}: page path {rel!r} would leave --out"])
        path = self.out
        for part in Path(rel).parts:
            path = path / part
            if path.is_symlink():
                raise ArtifactError([f"{path}: is a symlink; report never writes through one (it could lead out of "
                                     f"{self.out}); remove it or choose another --out"])
        if path.parent.exists() and not path.parent.resolve().is_relative_to(self.root):
            raise ArtifactError([f"{path}: resolves outside {self.out}; choose another --out"])
        return path

    def add(self, rel: str, text: str) -> None:
        """Plan ``text`` as the page ``rel`` (relative to ``out``)."""
        self._inside(rel)
        self.pages[rel] = text.encode("utf-8")

    def _clashes(self) -> list[str]:
        out = []
        for rel, data in self.pages.items():
            path = self.out / rel
            if rel in self.old or not path.exists() and not path.is_symlink():
                continue
            try:
                same = path.is_file() and path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                out.append(rel)
        return out

    def commit(self, result: Any) -> None:
        """Write the planned pages (only changed bytes), remove what the last render made and this one
        did not, and record the manifest; ``result`` is the render's SiteResult."""
        clashes = self._clashes()
        if clashes:
            shown = ", ".join(sorted(clashes)[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
            raise ArtifactError([f"{self.out}: would overwrite {shown}, not written by an earlier report here; move "
                                 "them away or choose another --out (report only replaces files it wrote)"])
        for rel, data in sorted(self.pages.items()):
            self._write(self.out / rel, data, result)
        for rel in sorted(self.old - set(self.pages)):
            try:
                path = self._inside(rel)
            except ArtifactError:
                continue  # a path that now leads through a symlink: leave it alone
            if path.is_file():
                path.unlink()
                result.removed.append(path)
        manifest = json.dumps({"files": sorted(self.pages)}, indent=1) + "\n"
        self._write(self.out / MANIFEST, manifest.encode("utf-8"), result)

    def _write(self, path: Path, data: bytes, result: Any) -> None:
        try:
            if path.read_bytes() == data:
                if result is not None:
                    result.unchanged += 1
                return
        except (FileNotFoundError, IsADirectoryError):
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)  # readers never see half a page
        except BaseException:  # a full disk, an interrupt: no temporary file is left behind
            tmp.unlink(missing_ok=True)
            raise
        if result is not None:
            result.written.append(path)

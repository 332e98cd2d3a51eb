"""Which files a batch reads: files, folders (recursively), globs and manifest files.

* A **file** is read whatever its name.
* A **folder** is searched recursively for trace names (``.json``, ``.json.gz``, ``.sqlite``,
  ``.nsys-rep``, ``.qdrep``; ``metadata.json`` of capture folders excluded); hidden folders
  (``.git``, the cache) are skipped, symbolic links to folders are not followed.
* A **glob** (``runs/*/rank*.json.gz``, ``**`` for any depth) is expanded; matching folders
  are searched as above.
* A **manifest** is a text file named ``*.txt``, ``*.lst``, ``*.list`` or ``*.manifest`` (or any
  file given as ``@FILE``) with one input per line — a file, folder or glob, relative to the
  manifest's folder; blank lines and lines starting with ``#`` are ignored.

Paths are made absolute (not resolving symbolic links) and deduplicated; the result is sorted.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import TraceNotFoundError, UsageError
from ..reading.job import CaptureMetadata, is_trace_name, read_capture_metadata

MANIFEST_SUFFIXES = (".txt", ".lst", ".list", ".manifest")
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Discovered:
    """The files of a batch and what was passed over."""

    files: tuple[str, ...]
    #: files inside the given folders whose names are not trace names
    ignored: int
    #: folder → capture metadata, for folders of the inputs that have a metadata.json
    captures: dict[str, CaptureMetadata]
    #: the deepest folder holding every file (job names are relative to it)
    root: str | None


def discover(inputs: Sequence[str], *, exclude: Sequence[str] = ()) -> Discovered:
    """Expand ``inputs`` (see the module docstring); ``exclude``: folders never searched (the output)."""
    if not inputs:
        raise UsageError("no input given", hint="tracekit batch TRACES_OR_FOLDERS... --out DIR")
    files: set[str] = set()
    ignored = 0
    excluded = {os.path.abspath(e) for e in exclude}
    seen_manifests: set[str] = set()

    def add(item: str, base: str, depth: int) -> None:
        nonlocal ignored
        manifest = item.startswith("@")
        text = item[1:] if manifest else item
        path = os.path.abspath(os.path.join(base, os.path.expanduser(text)))
        if os.path.isdir(path):
            ignored += _walk(path, files, excluded)
        elif os.path.isfile(path):
            if manifest or path.lower().endswith(MANIFEST_SUFFIXES):
                _manifest(path, depth)
            else:
                files.add(path)
        elif _GLOB_CHARS & set(text):
            matches = sorted(glob.glob(path, recursive=True))
            if not matches:
                raise TraceNotFoundError("the pattern matches no file", path=text)
            for m in matches:
                if os.path.isdir(m):
                    ignored += _walk(m, files, excluded)
                elif os.path.isfile(m):
                    files.add(os.path.abspath(m))
        else:
            raise TraceNotFoundError("no such file or folder", path=text)

    def _manifest(path: str, depth: int) -> None:
        if path in seen_manifests or depth > 8:
            raise UsageError("manifests include each other in a loop", path=path)
        seen_manifests.add(path)
        try:
            with open(path, encoding="utf-8") as fh:
                lines = [line.strip() for line in fh]
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the manifest: {exc}", path=path) from exc
        for line in lines:
            if line and not line.startswith("#"):
                add(line, os.path.dirname(path), depth + 1)

    for item in inputs:
        add(item, os.getcwd(), 0)
    ordered = tuple(sorted(files))
    folders = sorted({os.path.dirname(f) for f in ordered})
    captures = {d: c for d in folders if (c := read_capture_metadata(d)) is not None}
    root = os.path.commonpath(folders) if folders else None
    return Discovered(files=ordered, ignored=ignored, captures=captures, root=root)


def _walk(top: str, files: set[str], excluded: set[str]) -> int:
    ignored = 0
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and os.path.join(folder, d) not in excluded)
        for name in names:
            if is_trace_name(name):
                files.add(os.path.join(folder, name))
            elif not name.startswith("."):
                ignored += 1
    return ignored


__all__ = ["MANIFEST_SUFFIXES", "Discovered", "discover"]

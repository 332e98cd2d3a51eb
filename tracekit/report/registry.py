"""One table from (kind of result, format) to the function that renders it.

Each renderer module registers what it draws (:func:`register`; :func:`register_document` for
the JSON documents, whose ``json`` format follows from them), and every front end asks for a
rendering with :func:`render` — no front end picks a renderer by format itself.  The results are the
pipeline's (:mod:`tracekit.pipeline`): a trace, a job, a folder of jobs, a comparison.

Formats: ``text`` (the terminal report), ``json`` (the documented contract), ``markdown``,
``html`` (a self-contained page) and ``fragment`` (the notebook display: one ``<div>`` with its
style scoped to it).  :func:`format_for` names the format a file's suffix asks for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

#: every format a result renders to
FORMATS = ("text", "json", "markdown", "html", "fragment")
#: file suffix → the format written there (any other suffix: text)
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".md": "markdown"}

@dataclass(frozen=True)
class _Entry:
    fn: Callable[..., str]
    #: the keyword options the renderer takes (others given to :func:`render` are not passed on)
    options: frozenset[str]


_RENDERERS: dict[tuple[type, str], _Entry] = {}
_DOCUMENTS: dict[type, Callable[[Any], dict[str, Any]]] = {}


def register(kind: type, fmt: str, fn: Callable[..., str], *, options: Iterable[str] = ()) -> None:
    """Make ``fn(result, **options)`` the ``fmt`` rendering of results of ``kind``; ``options``
    names the keyword options it takes."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r} (formats: {', '.join(FORMATS)})")
    _RENDERERS[(kind, fmt)] = _Entry(fn, frozenset(options))


def register_document(kind: type, fn: Callable[[Any], dict[str, Any]]) -> None:
    """Make ``fn(result)`` the JSON document of results of ``kind``; their ``json`` rendering is
    that document, indented by two spaces, with a final newline."""
    _DOCUMENTS[kind] = fn
    register(kind, "json", lambda result: json.dumps(fn(result), indent=2) + "\n")


def _lookup(table: dict[Any, Any], kind: type, fmt: str | None) -> Any:
    for cls in kind.__mro__:
        found = table.get(cls if fmt is None else (cls, fmt))
        if found is not None:
            return found
    return None


def render(result: object, fmt: str = "text", **options: Any) -> str:
    """``result`` rendered in ``fmt``.

    ``options`` are passed to the renderers that take them (``image=URL``: the picture a trace's
    Markdown report shows) and left out for the others — other formats, a job's or a folder's
    report — as ``tracekit analyze --image`` is.

    Raises:
        tracekit.errors.UsageError: no renderer draws this kind of result in ``fmt``.
        TypeError: an option that no renderer takes.
    """
    entry: _Entry | None = _lookup(_RENDERERS, type(result), fmt)
    if entry is None:
        offered = [f for f in FORMATS if _lookup(_RENDERERS, type(result), f) is not None]
        raise UsageError(
            f"no {fmt!r} rendering of a {type(result).__name__}",
            hint=f"formats: {', '.join(offered)}" if offered else "render a result of tracekit.pipeline.run",
        )
    known = {o for e in _RENDERERS.values() for o in e.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"render() takes no option {unknown[0]!r} (options: {', '.join(sorted(known)) or 'none'})")
    return entry.fn(result, **{k: v for k, v in options.items() if k in entry.options})


def document(result: object) -> dict[str, Any]:
    """The JSON document of ``result`` as Python objects (what its ``json`` rendering prints)."""
    fn = _lookup(_DOCUMENTS, type(result), None)
    if fn is None:
        raise UsageError(f"no JSON document of a {type(result).__name__}", hint="render a result of tracekit.pipeline.run")
    out: dict[str, Any] = fn(result)
    return out


def format_for(path: str | Path) -> str:
    """The format a report written to ``path`` takes: its suffix's (``.html``, ``.json``, ``.md``), else text."""
    return SUFFIX_FORMATS.get(Path(path).suffix.lower(), "text")


__all__ = ["FORMATS", "SUFFIX_FORMATS", "document", "format_for", "register", "register_document", "render"]

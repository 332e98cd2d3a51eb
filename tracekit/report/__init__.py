"""Renderers: turn a :class:`tracekit.analysis.Diagnosis` into text, JSON or Markdown.

Renderers only render; every number they show was computed by :mod:`tracekit.analysis`.
The JSON document (:func:`to_json_dict`) is the stable contract documented in
docs/json-report.md; the text and Markdown forms are for people.
"""

from __future__ import annotations

from .json_report import JSON_SCHEMA_VERSION, to_json_dict
from .text import render_markdown, render_text

__all__ = ["JSON_SCHEMA_VERSION", "render_markdown", "render_text", "to_json_dict"]

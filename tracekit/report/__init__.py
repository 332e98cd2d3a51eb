"""Renderers: turn a :class:`tracekit.analysis.Diagnosis` into text, JSON, Markdown or HTML
(and a before/after :class:`~tracekit.analysis.compare.DiffResult` into text, JSON or Markdown).

Renderers only render; every number they show was computed by :mod:`tracekit.analysis`.
The JSON document (:func:`to_json_dict`) is the stable contract documented in
docs/json-report.md; the text and Markdown forms are for people.

Front ends render the pipeline's results (:mod:`tracekit.pipeline`) with :func:`render`
(``render(result, "html")``), which looks the renderer up in the table the modules below register
into (:mod:`tracekit.report.registry`); importing this package registers them all.
"""

from __future__ import annotations

from .diff import DIFF_SCHEMA_VERSION, diff_to_json_dict, render_diff_html, render_diff_markdown, render_diff_text
from .html import render_html, render_job_html, render_jobs_html
from .json_report import JOBS_SCHEMA_VERSION, JSON_SCHEMA_VERSION, job_to_json_dict, jobs_to_json_dict, to_json_dict
from .registry import FORMATS, document, format_for, render
from .text import (
    render_job_markdown,
    render_job_text,
    render_jobs_markdown,
    render_jobs_text,
    render_markdown,
    render_text,
)

__all__ = [
    "DIFF_SCHEMA_VERSION",
    "FORMATS",
    "JOBS_SCHEMA_VERSION",
    "JSON_SCHEMA_VERSION",
    "diff_to_json_dict",
    "document",
    "format_for",
    "job_to_json_dict",
    "jobs_to_json_dict",
    "render",
    "render_diff_html",
    "render_diff_markdown",
    "render_diff_text",
    "render_html",
    "render_job_html",
    "render_job_markdown",
    "render_job_text",
    "render_jobs_html",
    "render_jobs_markdown",
    "render_jobs_text",
    "render_markdown",
    "render_text",
    "to_json_dict",
]

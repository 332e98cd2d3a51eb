"""Reading traces: one file into canonical tables (:mod:`.trace`, with the content-keyed
:mod:`.cache`), and the files of a job found, grouped into ranks and read together (:mod:`.job`).

This room sits on the parsers and the schema and below every analysis: it knows formats,
files and folders, never what a trace means.
"""

from __future__ import annotations

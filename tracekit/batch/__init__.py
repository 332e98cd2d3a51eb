"""``tracekit batch``: analyse an archive of traces — many files, many jobs, many ranks.

:func:`run_batch` finds the trace files of its inputs, analyses each distinct file once (in
worker processes or on a Ray cluster), groups files into jobs of ranks, compares the ranks of
each job (stragglers, load imbalance, exposed communication) and writes Parquet tables
(:mod:`tracekit.batch.schemas`, docs/batch.md).  Rerunning on the same output folder only
analyses files whose content was not analysed before by the same tracekit version.

Modules: :mod:`.discover` (inputs → files), :mod:`.work` (the per-trace work),
:mod:`.engines` (local pool, Ray), :mod:`.store` (atomic writes, previous results),
:mod:`.runner` (the driver), :mod:`.schemas` (the output tables).
"""

from __future__ import annotations

from .runner import BatchProgress, BatchResult, build_tables, run_batch
from .schemas import BATCH_SCHEMA_VERSION, BATCH_TABLES

__all__ = ["BATCH_SCHEMA_VERSION", "BATCH_TABLES", "BatchProgress", "BatchResult", "build_tables", "run_batch"]

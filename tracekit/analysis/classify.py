"""Polars expressions that classify event rows: written once, used by every analysis.

Each function returns a boolean expression over the canonical events table; combine them
with ``&``/``|`` and ``DataFrame.filter``.  Name vocabularies live in :mod:`.patterns`.
"""

from __future__ import annotations

import polars as pl

from ..schema import LAUNCH_KINDS, EventKind
from . import patterns


def is_api_call() -> pl.Expr:
    """A CUDA/HIP runtime or driver call."""
    return pl.col("kind").is_in(LAUNCH_KINDS)


def is_blocking_call() -> pl.Expr:
    """An API call that blocks the host until the GPU is done: syncs and the blocking memcpy family."""
    name = pl.col("name")
    return is_api_call() & (name.str.contains(patterns.SYNC_API) | name.str.contains(patterns.BLOCKING_MEMCPY_API))


def is_host_wait_row() -> pl.Expr:
    """An explicit sync record where the host waited (a stream-wait-event is device-side, not one)."""
    return (pl.col("kind") == EventKind.SYNC.value) & (pl.col("sync_kind") != "stream_wait_event")


def is_data_dependent_op() -> pl.Expr:
    """An operator whose result the host needs now (aten::item, aten::nonzero...)."""
    return (pl.col("kind") == EventKind.CPU_OP.value) & pl.col("name").str.contains(patterns.DATA_DEPENDENT_OP)


def is_host_sync() -> pl.Expr:
    """Anything that makes the host wait for the GPU."""
    return is_blocking_call() | is_host_wait_row() | is_data_dependent_op()

# Type stub of the native flow binding built from _flowbind.c (see parsers/kineto.py:_bind_endpoints, _flows and _correlation_links).
import polars as pl

def bind(
    flow_pid: pl.Series,
    flow_tid: pl.Series,
    flow_start: pl.Series,
    slice_pid: pl.Series,
    slice_tid: pl.Series,
    slice_start: pl.Series,
    slice_event_id: pl.Series,
    /,
) -> tuple[object, object]: ...

def links(
    kind: pl.Series, correlation: pl.Series, launch_mask: int, target_mask: int, /
) -> tuple[tuple[object, object], tuple[object, object], tuple[object, object]]: ...

def pair(
    end: pl.Series, kind: pl.Series, flow_id: pl.Series, event_id: pl.Series, /
) -> tuple[tuple[object, object], tuple[object, object], tuple[object, object], tuple[object, object]]: ...

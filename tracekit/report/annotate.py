"""An annotated Chrome trace: the critical path and the findings drawn over the trace's events.

:func:`annotated_trace` turns a trace's canonical tables and its :class:`Diagnosis` into a
Chrome trace-event document that Perfetto (ui.perfetto.dev) and chrome://tracing open, for
Kineto and Nsight inputs alike:

* every host and GPU event of the chosen steps, on its thread or stream, with ``args``
  ``critical`` (on the critical path or not), ``critical_ns`` (its time on the path) and
  ``cause``;
* flow arrows (category ``critical_path``) wherever the path jumps between tracks: a launch,
  a sync, a cross-stream wait, a wake-up;
* a ``tracekit: critical path`` process with one lane per rank: the path's stretches, named
  by cause;
* a ``tracekit: findings`` process with one lane per finding: the idle gaps it explains,
  with the finding's cost, predicted step time and fix in ``args``.

Times are microseconds from the first event written (``otherData.tracekit.origin_ns`` gives
the absolute clock), so nanosecond detail survives the float64 timestamps.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ..analysis import Diagnosis
from ..analysis.causes import PATH, LiveMapping
from ..errors import UsageError
from ..schema import GPU_KINDS, HOST_KINDS, EventKind, TraceTables

#: Chrome process ids of the lanes tracekit adds (far from real pids)
PATH_PID = 2_000_000_000
FINDINGS_PID = 2_000_000_001
GPU_PID_BASE = 2_000_000_100
#: flow arrows are drawn for path stretches of these kinds (the ones that change track)
_JUMPS = ("launch", "sync", "cross_stream", "wake", "stream", "window")
#: Kineto's category for each event kind, so the annotated trace reads back as the same events
_CATEGORY = {
    "cpu_op": "cpu_op", "annotation": "user_annotation", "python": "python_function", "runtime": "cuda_runtime",
    "driver": "cuda_driver", "sync": "cuda_sync", "os_call": "os_call", "kernel": "kernel", "memcpy": "gpu_memcpy",
    "memset": "gpu_memset", "gpu_annotation": "gpu_user_annotation",
}
#: Chrome colour name of each critical-path cause (a view of the cause registry)
_CAUSE_COLOURS = LiveMapping(lambda: {c.name: c.chrome_color for c in PATH})


def annotated_trace(
    tables: TraceTables, d: Diagnosis, *, rank: int | None = None, step: int | None = None, critical_only: bool = False
) -> dict[str, Any]:
    """The annotated Chrome trace document (see the module docstring).

    ``rank``/``step`` keep one rank or one step window; ``critical_only`` keeps only the
    events on the critical path (and the step ranges).
    """
    cp = d.critical_path
    if cp is None:
        raise UsageError("the trace has no steps and no events to draw a critical path over", path=tables.info.path)
    windows = d.steps.select("rank", "step", "start_ns", "end_ns")
    if rank is not None:
        windows = windows.filter(pl.col("rank") == rank)
    if step is not None:
        windows = windows.filter(pl.col("step") == step)
    if windows.height == 0:
        known = ", ".join(f"{r}/{s}" for r, s in d.steps.select("rank", "step").head(12).iter_rows())
        raise UsageError(
            f"no step window matches rank={rank} step={step}", path=tables.info.path, hint=f"rank/step pairs: {known}"
        )
    segments = cp.segments.join(windows.select("rank", "step"), on=["rank", "step"], how="semi")
    events = _events_in(tables.events, windows)
    on = segments.filter(pl.col("event_id").is_not_null()).with_columns(pl.col("cause").cast(pl.String))
    # an event's cause: the one most of its stretches on the path have (ties: the first by name)
    cause = on.group_by("event_id", "cause").len().sort(["event_id", "len", "cause"], descending=[False, True, False]).unique(
        "event_id", keep="first"
    )
    on_path = on.group_by("event_id").agg(pl.col("dur_ns").sum().alias("critical_ns")).join(
        cause.select("event_id", "cause"), on="event_id", how="left"
    )
    events = events.join(on_path, on="event_id", how="left")
    if critical_only:
        events = events.filter(pl.col("critical_ns").is_not_null() | pl.col("name").str.contains(r"^ProfilerStep#|(?i)^step\b"))
    origin = int(min(windows["start_ns"].min(), events["start_ns"].min() if events.height else windows["start_ns"].min()))  # type: ignore[type-var, arg-type]

    out: list[dict[str, Any]] = []
    out.extend(_metadata(tables, events, segments, d))
    out.extend(_slices(events, origin))
    out.extend(_path_lane(segments, tables, origin))
    out.extend(_flows(segments, origin))
    out.extend(_finding_lanes(d, windows, origin))
    return {
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {
            "tracekit": {
                "source": tables.info.path,
                "format": tables.info.format,
                "origin_ns": origin,
                "steps": [{"rank": r, "step": s} for r, s in windows.select("rank", "step").iter_rows()],
                "critical_path": cp.breakdown_share(),
                "findings": [f.to_dict() for f in d.findings],
            }
        },
    }


def write_annotated(doc: dict[str, Any], path: Path) -> None:
    """Write the document as JSON (gzip-compressed when the name ends in .gz), atomically."""
    data = msgspec.json.encode(doc)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        raise UsageError(f"cannot write the annotated trace: {exc.strerror or exc}", path=path) from exc


# --------------------------------------------------------------------------------------------


def _us(ns: pl.Expr, origin: int) -> pl.Expr:
    return ((ns - origin).cast(pl.Float64) / 1000.0).round(3)


def _gpu_pid(device: pl.Expr) -> pl.Expr:
    return pl.lit(GPU_PID_BASE, dtype=pl.Int64) + device.cast(pl.Int64)


def _events_in(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Host and GPU events overlapping any of the windows (each once)."""
    ev = events.filter(pl.col("kind").is_in([*HOST_KINDS, *GPU_KINDS]) & (pl.col("dur_ns") >= 0))
    keep = []
    for r, w0, w1 in windows.group_by("rank").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).iter_rows():
        keep.append(ev.filter((pl.col("rank") == r) & (pl.col("start_ns") < w1) & (pl.col("end_ns") > w0)))
    ev = pl.concat(keep) if keep else ev.clear()
    gpu = pl.col("kind").is_in(GPU_KINDS) & pl.col("device").is_not_null()
    return ev.with_columns(
        pl.when(gpu).then(_gpu_pid(pl.col("device"))).otherwise(pl.col("pid")).alias("_pid"),
        pl.when(gpu).then(pl.col("stream").fill_null(-1)).otherwise(pl.col("tid")).alias("_tid"),
    ).filter(pl.col("_pid").is_not_null() & pl.col("_tid").is_not_null())


def _metadata(tables: TraceTables, events: pl.DataFrame, segments: pl.DataFrame, d: Diagnosis) -> Iterator[dict[str, Any]]:
    names = tables.threads
    host = events.filter(~pl.col("kind").is_in(GPU_KINDS)).select("_pid", "_tid").unique().sort("_pid", "_tid")
    procs = {
        int(p): n
        for p, n in names.filter(pl.col("pid").is_not_null() & pl.col("process_name").is_not_null()).select("pid", "process_name").unique("pid").iter_rows()
    }
    threads = {
        (int(p), int(t)): n
        for p, t, n in names.filter(pl.col("pid").is_not_null() & pl.col("tid").is_not_null() & pl.col("thread_name").is_not_null())
        .select("pid", "tid", "thread_name").unique(["pid", "tid"]).iter_rows()
    }
    for pid in host["_pid"].unique().sort().to_list():
        yield _meta("process_name", pid, 0, procs.get(pid, f"host process {pid}"))
        yield _meta("process_sort_index", pid, 0, None, sort_index=0)
    for pid, tid in host.iter_rows():
        yield _meta("thread_name", pid, tid, threads.get((pid, tid), f"thread {tid}"))
    gpu = events.filter(pl.col("kind").is_in(GPU_KINDS)).select("device", "_pid", "_tid").unique().sort("device", "_tid")
    for device in gpu["device"].unique().sort().to_list():
        pid = GPU_PID_BASE + int(device)
        yield _meta("process_name", pid, 0, f"GPU {device}")
        yield _meta("process_sort_index", pid, 0, None, sort_index=1)
    for device, pid, tid in gpu.iter_rows():
        yield _meta("thread_name", pid, tid, f"GPU {device} stream {tid}")
    yield _meta("process_name", PATH_PID, 0, "tracekit: critical path")
    yield _meta("process_sort_index", PATH_PID, 0, None, sort_index=-2)
    for r in segments["rank"].unique().sort().to_list():
        yield _meta("thread_name", PATH_PID, int(r), f"rank {r}")
    if d.findings:
        yield _meta("process_name", FINDINGS_PID, 0, "tracekit: findings")
        yield _meta("process_sort_index", FINDINGS_PID, 0, None, sort_index=-1)
        for i, f in enumerate(d.findings, 1):
            yield _meta("thread_name", FINDINGS_PID, i, f"{i}. {f.title}")


def _meta(name: str, pid: int, tid: int, value: str | None, sort_index: int | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"name": value} if value is not None else {"sort_index": sort_index}
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _slices(events: pl.DataFrame, origin: int) -> Iterator[dict[str, Any]]:
    rows = events.select(
        "name", pl.col("kind").cast(pl.String), "_pid", "_tid", _us(pl.col("start_ns"), origin).alias("ts"),
        (pl.col("dur_ns").cast(pl.Float64) / 1000.0).round(3).alias("dur"), "event_id", "critical_ns", "cause",
        "device", "stream", "correlation",
    )
    for name, kind, pid, tid, ts, dur, eid, crit, cause, device, stream, corr in rows.iter_rows():
        args: dict[str, Any] = {"event_id": eid, "critical": crit is not None}
        if crit is not None:
            args["critical_ns"] = crit
            args["cause"] = cause
        if kind in GPU_KINDS or kind == EventKind.SYNC.value:
            args["device"] = device
            args["stream"] = stream
        if corr is not None:
            args["correlation"] = corr
        ev: dict[str, Any] = {"ph": "X", "cat": _CATEGORY.get(kind, kind), "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        if crit is not None:
            ev["cname"] = _CAUSE_COLOURS.get(str(cause), "grey")
        yield ev


def _path_lane(segments: pl.DataFrame, tables: TraceTables, origin: int) -> Iterator[dict[str, Any]]:
    named = segments.join(tables.events.select("event_id", pl.col("name").alias("_event")), on="event_id", how="left")
    rows = named.select(
        "rank", "step", "seq", _us(pl.col("start_ns"), origin).alias("ts"), (pl.col("dur_ns").cast(pl.Float64) / 1000.0).round(3).alias("dur"),
        "cause", "edge_kind", "track", "_event", "event_id", "inferred", "dur_ns",
    )
    for rank, step, seq, ts, dur, cause, kind, track, event, eid, inferred, dur_ns in rows.iter_rows():
        yield {
            "ph": "X", "cat": "critical_path", "name": cause, "pid": PATH_PID, "tid": rank, "ts": ts, "dur": dur,
            "cname": _CAUSE_COLOURS.get(cause, "grey"),
            "args": {"step": step, "seq": seq, "edge_kind": kind, "track": track, "event": event, "event_id": eid,
                     "inferred": inferred, "dur_ns": dur_ns},
        }


def _flows(segments: pl.DataFrame, origin: int) -> Iterator[dict[str, Any]]:
    """One arrow wherever the path moves to another thread or stream."""
    seg = segments.sort("rank", "step", "seq").with_columns(
        pl.col("track").shift(1).over("rank", "step").alias("_prev_track"),
        pl.col("end_ns").shift(1).over("rank", "step").alias("_prev_end"),
        pl.col("start_ns").shift(1).over("rank", "step").alias("_prev_start"),
    ).filter(pl.col("_prev_track").is_not_null() & (pl.col("track") != pl.col("_prev_track")))
    # the tail sits just inside the slice the path leaves, the head inside the one it enters
    tail = pl.max_horizontal(pl.col("_prev_end") - 1, pl.col("_prev_start"))
    head = pl.when(pl.col("edge_kind").is_in(_JUMPS)).then(pl.col("end_ns")).otherwise(pl.col("start_ns") + 1)
    seg = seg.with_columns(_us(tail, origin).alias("_ts_s"), _us(head, origin).alias("_ts_f"))
    for i, (prev, track, ts_s, ts_f, kind, cause, inferred, dur_ns) in enumerate(
        seg.select("_prev_track", "track", "_ts_s", "_ts_f", "edge_kind", "cause", "inferred", "dur_ns").iter_rows()
    ):
        sp, st = _track_ids(prev)
        fp, ft = _track_ids(track)
        args = {"edge_kind": kind, "cause": cause, "inferred": inferred, "dur_ns": dur_ns}
        yield {"ph": "s", "id": i, "cat": "critical_path", "name": "critical path", "pid": sp, "tid": st, "ts": ts_s, "args": args}
        yield {"ph": "f", "bp": "e", "id": i, "cat": "critical_path", "name": "critical path", "pid": fp, "tid": ft, "ts": ts_f, "args": args}


def _track_ids(track: str) -> tuple[int, int]:
    side, _, where = track.partition(" ")
    a, _, b = where.partition("/")
    if side == "gpu":
        return GPU_PID_BASE + int(a), int(b)
    return int(a), int(b)


def _finding_lanes(d: Diagnosis, windows: pl.DataFrame, origin: int) -> Iterator[dict[str, Any]]:
    gaps = d.timeline.gaps.join(windows.select("rank", "step"), on=["rank", "step"], how="semi")
    for i, f in enumerate(d.findings, 1):
        args = {"kind": f.kind, "ms_per_step": round(f.ms_per_step, 4), "share_of_step": round(f.share_of_step, 4),
                "predicted_step_ms": None if f.predicted_step_ms is None else round(f.predicted_step_ms, 4), "fix": f.fix}
        col = f"{f.kind}_ns"
        marked = gaps.filter(pl.col(col) > 0) if col in gaps.columns else gaps.clear()
        if marked.height == 0:
            # a finding that is not about idle gaps (fp32 matmuls, batch size): one mark at the start
            first = int(windows["start_ns"].min())  # type: ignore[arg-type]
            yield {"ph": "i", "s": "t", "cat": "tracekit_finding", "name": f.title, "pid": FINDINGS_PID, "tid": i,
                   "ts": round((first - origin) / 1000.0, 3), "args": args}
            continue
        rows = marked.select(_us(pl.col("start_ns"), origin).alias("ts"), (pl.col("dur_ns").cast(pl.Float64) / 1000.0).round(3).alias("dur"), "step", col)
        for ts, dur, st, ns in rows.iter_rows():
            yield {"ph": "X", "cat": "tracekit_finding", "name": f.title, "pid": FINDINGS_PID, "tid": i, "ts": ts, "dur": dur,
                   "cname": "terrible", "args": {**args, "step": st, "attributed_ns": ns}}

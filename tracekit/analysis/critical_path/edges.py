"""The vocabulary of the step graphs: edge kinds, the dtypes and schemas of their tables, and the bounds
the graphs are built with."""

from __future__ import annotations

from enum import Enum

import polars as pl

from ...schema import LAUNCH_KINDS, EventKind
from ..causes import CP_CAUSES, LAUNCH_GAP_NS, LiveMapping
from ..causes.registry import derived
from ..whatif import TAGS

#: a helper thread's untraced stretch shorter than this is work (dispatch overhead between its
#: operators); a longer one is a wait for work (the same bound the timeline analysis uses
#: between launch overhead and other host work)
HELPER_IDLE_NS = LAUNCH_GAP_NS


#: a launch call this long, made while this many earlier activities of its device still waited
#: to start, was blocked on a full launch queue: it waited for the GPU to retire work
QUEUE_WAIT_NS = 100_000

QUEUE_DEPTH = 32


#: windows are built in groups of about this many events, so the graph's working memory is
#: bounded by the group, not the trace (a trace below it is one group); 125,000 rather than
#: 500,000 lowers the peak RSS by 0.2 GB at 0.3 and 1.1 GB for the same CPU time (measured)
BATCH_EVENTS = 125_000

HOST_KINDS = [EventKind.ANNOTATION.value, EventKind.CPU_OP.value, *LAUNCH_KINDS]

THREAD_KEY = ["pid", "tid"]

STEP_KEY = ["rank", "step"]

CHAIN_KEY = ["rank", "step", "pid", "tid"]

STREAM_KEY = ["rank", "step", "device", "stream"]


class EdgeKind(str, Enum):
    """What an edge of the step graph stands for."""

    CPU = "cpu"  #: a stretch of a host thread (nesting: the innermost open event's self time)
    DATA_LOADING = "data_loading"  #: a stretch of a host thread inside a data-loading range
    LAUNCH = "launch"  #: runtime/driver call → the GPU activity it launched
    GPU = "gpu"  #: a kernel, copy or memset running
    STREAM = "stream"  #: previous activity → next activity on the same stream
    SYNC = "sync"  #: GPU activity → the host call that waited for it
    CROSS_STREAM = "cross_stream"  #: event record's work → the activity a stream-wait-event held back
    WAKE = "wake"  #: driving thread → another thread resuming work (inferred)
    WINDOW = "window"  #: step start / end, and GPU work launched before the step


EDGE_KIND_DTYPE = pl.Enum([k.value for k in EdgeKind])


@derived
def cause_dtype() -> pl.Enum:
    """A segment's cause (one of the critical-path causes, :data:`CP_CAUSES`), as an enum."""
    return pl.Enum(list(CP_CAUSES))


@derived
def tag_dtype() -> pl.Enum:
    """An edge's tag (:data:`.whatif.TAGS`), as an enum."""
    return pl.Enum(list(TAGS))


@derived
def compact_dtypes() -> dict[str, pl.DataType]:
    """The dtypes :attr:`CriticalPath.edges` holds in place of :data:`EDGE_SCHEMA`'s strings; a
    track as a categorical (a few hundred distinct threads and streams over millions of edges)."""
    return {"kind": EDGE_KIND_DTYPE, "tag": tag_dtype(), "track": pl.Categorical()}


@derived
def segment_schema() -> dict[str, pl.DataType]:
    """The columns of :attr:`CriticalPath.segments` (the cause an enum of the registry's path causes)."""
    return {
        "rank": pl.Int32(),
        "step": pl.Int64(),
        "seq": pl.Int64(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "track": pl.Categorical(),
        "event_id": pl.Int64(),
        "edge_kind": EDGE_KIND_DTYPE,
        "cause": cause_dtype(),
        "inferred": pl.Boolean(),
    }


#: :func:`segment_schema`, as a view of the registry
SEGMENT_SCHEMA = LiveMapping(segment_schema)

BREAKDOWN_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "cause": pl.String(),
    "ns": pl.Int64(),
    "share": pl.Float64(),
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "complete": pl.Boolean(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "wall_ns": pl.Int64(),
    "path_ns": pl.Int64(),
    "nodes": pl.Int64(),
    "edges": pl.Int64(),
    "sync_edges": pl.Int64(),
    "inferred_sync_edges": pl.Int64(),
    "cycles_broken": pl.Int64(),
}

EDGE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "src": pl.Int64(),
    "dst": pl.Int64(),
    "w": pl.Int64(),
    "kind": pl.String(),
    "tag": pl.String(),
    "removable": pl.Boolean(),
    "inferred": pl.Boolean(),
    "event_id": pl.Int64(),
    "track": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
}


#: order in which edges enter a node's predecessor list: on ties the first tight edge wins,
#: so waits are explained by what was waited for rather than by the waiting thread
EDGE_PRIORITY = {"sync": 0, "cross_stream": 1, "stream": 2, "gpu": 3, "launch": 4, "wake": 5, "data_loading": 6, "cpu": 7, "window": 8}


def conform_edges(part: pl.DataFrame) -> pl.DataFrame:
    """An edge frame with exactly EDGE_SCHEMA's columns (absent ones null)."""
    return part.select(
        [(pl.col(c) if c in part.columns else pl.lit(None)).cast(t).alias(c) for c, t in EDGE_SCHEMA.items()]
    )

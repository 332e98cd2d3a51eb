"""The critical path of every step: which time actually decides how long the step takes.

A breakdown says where time went; the critical path says which of it matters.  For each step
window (and for the whole trace when it has no steps) tracekit builds a dependency graph of
the rank's host threads and GPU streams and takes its longest path (networkx); every
nanosecond of the path is attributed to an event and a cause, and what-if questions
(:mod:`tracekit.analysis.whatif`) re-weight the graph and recompute the path.

**Nodes** are instants: on a host thread, every start or end of a recorded event (a thread's
timeline is cut at every boundary, so nested events share nodes); on a GPU stream, the start
and end of every kernel, copy and memset; plus one source ``S`` (the step start) and one sink
``T`` per step.

**Edges** (:class:`EdgeKind`) carry integer ns:

* ``cpu`` / ``data_loading``: consecutive instants of a host thread; the stretch belongs to the
  innermost event open there (its self time), or to untraced time of the thread that drives
  the step.  Stretches on other threads that no event covers are waits (weight 0).
* ``launch``: runtime/driver call start → the GPU activity it launched (CUDA-graph launches
  fan out to every kernel they replay).
* ``gpu``: an activity's start → end.
* ``stream``: previous activity end → next start on the same stream.
* ``sync``: GPU activity end → end of the host call that waited for it (device/stream/event
  synchronisation, blocking copies, ``.item()``); from explicit sync rows where the trace has
  them, otherwise inferred from blocking API calls and their timing (``inferred = True``).
* ``cross_stream``: the activity an event was recorded after → the first activity a
  ``cudaStreamWaitEvent`` held back on another stream.
* ``wake``: the driving thread → another thread's activity after that thread idled (inferred).
* ``window``: ``S``/``T`` to the step's first and last instants, and GPU work launched before
  the step that starts inside it.

**Weights.**  Every edge's weight is at most the time between its ends in the trace, so the
recorded schedule satisfies every edge and the longest path is never longer than the step.
For each instant, the edge that explains *why it happened then* is tight (weight = the time
between its ends): a kernel that waited for its launch gets the full launch delay, a kernel
queued behind another gets the gap on its stream and only the typical launch latency on its
launch edge; a sync call that waited gets the GPU → host edge, and only the time after the
GPU finished as its own duration.  The tight edges therefore chain from ``S`` to ``T`` and
the path's length equals the step's wall time whenever the driving thread is recorded.

Everything up to the path itself is built with polars joins over all steps at once; the
only Python loops are over ranks and over steps (networkx's path, one graph per step).
"""

from __future__ import annotations

from .edges import BREAKDOWN_SCHEMA, EDGE_SCHEMA, SEGMENT_SCHEMA, STEP_SCHEMA, EdgeKind
from .graph import Graph, build_graph
from .path import critical_path, critical_path_window
from .result import CriticalPath
from .scenarios import evaluate

__all__ = [
    "BREAKDOWN_SCHEMA", "EDGE_SCHEMA", "SEGMENT_SCHEMA", "STEP_SCHEMA", "CriticalPath", "EdgeKind", "Graph", "build_graph",
    "critical_path", "critical_path_window", "evaluate",
]

"""Where in the user's code a finding comes from: the file and line behind its host intervals.

A trace captured with ``with_stack=True`` records the Python frames of every host thread
(Kineto ``python_function`` rows, ``EventKind.PYTHON``), named ``file(line): function``.  The
frame that *causes* a sync, a copy, a DataLoader fetch or a tiny kernel's launch is the
innermost one of the user's own code: frames in torch (and its generated code), the standard
library, installed packages (``site-packages``, and the well-known libraries whose paths the
profiler writes relative to ``sys.path``) and tracekit's own capture wrappers are passed over.

* :func:`user_frames` — the trace's Python frames that are the user's, with file, line and
  function parsed from their names (one vectorised pass over the rows);
* :func:`locate` — for each point (a host interval), the innermost user frame around it on the
  same thread: an interval join per thread (:func:`tracekit.analysis.intervals.enclosing`);
* :func:`finding_locations` — the location of each finding whose evidence has host intervals:
  the place where most of them are (by their time), with how many are there.

The line is the one the profiler wrote in the frame's name: for a function entered while it
profiled, its first line; for a frame already running when profiling started, the line running
then.  A location carries the source line's text only when the caller hands in a
:data:`LineSource` (the pipeline reads files; the analysis never does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..schema import LAUNCH_KINDS, EventKind
from .causes import BY_NAME, HostEvents, finding_cause
from .intervals import enclosing
from .kernels import SHORT_KERNEL_NS

#: ``(file, line) -> the source line's text`` (stripped), or None when it cannot be read
LineSource = Callable[[str, int], "str | None"]

#: top-level packages of libraries, not the user's code, whose frames the profiler may name
#: relative to ``sys.path`` (so no ``site-packages`` folder tells them apart)
LIBRARY_PACKAGES: frozenset[str] = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "functorch", "torchgen", "triton",
    "fbgemm_gpu", "numpy", "scipy", "pandas", "PIL", "sklearn", "transformers", "accelerate", "datasets", "tokenizers",
    "safetensors", "huggingface_hub", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "timm",
    "einops", "xformers", "flash_attn", "flashinfer", "tqdm", "nvtx", "typing_extensions", "wandb", "tensorboard",
    "hydra", "omegaconf", "tracekit",
})
#: the standard library's top-level modules, as relative frame paths name them (``threading.py``)
STDLIB_MODULES: frozenset[str] = frozenset(getattr(sys, "stdlib_module_names", ()))

#: ``file(line): function``, the name of a Python frame row
_FRAME = r"^(.*)\((\d+)\): (.*)$"
_SEP = r"[/\\]"
#: paths that are never the user's: installed packages, the standard library's folder, torch's
#: package and generated code (Inductor's cache), tracekit's own package (capture wrappers)
_LIBRARY_PATH = (
    rf"({_SEP}(site|dist)-packages{_SEP})"
    rf"|((^|{_SEP})lib(64)?{_SEP}python\d[\d.]*{_SEP})"
    rf"|((^|{_SEP})(torch|functorch|torchgen|tracekit){_SEP})"
    r"|(torchinductor_)"
)

#: columns of :func:`user_frames`
FRAME_COLUMNS = {
    "event_id": pl.Int64(), "name": pl.String(), "pid": pl.Int64(), "tid": pl.Int64(), "start_ns": pl.Int64(),
    "end_ns": pl.Int64(), "file": pl.String(), "line": pl.Int64(), "function": pl.String(),
}


@dataclass(frozen=True)
class CodeLocation:
    """A place in the user's code that a finding's evidence comes from."""

    file: str
    line: int
    function: str | None = None
    #: the source line's text (stripped), when the file was readable under the trace's folder or the cwd
    code: str | None = None
    #: how many of the finding's evidence items (sync points, copies, fetches, launches) are here
    count: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function, "code": self.code, "count": self.count}


def is_library_file() -> pl.Expr:
    """Whether the ``file`` column names code that is not the user's (see the module docstring)."""
    file = pl.col("file")
    top = file.str.extract(r"^([^/\\]+)").str.replace(r"\.pyc?$", "")
    relative = ~file.str.contains(r"^([/\\]|[A-Za-z]:)")
    known = top.is_in(sorted(LIBRARY_PACKAGES | STDLIB_MODULES))
    return file.str.starts_with("<") | file.str.contains(_LIBRARY_PATH) | (relative & known)


def user_frames(events: pl.DataFrame) -> pl.DataFrame:
    """The Python frame rows of the user's code: :data:`FRAME_COLUMNS` (built-in calls such as
    ``<built-in method item ...>`` and module ranges have no ``file(line)`` and are left out)."""
    py = events.filter((pl.col("kind") == EventKind.PYTHON.value) & pl.col("tid").is_not_null())
    if py.height == 0:
        return pl.DataFrame(schema=FRAME_COLUMNS)
    parts = py.select("event_id", "name", "pid", "tid", "start_ns", "end_ns").with_columns(
        pl.col("name").str.extract_groups(_FRAME).alias("_f")
    )
    parts = parts.with_columns(
        pl.col("_f").struct.field("1").alias("file"),
        pl.col("_f").struct.field("2").cast(pl.Int64, strict=False).alias("line"),
        pl.col("_f").struct.field("3").alias("function"),
    ).drop("_f")
    return parts.filter(pl.col("file").is_not_null() & pl.col("line").is_not_null() & ~is_library_file()).select(
        list(FRAME_COLUMNS)
    ).cast(FRAME_COLUMNS)  # type: ignore[arg-type]


def locate(points: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    """For each row of ``points`` (``pid``, ``tid``, ``start_ns``, ``dur_ns``), the innermost user
    frame around it: ``_p`` (the point's row index), ``file``, ``line``, ``function``, ``frame``
    (the frame's name as the trace wrote it).  Points with no user frame around them are absent."""
    schema = {"_p": pl.UInt32(), "file": pl.String(), "line": pl.Int64(), "function": pl.String(), "frame": pl.String()}
    if points.height == 0 or frames.height == 0:
        return pl.DataFrame(schema=schema)
    hit = enclosing(points, frames, "_frame", outermost=False)
    named = frames.select(pl.col("event_id").alias("_frame"), "file", "line", "function", pl.col("name").alias("frame"))
    return hit.join(named, on="_frame", how="inner").select(list(schema)).cast(schema)  # type: ignore[arg-type]


def top_location(located: pl.DataFrame, code: LineSource | None = None) -> CodeLocation | None:
    """The location where most of ``located``'s time is (``file``, ``line``, ``function`` and
    ``dur_ns`` per point), with the count of points there; ties go to more points, then the
    file and line in order."""
    if located.height == 0:
        return None
    top = (
        located.group_by("file", "line", "function")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum())
        .sort(["dur_ns", "count", "file", "line", "function"], descending=[True, True, False, False, False], nulls_last=True)
        .row(0, named=True)
    )
    return CodeLocation(
        file=top["file"], line=int(top["line"]), function=top["function"],
        code=None if code is None else code(top["file"], int(top["line"])), count=int(top["count"]),
    )


def evidence_points(kind: str, events: pl.DataFrame, links: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame | None:
    """The host intervals a finding of ``kind`` stands on (``pid``, ``tid``, ``start_ns``,
    ``dur_ns``), or None when its evidence has none: the sync points for a sync; the launches
    of short kernels for launch overhead (the tiny-kernel loop); otherwise the intervals the
    detector of the kind's cause marks (DataLoader fetches, pageable copy calls, allocator
    calls, collectives).  Only the outermost are kept (a copy call inside the ``aten::to`` that
    made it is one copy; the DataLoader's frames inside its ``__next__`` range are one fetch)."""
    cause = finding_cause(kind)
    columns = ["pid", "tid", "start_ns", "dur_ns"]
    if cause == "host_device_sync":
        return outermost(syncs.select(columns))
    if cause == "launch_bound":
        short = events.filter(
            (pl.col("kind") == EventKind.KERNEL.value) & (pl.col("dur_ns") < SHORT_KERNEL_NS)
        ).select(pl.col("event_id").alias("gpu_event_id"))
        calls = links.join(short, on="gpu_event_id", how="semi").select(pl.col("launch_event_id").alias("event_id")).unique()
        launches = events.filter(pl.col("kind").is_in(LAUNCH_KINDS)).join(calls, on="event_id", how="semi")
        return outermost(launches.select(columns))
    spec = BY_NAME.get(cause)
    if spec is None or spec.detector is None:
        return None
    return outermost(spec.detector(HostEvents.of(events, links)).select(columns))


def outermost(points: pl.DataFrame) -> pl.DataFrame:
    """The points not inside another point of the same thread (in start order): one sort and a
    running maximum of the earlier points' ends per thread."""
    if points.height == 0:
        return points
    ordered = points.filter(pl.col("tid").is_not_null()).with_columns(
        (pl.col("start_ns") + pl.col("dur_ns")).alias("_end")
    ).sort(["pid", "tid", "start_ns", "_end"], descending=[False, False, False, True])
    reach = pl.col("_end").cum_max().shift(1).over(["pid", "tid"])
    return ordered.filter(reach.is_null() | (pl.col("_end") > reach)).drop("_end")


def in_steps(points: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The points that start inside a complete step (all of them when no step is complete)."""
    if points.height == 0 or "complete" not in steps.columns:
        return points
    windows = steps.filter(pl.col("complete")).select(pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we")).sort("_ws")
    if windows.height == 0:
        return points
    ordered = points.with_row_index("_row").sort("start_ns")
    joined = ordered.join_asof(windows, left_on="start_ns", right_on="_ws", strategy="backward", check_sortedness=False)
    kept = joined.filter(pl.col("_we").is_not_null() & (pl.col("start_ns") < pl.col("_we"))).sort("_row")
    return kept.drop("_row", "_ws", "_we")


def evidence_count(kind: str, events: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame, syncs: pl.DataFrame) -> int:
    """How many host intervals of ``kind``'s evidence lie in the complete steps (0: none, or a
    kind whose evidence has none)."""
    points = evidence_points(kind, events, links, syncs)
    return 0 if points is None else in_steps(points, steps).height


def finding_locations(
    kinds: Iterable[str],
    events: pl.DataFrame,
    links: pl.DataFrame,
    steps: pl.DataFrame,
    syncs: pl.DataFrame,
    code: LineSource | None = None,
) -> dict[str, CodeLocation]:
    """Finding kind → where in the user's code its host intervals mostly are (kinds with no
    user frame around their evidence are absent; a trace without Python frames gives ``{}``)."""
    frames = user_frames(events)
    if frames.height == 0:
        return {}
    out: dict[str, CodeLocation] = {}
    cached: dict[str, pl.DataFrame | None] = {}
    for kind in kinds:
        cause = finding_cause(kind)
        if cause not in cached:
            points = evidence_points(kind, events, links, syncs)
            cached[cause] = None if points is None else in_steps(points, steps)
        points = cached[cause]
        if points is None or points.height == 0:
            continue
        points = points.with_row_index("_p")
        located = locate(points, frames).join(points.select("_p", "dur_ns"), on="_p")
        loc = top_location(located, code)
        if loc is not None:
            out[kind] = loc
    return out


__all__ = [
    "FRAME_COLUMNS", "LIBRARY_PACKAGES", "STDLIB_MODULES", "CodeLocation", "LineSource", "evidence_count", "evidence_points",
    "finding_locations",
    "in_steps", "is_library_file", "locate", "outermost", "top_location", "user_frames",
]

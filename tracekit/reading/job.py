"""A distributed job: the traces of one capture, one :class:`TraceTables` per rank.

:func:`read_job` reads a capture folder (``metadata.json`` + ``rank{R}.*`` traces, as written by
``tracekit capture``), any folder holding the traces of one job, a single file, or a list of
files, and returns a :class:`Job` whose ranks each carry their own tables.  An Nsight Systems
export of several processes yields several ranks (its rows are split by ``events.rank``).

Ranks are decided per file, first rule that applies:

1. the trace says so: Kineto ``distributedInfo.rank``, or Nsight threads named ``Rank N``;
2. the capture's ``metadata.json`` (``ranks: [{rank, pid, trace}]``), by file name, or by
   process id for an Nsight file of several processes;
3. a ``rank``-number in the file name (``rank3``, ``rank-3``, ``rank_3``);
4. file order: the lowest rank not yet taken, files sorted by path.

:func:`group_jobs` decides which files of an archive form one job (used by ``tracekit batch``
and by :func:`read_job` on a folder).  It works on :class:`FileMeta` records, so it needs no
tables: files in a folder with ``metadata.json`` are one job; otherwise files of one folder and
format whose names differ only in the rank number (``sampled_rank-0``/``sampled_rank-1``), or
that say they belong to a job of the same world size, are one job — split by time overlap
when two captures of the same job share a folder; every other file is a job by itself.

This module only finds and reads a job's files; :func:`tracekit.analysis.diagnose.diagnose_job`
diagnoses the ranks and compares them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ..errors import TraceFormatError, TracekitError, UsageError
from ..schema import TraceTables
from .program import ProgramFacts, read_program

if TYPE_CHECKING:
    from ..progress import Progress

#: file names tracekit treats as traces when it scans a folder
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".qdrep")
#: the capture description written by ``tracekit capture``
CAPTURE_METADATA = "metadata.json"

_RANK_TOKEN = re.compile(r"(?i)(rank)([-_.]?)(\d+)")


def is_trace_name(name: str) -> bool:
    """Whether a file name looks like a trace tracekit reads (by suffix)."""
    low = name.lower()
    return low != CAPTURE_METADATA and low.endswith(TRACE_SUFFIXES)


def rank_from_name(name: str) -> int | None:
    """The rank number written in a file name (``rank3``, ``rank-3``, ``rank_3``), or None."""
    found = _RANK_TOKEN.findall(name)
    return int(found[-1][2]) if len(found) == 1 else None


def name_template(name: str) -> str | None:
    """The file name with its rank number replaced by ``*`` (None when it has none)."""
    if len(_RANK_TOKEN.findall(name)) != 1:
        return None
    return _RANK_TOKEN.sub(lambda m: f"{m.group(1)}{m.group(2)}*", name)


# --------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class FileMeta:
    """What job grouping needs to know about one trace file (no tables)."""

    path: str
    format: str
    #: ranks present in the file, as the file numbers them
    ranks: tuple[int, ...] = (0,)
    #: True when the ranks come from the trace itself (distributedInfo, NVTX rank names)
    trusted: bool = False
    world_size: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    #: file rank → process id (multi-process Nsight files)
    rank_pids: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def from_tables(cls, path: str, tables: TraceTables) -> FileMeta:
        info = tables.info
        meta = dict(info.metadata)
        trusted = info.rank is not None if info.format == "kineto" else meta.get("rank_source") == "nvtx_thread_name"
        pids: dict[int, int] = {}
        raw = meta.get("rank_pids")
        if isinstance(raw, Mapping):
            for r, p in raw.items():
                try:
                    pids[int(r)] = int(p)
                except (TypeError, ValueError):
                    continue
        return cls(
            path=path,
            format="nsys" if info.format.startswith("nsys") else info.format,
            ranks=tuple(info.ranks) or (0,),
            trusted=bool(trusted),
            world_size=info.world_size,
            start_ns=info.start_ns,
            end_ns=info.end_ns,
            rank_pids=pids,
        )


@dataclass(frozen=True)
class CaptureMetadata:
    """``metadata.json`` of a capture folder."""

    folder: str
    world_size: int | None
    #: names of every trace file the capture lists (any cycle, any rank)
    traces: frozenset[str]
    #: trace file name → rank (files of exactly one rank)
    rank_of_trace: Mapping[str, int]
    #: process id → rank
    rank_of_pid: Mapping[int, int]
    raw: Mapping[str, Any]
    #: rank → what its program built (empty for captures made before ``tracekit capture``
    #: recorded it, metadata format 1; see :mod:`tracekit.reading.program`)
    program: Mapping[int, ProgramFacts] = field(default_factory=dict)

    def program_of(self, rank: int = 0) -> ProgramFacts | None:
        """What ``rank``'s program built, or None when the capture did not record it."""
        return self.program.get(rank)


def read_capture_metadata(folder: str | Path) -> CaptureMetadata | None:
    """The capture description of ``folder``, or None when it has none (or it is unreadable).

    Malformed parts are read as absent: ranks without a rank number, trace names that are not
    strings, and (in the ``program`` section) values of the wrong type.

    Example (from the repository root)::

        >>> from tracekit.reading.job import read_capture_metadata
        >>> meta = read_capture_metadata("sample_traces/captures/slow_dataloader")
        >>> meta.world_size, sorted(meta.traces)
        (1, ['rank0.cycle0.pt.trace.json.gz'])
    """
    path = Path(folder) / CAPTURE_METADATA
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    claims: dict[str, set[int]] = {}
    by_pid: dict[int, int] = {}
    entries = raw.get("ranks")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            continue
        rank = int(entry["rank"])
        listed = entry.get("traces")
        names: list[Any] = [entry.get("trace"), *(listed if isinstance(listed, list) else [])]
        for trace in names:
            if isinstance(trace, str) and trace:
                claims.setdefault(os.path.basename(trace), set()).add(rank)
        pid = entry.get("pid")
        if isinstance(pid, int):
            by_pid[pid] = rank
    # a file shared by several ranks (one Nsight capture of every process) is mapped by pid
    by_trace = {name: next(iter(ranks)) for name, ranks in claims.items() if len(ranks) == 1}
    ws = raw.get("world_size")
    return CaptureMetadata(
        folder=str(folder),
        world_size=ws if isinstance(ws, int) else None,
        traces=frozenset(claims),
        rank_of_trace=by_trace,
        rank_of_pid=by_pid,
        raw=raw,
        program=read_program(raw.get("program")),
    )


# --------------------------------------------------------------------------- grouping


def program_of_trace(path: str | Path) -> ProgramFacts | None:
    """What the program that wrote the trace file ``path`` built, when the file lies in a capture
    folder whose ``metadata.json`` names it as one rank's trace (None otherwise)."""
    p = Path(path)
    meta = read_capture_metadata(p.parent) if (p.parent / CAPTURE_METADATA).is_file() else None
    rank = None if meta is None else meta.rank_of_trace.get(p.name)
    return None if meta is None or rank is None else meta.program_of(rank)


@dataclass(frozen=True)
class JobPlan:
    """Which files form one job and which job rank each of their ranks is."""

    name: str
    folder: str
    #: path → {rank in the file → rank in the job}
    members: Mapping[str, Mapping[int, int]]
    #: path → how its ranks were decided (distributed_info, capture_metadata, file_name, process_order, file_order, single)
    rank_sources: Mapping[str, str]
    world_size: int | None = None
    capture: CaptureMetadata | None = None
    notes: tuple[str, ...] = ()

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for m in self.members.values() for r in m.values()}))


def assign_ranks(files: Sequence[FileMeta], capture: CaptureMetadata | None = None) -> tuple[dict[str, dict[int, int]], dict[str, str], list[str]]:
    """Job ranks for the files of one job (rules in the module docstring)."""
    members: dict[str, dict[int, int]] = {}
    sources: dict[str, str] = {}
    notes: list[str] = []
    taken: set[int] = set()
    pending: list[FileMeta] = []
    for f in sorted(files, key=lambda m: m.path):
        base = os.path.basename(f.path)
        mapping: dict[int, int] | None = None
        source = ""
        if f.trusted:
            mapping, source = {r: r for r in f.ranks}, "distributed_info"
        elif capture is not None and len(f.ranks) == 1 and base in capture.rank_of_trace:
            mapping, source = {f.ranks[0]: capture.rank_of_trace[base]}, "capture_metadata"
        elif capture is not None and f.rank_pids and all(f.rank_pids.get(r) in capture.rank_of_pid for r in f.ranks):
            mapping = {r: capture.rank_of_pid[f.rank_pids[r]] for r in f.ranks}
            source = "capture_metadata"
        elif len(f.ranks) == 1 and rank_from_name(base) is not None:
            mapping, source = {f.ranks[0]: int(rank_from_name(base))}, "file_name"  # type: ignore[arg-type]
        if mapping is None or taken & set(mapping.values()):
            if mapping is not None:
                notes.append(f"{base}: rank {sorted(mapping.values())} is already taken by another file; numbered by file order instead.")
            pending.append(f)
            continue
        members[f.path] = mapping
        sources[f.path] = source
        taken |= set(mapping.values())
    for f in pending:
        mapping = {}
        for r in f.ranks:
            nxt = 0
            while nxt in taken:
                nxt += 1
            mapping[r] = nxt
            taken.add(nxt)
        members[f.path] = mapping
        sources[f.path] = "process_order" if len(f.ranks) > 1 else ("file_order" if len(files) > 1 else "single")
    return members, sources, notes


def group_jobs(
    files: Sequence[FileMeta],
    captures: Mapping[str, CaptureMetadata] | None = None,
    *,
    relative_to: str | None = None,
) -> list[JobPlan]:
    """Split an archive's files into jobs (see the module docstring); deterministic.

    Args:
        files: one record per readable trace file.
        captures: folder → its ``metadata.json`` (folders without one are absent).
        relative_to: job names are paths relative to this folder when they lie under it.
    """
    captures = captures or {}
    by_folder: dict[str, list[FileMeta]] = {}
    for f in files:
        by_folder.setdefault(os.path.dirname(f.path), []).append(f)
    plans: list[JobPlan] = []

    def label(path: str) -> str:
        if relative_to:
            try:
                rel = os.path.relpath(path, relative_to)
            except ValueError:
                return path
            if not rel.startswith(".."):
                return rel
        return path

    def plan(name: str, folder: str, group: Sequence[FileMeta], capture: CaptureMetadata | None = None) -> JobPlan:
        members, sources, notes = assign_ranks(group, capture)
        ws = capture.world_size if capture is not None and capture.world_size else None
        ws = ws or max((f.world_size for f in group if f.world_size), default=None)
        return JobPlan(name=name, folder=folder, members=members, rank_sources=sources, world_size=ws, capture=capture, notes=tuple(notes))

    for folder in sorted(by_folder):
        group = sorted(by_folder[folder], key=lambda m: m.path)
        capture = captures.get(folder)
        if capture is not None:
            plans.append(plan(label(folder), folder, group, capture))
            continue
        keyed: dict[tuple[str, str], list[FileMeta]] = {}
        singles: list[FileMeta] = []
        for f in group:
            base = os.path.basename(f.path)
            template = name_template(base)
            if template is not None and len(f.ranks) == 1:
                keyed.setdefault((f.format, template), []).append(f)
            elif f.trusted and f.world_size and f.world_size > 1 and len(f.ranks) == 1:
                keyed.setdefault((f.format, f"world{f.world_size}"), []).append(f)
            else:
                singles.append(f)
        for (_fmt, template), members in sorted(keyed.items()):
            if len(members) == 1:
                singles.extend(members)
                continue
            name = label(os.path.join(folder, template if not template.startswith("world") else f"*.{_fmt}"))
            for i, cluster in enumerate(_split_captures(members)):
                if len(cluster) == 1:
                    singles.extend(cluster)
                else:
                    plans.append(plan(name if i == 0 else f"{name}#{i + 1}", folder, cluster))
        for f in sorted(singles, key=lambda m: m.path):
            plans.append(plan(label(f.path), folder, [f]))
    return sorted(plans, key=lambda p: p.name)


def _claimed_rank(f: FileMeta) -> int | None:
    if f.trusted:
        return f.ranks[0]
    return rank_from_name(os.path.basename(f.path))


def _split_captures(files: Sequence[FileMeta]) -> list[list[FileMeta]]:
    """One list per capture: all files together when their ranks are distinct; otherwise
    clusters of files whose time spans overlap, and single files where even those collide."""
    claims = [_claimed_rank(f) for f in files]
    if len(set(claims)) == len(claims):
        return [list(files)]
    timed = sorted((f for f in files if f.start_ns is not None and f.end_ns is not None), key=lambda f: (f.start_ns, f.path))
    clusters: list[list[FileMeta]] = []
    end = None
    for f in timed:
        if clusters and end is not None and f.start_ns is not None and f.start_ns <= end:
            clusters[-1].append(f)
            end = max(end, f.end_ns or end)
        else:
            clusters.append([f])
            end = f.end_ns
    clusters.extend([f] for f in files if f.start_ns is None or f.end_ns is None)
    out: list[list[FileMeta]] = []
    for c in clusters:
        ranks = [_claimed_rank(f) for f in c]
        if len(set(ranks)) == len(ranks):
            out.append(c)
        else:
            out.extend([f] for f in c)
    return out


# --------------------------------------------------------------------------- tables per rank


def split_ranks(tables: TraceTables) -> dict[int, TraceTables]:
    """One :class:`TraceTables` per rank of a file (a single-rank file is returned as is)."""
    ranks = sorted(int(r) for r in tables.events["rank"].unique().drop_nulls().to_list())
    if len(ranks) <= 1:
        only = ranks[0] if ranks else (tables.info.ranks[0] if tables.info.ranks else 0)
        return {only: tables}
    out: dict[int, TraceTables] = {}
    for r in ranks:
        ev = tables.events.filter(pl.col("rank") == r)
        ids = ev.select("event_id")
        pids = ev.select(pl.col("pid").drop_nulls().unique())
        devs = ev.select(pl.col("device").drop_nulls().unique())
        links = tables.links.join(ids.rename({"event_id": "gpu_event_id"}), on="gpu_event_id", how="semi")
        flows = tables.flows.filter(pl.col("src_event_id").is_in(ids["event_id"].implode()) | pl.col("dst_event_id").is_in(ids["event_id"].implode()))
        devices = tables.devices.join(devs, on="device", how="semi") if devs.height else tables.devices
        threads = tables.threads.filter(pl.col("pid").is_in(pids["pid"].implode()) | (pl.col("pid").is_null() & pl.col("device").is_in(devs["device"].implode())))
        counters = tables.counters.join(pids, on="pid", how="semi")
        memory = tables.memory.join(pids, on="pid", how="semi")
        out[r] = TraceTables(
            info=tables.info.with_changes(rank=r, ranks=(r,)),
            events=ev, links=links, flows=flows, devices=devices, threads=threads, counters=counters, memory=memory,
        )
    return out


def relabel_rank(tables: TraceTables, rank: int) -> TraceTables:
    """The same tables with every row (and the info) given job rank ``rank``."""
    if tables.info.ranks == (rank,) and tables.events["rank"].eq(rank).all():
        return tables
    return TraceTables(
        info=tables.info.with_changes(rank=rank, ranks=(rank,)),
        events=tables.events.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")),
        links=tables.links, flows=tables.flows, devices=tables.devices, threads=tables.threads,
        counters=tables.counters, memory=tables.memory,
    )


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class RankTrace:
    """One rank of a job: its tables (this rank's rows only) and where they came from."""

    rank: int
    path: str
    tables: TraceTables
    #: how the rank was decided: distributed_info, capture_metadata, file_name, process_order, file_order, single
    rank_source: str


@dataclass(frozen=True)
class Job:
    """The traces of one distributed job, one entry per rank (sorted by rank)."""

    name: str
    ranks: tuple[RankTrace, ...]
    world_size: int | None = None
    #: the capture's metadata.json, when the job came from a capture folder
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: (path, reason) of files of the folder that could not be read
    skipped: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    #: rank → what its program built, as the capture recorded it (empty without a capture's program section)
    program: Mapping[int, ProgramFacts] = field(default_factory=dict)

    @property
    def rank_numbers(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks)


def read_job(path_or_paths: str | Path | Sequence[str | Path], *, cache: bool = True, progress: Progress | None = None) -> Job:
    """Read a capture folder, a folder of one job's traces, one file or a list of files as a job.

    ``progress`` hears each file's name and reading phases (see :mod:`tracekit.progress`).

    Raises:
        tracekit.errors.TracekitError: a given file is unreadable, the folder holds no trace,
            or the folder holds the traces of several jobs (the message lists them).

    Example (from the repository root): the two-rank capture shipped in ``sample_traces``::

        >>> from tracekit.reading.job import read_job
        >>> job = read_job("sample_traces/captures/ddp_gloo")
        >>> job.rank_numbers, job.world_size
        ((0, 1), 2)
        >>> [r.path.split("/")[-1] for r in job.ranks]
        ['rank0.cycle0.pt.trace.json.gz', 'rank1.cycle0.pt.trace.json.gz']
    """
    if isinstance(path_or_paths, (str, Path)):
        root = Path(path_or_paths)
        if not root.exists():
            from ..errors import TraceNotFoundError

            raise TraceNotFoundError("no such file or folder", path=root)
        if root.is_dir():
            return _read_folder(root, cache=cache, progress=progress)
        paths = [root]
    else:
        paths = [Path(p) for p in path_or_paths]
        if not paths:
            raise UsageError("no trace files given")
    loaded = {str(p): _read_one(p, cache, progress) for p in paths}
    return _assemble(_name_of(paths), loaded, capture=None, skipped=())


def _name_of(paths: Sequence[Path]) -> str:
    if len(paths) == 1:
        return str(paths[0])
    return os.path.commonpath([str(p) for p in paths]) or str(paths[0])


def _read_one(path: Path, cache: bool, progress: Progress | None) -> TraceTables:
    from .trace import read_trace

    if progress is not None:
        progress.subject(path.name)
    return read_trace(path, cache=cache, progress=progress)


def read_jobs(folder: str | Path, *, cache: bool = True, progress: Progress | None = None) -> list[Job]:
    """Every job whose traces lie in ``folder`` (not its subfolders), grouped as
    :func:`group_jobs` decides; a capture folder (``metadata.json``) is one job.

    Raises:
        tracekit.errors.TracekitError: the folder does not exist, holds no trace, or none of its
            files can be read (files that cannot be read are listed in each job's ``skipped``).

    Example (from the repository root): the shipped synthetic traces are one job per file, except
    the two ranks of ``multi_rank``, which are one job in each format::

        >>> from tracekit.reading.job import read_jobs
        >>> jobs = read_jobs("sample_traces/synthetic")
        >>> len(jobs), [j.name.split("/")[-1] for j in jobs][:2]
        (16, ['dataloader_fixed.kineto.json', 'dataloader_fixed.nsys.sqlite'])
        >>> [(j.name.split("/")[-1], j.rank_numbers) for j in jobs if len(j.ranks) > 1]
        [('multi_rank.rank*.kineto.json', (0, 1)), ('multi_rank.rank*.nsys.sqlite', (0, 1))]
    """
    root = Path(folder)
    if not root.exists():
        from ..errors import TraceNotFoundError

        raise TraceNotFoundError("no such folder", path=root)
    if not root.is_dir():
        raise UsageError("not a folder", path=root, hint="read one trace file with read_job or read_trace")
    return _folder_jobs(root, cache=cache, progress=progress)


def _folder_jobs(root: Path, *, cache: bool, progress: Progress | None = None) -> list[Job]:
    """The jobs of a folder: one when it is a capture or when no file belongs with another
    (single traces of a folder are then ranks in file order); otherwise one per :func:`group_jobs` plan."""
    capture, loaded, skipped = _load_folder(root, cache=cache, progress=progress)
    if capture is None:
        plans = group_jobs([FileMeta.from_tables(p, t) for p, t in loaded.items()], relative_to=str(root))
        if len(plans) > 1 and any(len(p.members) > 1 or sum(len(m) for m in p.members.values()) > 1 for p in plans):
            return [
                _assemble(str(root / plan.name), {p: loaded[p] for p in plan.members}, capture=None, skipped=skipped)
                for plan in plans
            ]
    return [_assemble(str(root), loaded, capture=capture, skipped=skipped)]


def _load_folder(
    root: Path, *, cache: bool, progress: Progress | None = None
) -> tuple[CaptureMetadata | None, dict[str, TraceTables], tuple[tuple[str, str], ...]]:
    """The capture metadata of ``root`` and its readable traces (path → tables), and the unreadable ones."""
    capture = read_capture_metadata(root)
    names = sorted(p for p in root.iterdir() if p.is_file() and is_trace_name(p.name))
    if capture is not None and capture.traces:
        listed = {n for n in capture.traces if (root / n).is_file()}
        if listed:
            names = sorted(p for p in names if p.name in listed)
    if not names:
        raise TraceFormatError("the folder holds no trace files (.json, .json.gz, .sqlite, .nsys-rep)", path=root)
    loaded: dict[str, TraceTables] = {}
    skipped: list[tuple[str, str]] = []
    for p in names:
        try:
            loaded[str(p)] = _read_one(p, cache, progress)
        except TracekitError as exc:
            skipped.append((str(p), exc.message))
    if not loaded:
        raise TraceFormatError(
            "none of the folder's files could be read as a trace: " + "; ".join(f"{os.path.basename(p)}: {r}" for p, r in skipped[:3]),
            path=root,
        )
    return capture, loaded, tuple(skipped)


def _read_folder(root: Path, *, cache: bool, progress: Progress | None = None) -> Job:
    jobs = _folder_jobs(root, cache=cache, progress=progress)
    if len(jobs) > 1:
        prefix = str(root).rstrip("/") + "/"
        listing = ", ".join(
            f"{j.name.removeprefix(prefix)} ({len(j.ranks)} rank{'s' if len(j.ranks) != 1 else ''})" for j in jobs[:6]
        )
        raise UsageError(
            f"the folder holds the traces of {len(jobs)} different jobs: {listing}",
            path=root,
            hint="read each job with tracekit.reading.job.read_jobs (tracekit analyze FOLDER summarises every job), or move one "
            "job's rank files into a folder of their own",
        )
    return jobs[0]


def _assemble(name: str, loaded: Mapping[str, TraceTables], *, capture: CaptureMetadata | None, skipped: tuple[tuple[str, str], ...]) -> Job:
    metas = [FileMeta.from_tables(p, t) for p, t in loaded.items()]
    members, sources, notes = assign_ranks(metas, capture)
    ranks: list[RankTrace] = []
    for path, tables in loaded.items():
        mapping = members[path]
        for file_rank, part in split_ranks(tables).items():
            job_rank = mapping.get(file_rank, file_rank)
            ranks.append(RankTrace(rank=job_rank, path=path, tables=relabel_rank(part, job_rank), rank_source=sources[path]))
    ranks.sort(key=lambda r: r.rank)
    ws = capture.world_size if capture is not None and capture.world_size else None
    ws = ws or max((m.world_size for m in metas if m.world_size), default=None)
    return Job(
        name=name,
        ranks=tuple(ranks),
        world_size=ws,
        metadata=dict(capture.raw) if capture is not None else {},
        skipped=skipped,
        notes=tuple(notes),
        program=dict(capture.program) if capture is not None else {},
    )


__all__ = [
    "CaptureMetadata", "FileMeta", "Job", "JobPlan", "RankTrace", "assign_ranks",
    "group_jobs", "is_trace_name", "name_template", "program_of_trace", "rank_from_name", "read_capture_metadata", "read_job", "read_jobs",
    "relabel_rank", "split_ranks",
]

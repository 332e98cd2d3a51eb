"""The output folder of a batch: atomic Parquet writes, and the previous run's results.

Each table is written to a hidden temporary file in the output folder and renamed over the
old one (``os.replace`` is atomic on POSIX and Windows), so a reader — or an interrupted
batch — never sees a half-written Parquet file.  ``batch.json`` (run summary) is written the
same way, last.

The previous run's tables are the incremental state: a file whose content hash was analysed
by the same tracekit version (and batch schema) is restored from them instead of analysed
again.  Old results are used only when all the tables are readable; otherwise the batch
starts afresh.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from .._version import __version__
from ..analysis.multirank import PROFILE_STEPS_SCHEMA, as_collectives
from ..reading.cache import write_entry
from .schemas import BATCH_SCHEMA_VERSION, BATCH_TABLES, COLLECTIVES, FINDINGS, OPS, RANKS, STEPS, TRACES
from .work import FILE_OPS_SCHEMA, FileResult, Task

SUMMARY_FILE = "batch.json"
#: failures that depend only on the file's bytes (reused like results); others are retried
DETERMINISTIC_ERRORS = ("TraceFormatError", "TraceCorruptError")

_FILE_COLUMNS = ("path", "content_hash", "size_bytes", "mtime_ns", "error", "error_kind", "seconds")
_JOB_COLUMNS = ("job", "rank", "ranks", "rank_source")


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        frame.write_parquet(tmp, compression="zstd", statistics=True)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(text: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_outputs(out: Path, tables: Mapping[str, pl.DataFrame], summary: Mapping[str, Any]) -> list[Path]:
    """Write every batch table and ``batch.json`` into ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for schema in BATCH_TABLES:
        path = out / f"{schema.name}.parquet"
        write_parquet_atomic(schema.conform(tables[schema.name]), path)
        written.append(path)
    path = out / SUMMARY_FILE
    write_text_atomic(json.dumps(dict(summary), indent=2, sort_keys=True, default=str) + "\n", path)
    written.append(path)
    return written


@dataclass
class Previous:
    """The previous run's per-file results, found by content hash."""

    #: content hash → the previous traces row of one file with that content
    by_hash: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: path → (size, mtime_ns, content hash): skips re-hashing unchanged files
    stat: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    findings: dict[str, pl.DataFrame] = field(default_factory=dict)
    ranks: dict[str, pl.DataFrame] = field(default_factory=dict)
    steps: dict[str, pl.DataFrame] = field(default_factory=dict)
    collectives: dict[str, pl.DataFrame] = field(default_factory=dict)
    ops: dict[str, pl.DataFrame] = field(default_factory=dict)
    #: content hash → a result from the journal (newer than the tables)
    journal: dict[str, FileResult] = field(default_factory=dict)

    def known_hash(self, path: str, size: int, mtime_ns: int) -> str | None:
        hit = self.stat.get(path)
        return hit[2] if hit is not None and hit[0] == size and hit[1] == mtime_ns else None

    def restore(self, content_hash: str, path: str, size: int, mtime_ns: int) -> FileResult | None:
        """The previous result for this content, as a FileResult for ``path``; None if there is none."""
        done = self.journal.get(content_hash)
        if done is not None:
            return replace(done, path=path, size_bytes=size, mtime_ns=mtime_ns)
        row = self.by_hash.get(content_hash)
        if row is None:
            return None
        old = row["path"]
        result = FileResult(path=path, content_hash=content_hash, size_bytes=size, mtime_ns=mtime_ns, seconds=row.get("seconds") or 0.0)
        if row.get("error") is not None:
            result.error, result.error_kind = row["error"], row["error_kind"]
            return result
        result.trace = {k: v for k, v in row.items() if k not in _FILE_COLUMNS and k not in _JOB_COLUMNS}
        keep = [c.name for c in FINDINGS.columns if c.name not in ("scope", "job", "path", "content_hash", "rank")]
        if old in self.findings:
            result.findings = self.findings[old].select(keep).to_dicts()
        if old in self.ranks:
            result.ranks = self.ranks[old].select("file_rank", "step_source", "top_finding").to_dicts()
        if old in self.steps:
            result.steps = self.steps[old].with_columns(pl.col("file_rank").alias("rank")).select(list(PROFILE_STEPS_SCHEMA)).cast(PROFILE_STEPS_SCHEMA)  # type: ignore[arg-type]
        if old in self.collectives:
            # (outputs of older versions lack the group columns: no group recorded)
            result.collectives = as_collectives(self.collectives[old].with_columns(pl.col("file_rank").alias("rank")))
        if old in self.ops:
            result.ops = self.ops[old].with_columns(pl.col("file_rank").alias("rank")).select(list(FILE_OPS_SCHEMA)).cast(FILE_OPS_SCHEMA)
        return result


def load_previous(out: Path) -> tuple[Previous, str | None]:
    """The previous results in ``out`` (empty when there are none), and why they were not used if so.

    Besides the tables, the results the journal (:class:`Journal`) holds are restored: those
    of a batch that was killed before it could write its tables.
    """
    prev, note = _load_tables(out)
    for r in Journal(out).load().values():
        prev.stat[r.path] = (r.size_bytes, r.mtime_ns, r.content_hash)
        if r.error is None or r.error_kind in DETERMINISTIC_ERRORS:
            prev.journal.setdefault(r.content_hash, r)
    return prev, note


def _load_tables(out: Path) -> tuple[Previous, str | None]:
    prev = Previous()
    summary_path = out / SUMMARY_FILE
    if not (out / "traces.parquet").exists():
        return prev, None
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return prev, f"{summary_path} is missing or unreadable: every file is analysed again"
    if summary.get("batch_schema") != BATCH_SCHEMA_VERSION:
        return prev, "the previous results were written by an incompatible tracekit: every file is analysed again"
    kept = (TRACES, FINDINGS, RANKS, STEPS, COLLECTIVES, OPS)
    missing = [s.name for s in kept if not (out / f"{s.name}.parquet").exists()]
    if missing:
        return prev, f"the previous results lack {', '.join(m + '.parquet' for m in missing)}: every file is analysed again"
    try:
        frames = {s.name: s.conform(pl.read_parquet(out / f"{s.name}.parquet")) for s in kept}
    except Exception as exc:  # unreadable, truncated or foreign Parquet: start afresh
        return prev, f"the previous results could not be read ({type(exc).__name__}): every file is analysed again"
    traces = frames["traces"]
    for row in traces.iter_rows(named=True):
        if row["content_hash"] is None or row["size_bytes"] is None or row["mtime_ns"] is None:
            continue
        prev.stat[row["path"]] = (row["size_bytes"], row["mtime_ns"], row["content_hash"])
        if row["tracekit_version"] != __version__:
            continue
        if row["error"] is not None and row["error_kind"] not in DETERMINISTIC_ERRORS:
            continue
        prev.by_hash.setdefault(row["content_hash"], row)
    wanted = {r["path"] for r in prev.by_hash.values()}

    def index(frame: pl.DataFrame) -> dict[str, pl.DataFrame]:
        frame = frame.filter(pl.col("path").is_in(list(wanted)))
        if frame.height == 0:
            return {}
        return {str(k[0]): v for k, v in frame.partition_by("path", as_dict=True).items()}

    prev.findings = index(frames["findings"].filter(pl.col("scope") == "trace"))
    prev.ranks = index(frames["ranks"])
    prev.steps = index(frames["steps"])
    prev.collectives = index(frames["collectives"])
    prev.ops = index(frames["ops"])
    return prev, None


#: the journal's folder inside the output folder
JOURNAL_DIR = ".tracekit-partial"
#: name prefix of the marker of a file being analysed in the batch's own process
_RUNNING = ".running-"


class Journal:
    """Each file's result, kept on disk the moment it arrives, until the tables hold it.

    The tables are written at checkpoints (every minute, on Ctrl-C, at the end); a batch
    killed between two (SIGKILL, a lost machine, the out-of-memory killer taking the
    driver) would lose the files analysed since the last one.  The journal keeps them: one
    folder per content hash in ``OUT/.tracekit-partial``, written into a temporary folder
    and renamed into place, so an entry is whole or absent.  The next run restores them like
    results from the tables (same tracekit version, same rules for errors); each checkpoint
    that writes the tables empties the journal.

    With one worker, files are analysed in the batch's own process; a marker names the file
    under way, so when that process is killed (out of memory) the next run knows which file
    did it and analyses it in a worker process of its own (:func:`~.engines.run_tasks`).
    """

    def __init__(self, out: Path) -> None:
        self.root = out / JOURNAL_DIR

    def add(self, result: FileResult) -> bool:
        """Keep ``result``; False when the journal cannot be written (the batch goes on without it)."""
        if not result.content_hash:
            return False
        entry = self.root / result.content_hash
        if entry.exists():
            return True

        def write(tmp: Path) -> None:
            meta = {
                "tracekit_version": __version__, "batch_schema": BATCH_SCHEMA_VERSION, "path": result.path,
                "content_hash": result.content_hash, "size_bytes": result.size_bytes, "mtime_ns": result.mtime_ns,
                "seconds": result.seconds, "error": result.error, "error_kind": result.error_kind,
                "trace": {k: _encode(v) for k, v in result.trace.items()}, "findings": result.findings, "ranks": result.ranks,
            }
            (tmp / "result.json").write_text(json.dumps(meta), encoding="utf-8")
            result.steps.write_ipc(tmp / "steps.arrow")
            result.collectives.write_ipc(tmp / "collectives.arrow")
            result.ops.write_ipc(tmp / "ops.arrow")

        if not write_entry(entry, write, errors=(OSError, TypeError, ValueError)):
            return False
        with contextlib.suppress(OSError):
            (self.root / f"{_RUNNING}{result.content_hash}").unlink(missing_ok=True)
        return True

    def start(self, task: Task) -> None:
        """Mark ``task`` as being analysed in the batch's own process (cleared when its result is added)."""
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / f"{_RUNNING}{task.content_hash}").touch()

    def interrupted(self) -> set[str]:
        """Content hashes of files a previous run was analysing in its own process when it died."""
        if not self.root.is_dir():
            return set()
        return {p.name[len(_RUNNING):] for p in self.root.glob(f"{_RUNNING}*")}

    def load(self) -> dict[str, FileResult]:
        """Every whole entry written by this tracekit version, by content hash (damaged ones are skipped)."""
        found: dict[str, FileResult] = {}
        if not self.root.is_dir():
            return found
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith("."):
                continue
            try:
                meta = json.loads((entry / "result.json").read_text(encoding="utf-8"))
                if meta["tracekit_version"] != __version__ or meta["batch_schema"] != BATCH_SCHEMA_VERSION:
                    continue
                found[meta["content_hash"]] = FileResult(
                    path=meta["path"], content_hash=meta["content_hash"], size_bytes=meta["size_bytes"], mtime_ns=meta["mtime_ns"],
                    trace={k: _decode(v) for k, v in meta["trace"].items()}, findings=meta["findings"], ranks=meta["ranks"],
                    steps=_read_ipc(entry / "steps.arrow").cast(PROFILE_STEPS_SCHEMA),  # type: ignore[arg-type]
                    collectives=as_collectives(_read_ipc(entry / "collectives.arrow")),
                    ops=_read_ipc(entry / "ops.arrow").cast(FILE_OPS_SCHEMA),
                    error=meta["error"], error_kind=meta["error_kind"], seconds=meta["seconds"],
                )
            except Exception:  # a damaged or foreign entry: analyse that file again
                continue
        return found

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _read_ipc(path: Path) -> pl.DataFrame:
    # from bytes, not memory-mapped: the journal folder is deleted while the frame lives on
    return pl.read_ipc(io.BytesIO(path.read_bytes()))


def _encode(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$datetime"}:
        return _dt.datetime.fromisoformat(value["$datetime"])
    return value


__all__ = [
    "DETERMINISTIC_ERRORS", "JOURNAL_DIR", "SUMMARY_FILE", "Journal", "Previous", "load_previous", "write_outputs", "write_parquet_atomic",
]

"""One harness per native entry point, and the Python-level ones for the readers around them.

A harness takes one input (bytes) and either returns (the input gave tables, or was refused
the way the contract allows) or raises: an unexpected exception, a differential mismatch
(an ``AssertionError`` naming both answers), or, under the sanitizer build, a sanitizer
report that ends the process.  The same function runs under atheris (``worker.py``), in the
coverage replay and in the regression tests, so a finding replays anywhere.

Differential checks: the native answer against the pure-Python path's on the same input
(``kineto_diff``, ``dag``, ``sweep``): the same tables, or the same refusal.
"""

from __future__ import annotations

import array
import gzip
import io
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: values near the edges of every integer width the native code computes with
_EDGE_INTS = (0, 1, -1, 2, 7, 2**31 - 1, -(2**31), 2**32, 2**53 + 1, 2**62, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1)


@dataclass(frozen=True)
class Harness:
    name: str
    #: the native module whose edges guide the fuzzer (None: Python-level, atheris's own coverage)
    module: str | None
    run: Callable[[bytes], None]
    #: Python packages atheris instruments for a Python-level harness
    instrument: tuple[str, ...] = ()
    #: largest input libFuzzer makes
    max_len: int = 4096


class _Reader:
    """Typed values read off the front of a fuzz input (atheris's FuzzedDataProvider would do;
    this keeps the harnesses runnable where atheris is not installed)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def left(self) -> int:
        return len(self.data) - self.at

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def below(self, n: int) -> int:
        return self.byte() % n if n > 0 else 0

    def int64(self) -> int:
        """An int64: most often a small number, often an edge value, sometimes any."""
        kind = self.below(4)
        if kind == 0:
            return self.below(256) - 64
        if kind == 1:
            return _EDGE_INTS[self.below(len(_EDGE_INTS))]
        raw = self.data[self.at : self.at + 8].ljust(8, b"\0")
        self.at += 8
        return int(struct.unpack("<q", raw)[0])

    def rest(self) -> bytes:
        out = self.data[self.at :]
        self.at = len(self.data)
        return out


def _i64(values: list[int]) -> array.array[int]:
    return array.array("q", values)


# ------------------------------------------------------------------ the Kineto scanner

_POOL: list[Any] = []


def kineto_scan(data: bytes) -> None:
    """scan() on the raw input, with and without the common categories, through the parse's
    Pool of freed memory (one for the whole run, as one parse reuses it), every column it
    gives exported through the Arrow PyCapsule interface and released; one input in eight
    (by its checksum) has its columns imported by polars instead."""
    import polars as pl

    from tracekit.native import load
    from tracekit.parsers._kineto_fields import COMMON_CATEGORY_NAMES

    native = load("kineto_scan")
    assert native is not None, "the native scanner is not built"
    if not _POOL:
        _POOL.append(native.Pool())
    for categories in (None, COMMON_CATEGORY_NAMES):
        scanned = native.scan(data, _POOL[0], categories)
        if scanned is None or scanned is False:
            continue
        rows, columns, fallback = scanned[:3]
        for start, end, index in fallback:
            assert 0 <= start < end <= len(data), (start, end)
            assert index >= 0, index
        to_polars = zlib.crc32(data) & 7 == 0
        for _name, _kind, _nfloat, _nlabels, values, labels in columns:
            for column in (values, labels):
                if column is None:
                    continue
                if to_polars:
                    pl.Series(column)
                else:
                    column.__arrow_c_array__()
        if len(scanned) == 4 and scanned[3] is not None and to_polars:
            assert pl.Series(scanned[3]).len() == rows


_REFUSED = "refused"


def kineto_diff(data: bytes) -> None:
    """The scanner's frame of the chunk against the msgspec path's: equal, or the scanner left
    the chunk to msgspec; a chunk the scanner calls invalid JSON must be refused by msgspec
    too, and one msgspec refuses must never get a frame from the scanner."""
    from polars.testing import assert_frame_equal

    from tracekit.native import load
    from tracekit.parsers._kineto_decode import decode_chunk, raw_frame
    from tracekit.parsers._kineto_scanner import scan_columns

    native = load("kineto_scan")
    assert native is not None, "the native scanner is not built"
    try:
        expected: Any = raw_frame(decode_chunk(data, [0]), [0])
    except ValueError:
        expected = _REFUSED
    try:
        frame: Any = scan_columns(native, data)
    except ValueError:
        frame = _REFUSED
    if frame is None:
        return
    if expected is _REFUSED or frame is _REFUSED:
        assert frame is expected, f"scanner: {'invalid JSON' if frame is _REFUSED else 'a frame'}; msgspec: {expected!r:.200}"
        return
    assert_frame_equal(frame, expected)


# ------------------------------------------------------------------ the critical path's kernel


def _graphs(r: _Reader) -> tuple[list[list[tuple[int, int, list[int]]]], int]:
    """Up to four small graphs with distinct (src, dst) pairs, and their number of weights."""
    k = 1 + r.below(3)
    graphs = []
    for _ in range(1 + r.below(4)):
        width = 2 + r.below(10)
        seen: set[tuple[int, int]] = set()
        edges = []
        for _ in range(r.below(24)):
            if r.left() <= 0:
                break
            u, v = r.below(width), r.below(width)
            if r.below(16) == 0:  # a node id anywhere in int64
                u = r.int64()
            if (u, v) in seen:
                continue
            seen.add((u, v))
            edges.append((u, v, [r.int64() for _ in range(k)]))
        graphs.append(edges)
    return graphs, k


def dag(data: bytes) -> None:
    """longest_paths() on raw buffers (the first byte odd: memory safety and clean errors
    only), or on well-formed graphs against networkx (lengths, node counts, the path)."""
    import networkx as nx

    from tracekit.analysis.critical_path import longest as reference
    from tracekit.native import load

    native = load("dag")
    assert native is not None, "the native dag kernel is not built"
    r = _Reader(data)
    if r.byte() & 1:
        cut = [r.below(64) for _ in range(4)]
        blob = r.rest()
        parts = [blob[sum(cut[:i]) : sum(cut[: i + 1])] for i in range(4)]
        with suppress(ValueError, TypeError, OverflowError, MemoryError, BufferError):
            native.longest_paths(parts[0], parts[1], [parts[2]] * (1 + len(blob) % 3), parts[3], bool(len(blob) & 1))
        return
    graphs, k = _graphs(r)
    want_path = bool(r.byte() & 1)
    flat = [e for g in graphs for e in g]
    offsets = [0]
    for g in graphs:
        offsets.append(offsets[-1] + len(g))
    lengths, nodes, status, path, path_off = native.longest_paths(
        _i64([u for u, _, _ in flat]), _i64([v for _, v, _ in flat]),
        [_i64([w[j] for _, _, w in flat]) for j in range(k)], _i64(offsets), want_path,
    )
    lengths_q, nodes_q, status_q = memoryview(lengths).cast("q"), memoryview(nodes).cast("q"), memoryview(status).cast("q")
    path_q, off_q = memoryview(path).cast("q"), memoryview(path_off).cast("q")
    attrs = [f"w{j}" for j in range(k)]
    for i, g in enumerate(graphs):
        G = nx.DiGraph()
        G.add_edges_from((u, v, dict(zip(attrs, w, strict=True))) for u, v, w in g)
        if status_q[i] == 1:  # a cycle: networkx must find one
            assert not nx.is_directed_acyclic_graph(G), f"graph {i}: the kernel saw a cycle in a DAG"
            continue
        if status_q[i] != 0:
            continue  # an overflow or no memory: left to the networkx path
        topo, broken = reference.acyclic_order(G)
        assert broken == 0, f"graph {i}: networkx broke a cycle the kernel did not see"
        assert list(lengths_q[i * k : (i + 1) * k]) == reference.longest_lengths(G, topo, attrs), f"graph {i}"
        assert nodes_q[i] == G.number_of_nodes(), f"graph {i}"
        if want_path:
            got = list(path_q[off_q[i] : off_q[i + 1]])
            assert got == nx.dag_longest_path(G, weight=attrs[0], topo_order=topo), f"graph {i}: path"


# ------------------------------------------------------------------ the replay's sweeps


def _overflows(n: int, src: list[int], dst: list[int], weights: list[int]) -> bool:
    """Whether the sweep of one scenario computes a sum outside int64 (the native module then
    answers False and the Python version takes over)."""
    dist = [0] * n
    for u, v, w in zip(src, dst, weights, strict=True):
        t = dist[u] + w
        if not INT64_MIN <= t <= INT64_MAX:
            return True
        dist[v] = max(dist[v], t)
    return False


def sweep(data: bytes) -> None:
    """read_int64() of a polars column (any dtype, nulls, several chunks) and longest() and
    topological() on graphs with indices in and out of range, against the Python versions."""
    from tracekit.native import load

    native = load("sweep")
    assert native is not None, "the native sweep module is not built"
    r = _Reader(data)
    if r.byte() & 7 == 0:  # (one input in eight: polars is slow beside the sweeps)
        _read_int64(native, r)
    _sweeps(native, r)


def _read_int64(native: Any, r: _Reader) -> None:
    """read_int64 of a column through the Arrow C stream interface: the column's values
    exactly when it is int64 without nulls and the output has its length, else ValueError."""
    import polars as pl

    values = [r.int64() for _ in range(r.below(12))]
    dtype = (pl.Int64, pl.Int32, pl.UInt64, pl.Float64, pl.String)[r.below(5)]
    nulls = r.below(4) == 0
    pieces = [pl.Series([None if nulls and i % 3 == 1 else v for i, v in enumerate(values[c::2])]) for c in (0, 1)]
    try:
        column = pl.concat(pieces, rechunk=False).cast(dtype, strict=False)
    except pl.exceptions.PolarsError:
        column = pl.Series(values, dtype=pl.Int64)
    out = array.array("q", bytes(8 * max(0, column.len() + r.below(3) - 1)))
    try:
        native.read_int64(column.__arrow_c_stream__(), out)
        ok = True
    except ValueError:
        ok = False
    exact = column.dtype == pl.Int64 and column.null_count() == 0 and len(out) == column.len()
    assert ok == exact, f"read_int64 of {column.dtype} ({column.null_count()} nulls) into {len(out)}: {ok}"
    if ok:
        assert out.tolist() == column.to_list()


def _sweeps(native: Any, r: _Reader) -> None:
    """longest and topological on n nodes against the Python versions."""
    from tracekit.analysis import sweep as reference

    n = r.below(12)
    m = r.below(30)
    bad = r.below(8) == 0  # an index outside [0, n) somewhere
    src = [r.below(max(n, 1)) for _ in range(m)]
    dst = [r.below(max(n, 1)) for _ in range(m)]
    if bad and m:
        (src if r.byte() & 1 else dst)[r.below(m)] = (-1, n, n + 5, INT64_MAX, INT64_MIN)[r.below(5)]
    k = r.below(4)
    weights = [[r.int64() for _ in range(m)] for _ in range(k)]
    valid = all(0 <= x < n for x in src + dst)
    out = array.array("q", bytes(8 * n * k))
    try:
        answered = native.longest(n, _i64(src), _i64(dst), _i64([w for ws in weights for w in ws]), out)
    except ValueError:
        assert not valid, f"longest refused a valid graph ({n} nodes, {m} edges)"
        answered = None
    if answered is not None:
        assert valid, "longest answered on an edge outside the nodes"
        overflow = any(_overflows(n, src, dst, ws) for ws in weights)
        assert answered == (not overflow), f"longest answered {answered}, the Python sums overflow: {overflow}"
        if answered:
            for j, ws in enumerate(weights):
                assert out[j * n : (j + 1) * n].tolist() == reference.longest_python(n, src, dst, ws), f"scenario {j}"
    pos = array.array("q", bytes(8 * n))
    try:
        acyclic = native.topological(n, _i64(src), _i64(dst), pos)
    except ValueError:
        assert not valid, f"topological refused a valid graph ({n} nodes, {m} edges)"
        return
    assert valid, "topological answered on an edge outside the nodes"
    expected = reference.kahn_python(n, src, dst)
    assert acyclic == (expected is not None), "topological and Kahn's order disagree on a cycle"
    if expected is not None:
        assert pos.tolist() == expected


# ------------------------------------------------------------------ Python-level readers


@contextmanager
def _scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _contract(path: Path) -> None:
    """tracekit's contract on one file: tables (then the analysis runs on them) or a
    TracekitError; anything else propagates."""
    from tracekit.analysis import diagnose
    from tracekit.errors import TracekitError
    from tracekit.parsers import parse

    try:
        tables = parse(path)
        tables.validate()
        diagnose(tables)
    except TracekitError:
        pass


def gzip_path(data: bytes) -> None:
    """A gzip'd trace through the reader: the input as the file itself (first byte 0), or as
    the JSON inside a gzip that is cut short, has a flipped byte, two members, or junk after."""
    r = _Reader(data)
    mode = r.below(5)
    body = r.rest()
    if mode == 0:
        raw = body
    else:
        raw = gzip.compress(body, compresslevel=1, mtime=0)
        cut = (len(body) * 7919) % max(1, len(raw))
        if mode == 1:
            raw = raw[:cut]
        elif mode == 2:
            flipped = bytearray(raw)
            flipped[cut] ^= 0x10
            raw = bytes(flipped)
        elif mode == 3:
            raw = raw + gzip.compress(body[: len(body) // 2], mtime=0)
        else:
            raw = raw + body[:16]
    with _scratch() as tmp:
        path = tmp / "trace.json.gz"
        path.write_bytes(raw)
        _contract(path)


def nsight(data: bytes) -> None:
    """An Nsight SQLite export: the input itself where it starts as a SQLite file, else
    spliced into the small synthetic export at an offset the input chooses."""
    from . import seeds

    base = seeds.nsight_base()
    if data.startswith(b"SQLite format 3\0"):
        raw = data
    else:
        r = _Reader(data)
        at = (r.byte() << 16 | r.byte() << 8 | r.byte()) % max(1, len(base))
        patch = r.rest()
        raw = base[:at] + patch + base[at + len(patch) :]
    with _scratch() as tmp:
        path = tmp / "export.sqlite"
        path.write_bytes(raw)
        _contract(path)


def cache_entry(data: bytes) -> None:
    """A damaged cache entry: one of a valid entry's table files (the input's first byte
    chooses which) replaced by the input, cut short, or with the input spliced in; the reader
    must miss (None) or give back valid tables (exactly the stored ones where nothing changed)."""
    import polars as pl
    from polars.testing import assert_frame_equal

    from tracekit.reading import cache

    from . import seeds

    key, good, files, expected = seeds.cache_base()
    r = _Reader(data)
    name = sorted(files)[r.below(len(files))]
    original = files[name]
    mode = r.below(3)
    at = (r.byte() << 16 | r.byte() << 8 | r.byte()) % max(1, len(original))
    patch = r.rest()
    if mode == 0:
        raw = patch
    elif mode == 1:
        raw = original[:at] + patch + original[at + len(patch) :]
    else:
        raw = original[:at] + patch
    with _scratch() as tmp:
        entry = cache.entry_dir(key, tmp)
        shutil.copytree(good, entry)
        (entry / name).write_bytes(raw)
        got = cache.load(key, "trace.json", tmp)
        if got is None:
            return
        if raw != original:  # a change no check can see must still read as valid tables
            got.validate()
            return
        for table, ipc in expected.items():
            assert_frame_equal(getattr(got, table), pl.read_ipc(io.BytesIO(ipc)))


HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness("kineto_scan", "kineto_scan", kineto_scan, max_len=65536),
        Harness("kineto_diff", "kineto_scan", kineto_diff, max_len=16384),
        Harness("dag", "dag", dag, max_len=2048),
        Harness("sweep", "sweep", sweep, max_len=2048),
        Harness("cache", None, cache_entry, instrument=("tracekit.reading",), max_len=8192),
        Harness("gzip", None, gzip_path, instrument=("parsers",), max_len=65536),
        Harness("nsight", None, nsight, instrument=("parsers",), max_len=8192),
    )
}

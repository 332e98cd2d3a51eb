"""Seed corpora, cut at run time from the traces beside the repository (``../shared/traces``;
nothing of them is copied into the repository) and from the sample traces, plus a few tiny
hand-written inputs; and the valid files the Python-level harnesses damage."""

from __future__ import annotations

import functools
import gzip
import io
import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
SAMPLES = REPO / "sample_traces" / "synthetic"
#: the few shared Kineto traces the corpus is cut from (small, of different PyTorch vintages and tools)
_SHARED_KINETO = (
    "kineto/gpu_metrics_input.json",
    "kineto/synthetic_cuda_sync_before_fix.json",
    "kineto/tb_plugin_pair/resnet50_profiler_api_num_workers_0/worker0.pt.trace.json.gz",
    "hta/tests/data/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "gpupuzzlers/streams/different_priority_streams.json.gz",
)
_HAND = (
    b"[]",
    b'[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,"dur":2,"args":{"correlation":3,"grid":[1,1,1]}}]',
    b'[{"ph":"f","id":"0x1f","pid":1,"tid":1,"ts":3,"cat":"ac2g","bp":"e"},{"ph":"s","id":31,"ts":2}]',
    b'[{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"stream 7"}},{"ph":"C","name":"mem","args":{"v":1}}]',
    rb'[{"ph":"X","name":"\u00e9\ud83d\ude00","ts":-9223372036854775808,"dur":1e308,"args":{"Input Dims":[[[]]]}}]',
)


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


def _event_spans(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of every event of the ``traceEvents`` array, in the file's own bytes."""
    text = raw.decode("utf-8", errors="replace")
    at = text.find('"traceEvents"')
    if at < 0:
        return []
    at = text.find("[", at) + 1
    decoder = json.JSONDecoder()
    spans = []
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] != "{":
            return spans
        try:
            _, end = decoder.raw_decode(text, at)
        except ValueError:
            return spans
        spans.append((at, end))
        at = end


def kineto_traces() -> Iterator[tuple[str, bytes]]:
    for path in sorted(SAMPLES.glob("*.kineto.json"))[:3]:
        yield path.name, path.read_bytes()
    for rel in _SHARED_KINETO:
        path = SHARED / rel
        if path.exists():
            yield rel, _read(path)


def kineto_chunks(count: int = 300, seed: int = 0) -> list[bytes]:
    """Chunks ``[ev,...]`` of 1-40 consecutive events of each trace, as its bytes have them
    (its whitespace and key order), the way the reader hands them to the scanner."""
    rng = random.Random(seed)
    out = list(_HAND)
    traces = list(kineto_traces())
    for _, raw in traces:
        text = raw.decode("utf-8", errors="replace")
        spans = _event_spans(raw)
        if not spans:
            continue
        for _ in range(count // max(1, len(traces))):
            first = rng.randrange(len(spans))
            last = min(len(spans), first + rng.randint(1, 40)) - 1
            out.append(("[" + text[spans[first][0] : spans[last][1]] + "]").encode())
    return out


def binary(count: int = 64, seed: int = 0) -> list[bytes]:
    """Inputs for the harnesses that read typed values off their bytes (dag, sweep)."""
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.randint(8, 400))) for _ in range(count)]


def corpus(name: str) -> list[bytes]:
    """The seed corpus of the harness ``name``."""
    if name in ("kineto_scan", "kineto_diff"):
        return kineto_chunks()
    if name == "gzip":
        return [b"\0" + gzip.compress(c, mtime=0) for c in kineto_chunks(20)] + [b"\1" + SAMPLES.joinpath("healthy.kineto.json").read_bytes()[:20000]]
    if name == "nsight":
        return [nsight_base(), *binary(16)]
    if name == "cache":
        return [b"\1\0\0\0", b"\2\0\1\0" + b"\xff" * 8, *binary(16)]
    return binary()


@functools.cache
def nsight_base() -> bytes:
    return (SAMPLES / "host_sync.nsys.sqlite").read_bytes()


@functools.cache
def cache_base() -> tuple[str, Path, dict[str, bytes], dict[str, bytes]]:
    """A valid cache entry of a small trace (key, entry folder, {file name: its bytes} of its
    table files, the tables as stored in Arrow IPC bytes), written once per process in a
    temporary folder."""
    import atexit

    from tracekit.parsers import parse
    from tracekit.reading import cache

    root = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-cache-"))
    atexit.register(shutil.rmtree, root, True)
    trace = root / "trace.json"
    doc = json.loads((SAMPLES / "host_sync.kineto.json").read_text())
    doc["traceEvents"] = doc["traceEvents"][:150]
    trace.write_text(json.dumps(doc))
    key = "0" * 64
    if not cache.store(key, parse(trace), root):
        raise RuntimeError("could not write the seed cache entry")
    entry = cache.entry_dir(key, root)
    loaded = cache.load(key, trace, root)
    assert loaded is not None
    # kept as Arrow IPC bytes, not frames: a frame alive at exit may hold memory from an
    # allocator LeakSanitizer does not scan (polars'), a false leak
    frames = {}
    for name in loaded.__dataclass_fields__:
        if name != "info":
            ipc = io.BytesIO()
            getattr(loaded, name).write_ipc(ipc)
            frames[name] = ipc.getvalue()
    files = {f.name: f.read_bytes() for f in sorted(entry.iterdir()) if f.suffix == ".arrow"}
    return key, entry, files, frames

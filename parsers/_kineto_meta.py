"""A Kineto trace's top level: the metadata around the events array (device properties,
distributed info, versions), the devices and counter tables, and the message for a file that
holds no trace.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import TraceFormatError
from tracekit.schema import COUNTERS, DEVICES

from ._jsonarray import ArrayStream
from ._kineto_decode import as_int, loads_text, time_series


def decode_top_level(state: ArrayStream, warnings: list[str]) -> dict[str, Any]:
    """Decode the metadata before and after the events array (best effort)."""
    top: dict[str, Any] = {}
    if state.bare_array:
        return top
    head = state.header.rstrip()
    if head.endswith(b","):
        head = head[:-1]
    text = head + b"}" if head.strip() != b"{" else b"{}"
    try:
        value = loads_text(text)
        if isinstance(value, dict):
            top.update(value)
    except (ValueError, RecursionError):
        warnings.append("could not decode the metadata before traceEvents; device properties and rank may be missing")
    if state.trailer.strip():
        tail = state.trailer.strip()
        try:
            value = loads_text(b'{"traceEvents":[]' + tail) if tail.startswith(b",") else {}
            if isinstance(value, dict):
                value.pop("traceEvents", None)
                top.update(value)
        except (ValueError, RecursionError):
            warnings.append("could not decode the metadata after traceEvents")
    return top


def explain_not_a_trace(path: Path, head: bytes) -> TraceFormatError:
    expected = "expected a PyTorch profiler (Kineto) Chrome trace: a JSON object with a traceEvents array"
    text = head.lstrip()[:2000]
    if b'"nodes"' in head and (b'"schema"' in head or b'"finish_ts"' in head):
        return TraceFormatError(
            "this is a Chakra execution trace (it has 'nodes', not 'traceEvents'), not a profiler timeline; " + expected,
            path=path,
            hint="pass the Kineto trace captured alongside it (…_trace.json.gz)",
        )
    if text.startswith(b"{"):
        keys = re.findall(rb'"([A-Za-z_][A-Za-z0-9_ ]{0,40})"\s*:', text)[:6]
        shown = ", ".join(k.decode("ascii", "replace") for k in keys)
        return TraceFormatError(f"JSON object without a traceEvents array (keys: {shown or 'none'}); {expected}", path=path)
    return TraceFormatError(f"not JSON; {expected}", path=path)


def counters_table(rows: list[dict[str, Any]], base_ns: int) -> pl.DataFrame:
    if not rows:
        return COUNTERS.empty()
    frame = pl.DataFrame(
        {
            "name": [r["name"] for r in rows],
            "series": [r["series"] for r in rows],
            "pid": [as_int(r["pid"]) for r in rows],
            "start_ns": time_series("start_ns", [r["ts"] for r in rows]) + base_ns,
            "value": [r["value"] for r in rows],
        }
    )
    return COUNTERS.conform(frame).sort(["name", "series", "start_ns"])


def devices_table(top: dict[str, Any], events: pl.DataFrame) -> pl.DataFrame:
    props = top.get("deviceProperties") or top.get("computeProperties") or []
    rows = []
    amd_runtime = any(k.startswith(("hip_", "roctracer")) for k in top)
    if isinstance(props, list):
        for d in props:
            if not isinstance(d, dict):
                continue
            name = str(d.get("name")) if d.get("name") is not None else None
            rows.append(
                {
                    "device": as_int(d.get("id")),
                    "name": name,
                    "vendor": _vendor(name, amd_runtime),
                    "total_memory_bytes": as_int(d.get("totalGlobalMem")),
                    "compute_major": as_int(d.get("computeMajor", d.get("major"))),
                    "compute_minor": as_int(d.get("computeMinor", d.get("minor"))),
                    "sm_count": as_int(d.get("numSms", d.get("multiProcessorCount"))),
                }
            )
    frame = DEVICES.from_columns({k: [r[k] for r in rows] for k in DEVICES.names}) if rows else DEVICES.empty()
    # the distinct devices: from the least and the greatest where they agree (a trace of one
    # device; two reductions), else by a query
    device = events.get_column("device")
    least, greatest = device.min(), device.max()
    if least is None or least == greatest:
        used: list[Any] = [] if least is None else [least]
    else:
        used = events.select(pl.col("device").drop_nulls().unique()).to_series().to_list()
    known = set(frame["device"].to_list())
    missing = [int(d) for d in used if d not in known]
    if missing:
        extra = DEVICES.from_columns(
            {"device": missing, "vendor": ["amd" if amd_runtime else None] * len(missing)}
        )
        frame = pl.concat([frame, extra])
    return frame.sort("device", nulls_last=True)


def _vendor(name: str | None, amd_runtime: bool) -> str | None:
    if amd_runtime:
        return "amd"
    if not name:
        return None
    low = name.lower()
    if any(w in low for w in ("nvidia", "tesla", "quadro", "geforce", "rtx", "a100", "h100", "v100")):
        return "nvidia"
    if any(w in low for w in ("amd", "radeon", "instinct", "mi250", "mi300")):
        return "amd"
    return "other"


def producer(top: dict[str, Any]) -> str | None:
    parts = []
    for key, label in (
        ("cuda_runtime_version", "CUDA runtime"),
        ("cuda_driver_version", "CUDA driver"),
        ("cupti_version", "CUPTI"),
        ("hip_runtime_version", "HIP runtime"),
        ("roctracer_version", "roctracer"),
    ):
        if top.get(key) is not None:
            parts.append(f"{label} {top[key]}")
    return ", ".join(parts) if parts else None


def trace_metadata(top: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in top.items():
        if key in ("traceEvents", "deviceProperties", "computeProperties"):
            continue
        text = json.dumps(value, default=str)
        out[key] = value if len(text) <= 4096 else text[:4096] + "…"
    return out

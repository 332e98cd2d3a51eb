"""``tracekit mcp``: the tools without the SDK, then the server driven by the SDK's own clients.

The stdio test starts ``tracekit mcp`` as a subprocess and talks to it with the SDK's stdio
client, as an assistant does: initialize, list the tools, call each one on the sample traces,
and see a path outside the roots and a file that is not a trace refused.  The deadline and the
progress notifications are checked in process with a tool that never finishes by itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit import pipeline
from tracekit.errors import TraceNotFoundError, UsageError
from tracekit.mcp.access import Limits, Roots
from tracekit.mcp.tables import TABLES, check_sql
from tracekit.mcp.tools import Toolbox, _capped

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
STALL = "synthetic/dataloader_stall.kineto.json"
FIXED = "synthetic/dataloader_fixed.kineto.json"
HAS_SDK = __import__("importlib").util.find_spec("mcp") is not None
needs_sdk = pytest.mark.skipif(not HAS_SDK, reason="the mcp SDK is not installed (pip install 'tracekit-gpu[mcp]')")


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return Toolbox(Roots([SAMPLES]), Limits(max_rows=50))


# --------------------------------------------------------------------------- roots


def test_roots_refuse_paths_outside_and_links_out(tmp_path: Path) -> None:
    inside = tmp_path / "inside"
    inside.mkdir()
    outside = tmp_path / "outside.kineto.json"
    shutil.copy(SAMPLES / STALL, outside)
    (inside / "link.kineto.json").symlink_to(outside)
    roots = Roots([inside])
    for path in (str(outside), "../outside.kineto.json", "link.kineto.json"):
        with pytest.raises(UsageError, match="outside the folders this server may read") as info:
            roots.resolve(path)
        assert str(inside) in info.value.render()
    # a folder inside the root whose trace file links out is refused as a whole
    with pytest.raises(UsageError, match=r"link\.kineto\.json are links to files outside"):
        roots.resolve(".")
    with pytest.raises(TraceNotFoundError):
        roots.resolve("missing.json")
    (inside / "link.kineto.json").unlink()
    shutil.copy(SAMPLES / STALL, inside / "own.kineto.json")
    assert roots.resolve("own.kineto.json") == (inside / "own.kineto.json").resolve()
    with pytest.raises(UsageError, match="a root must be an existing folder"):
        Roots([tmp_path / "nope"])


def test_limits_cap_rows() -> None:
    limits = Limits(max_rows=10)
    assert (limits.rows(None), limits.rows(3), limits.rows(99)) == (10, 3, 10)
    with pytest.raises(UsageError, match="at least 1"):
        limits.rows(0)


# --------------------------------------------------------------------------- the tools, headless


def test_analyze_passes_the_json_contract_through(box: Toolbox) -> None:
    from tracekit.report import document

    doc = box.analyze(STALL)
    expected = document(pipeline.run(pipeline.load(SAMPLES / STALL)))
    assert doc == json.loads(json.dumps(expected))  # every key of the contract, nothing cut at 50 rows
    assert doc["summary"]["top_finding"] == "data_loading"
    job = box.analyze("captures/ddp_gloo")
    assert job["job"]["ranks"] == [0, 1]
    assert len(job["ranks"]) == 2


def test_capped_cuts_long_lists_and_says_so() -> None:
    doc = {"steps": list(range(5)), "job": {"per_rank": [{"x": float("nan")}] * 2}, "n": float("inf")}
    out = _capped(doc, 3)
    assert out["steps"] == [0, 1, 2]
    assert out["truncated"] == {"steps": 5}
    assert out["job"]["per_rank"] == [{"x": None}, {"x": None}]
    assert out["n"] is None
    assert "truncated" not in _capped({"a": [1]}, 3)


def test_diff_gives_the_diff_document(box: Toolbox) -> None:
    doc = box.diff(STALL, FIXED)
    assert doc["schema"] == "tracekit.diff/1"
    assert doc["verdict"] == "faster"
    assert doc["step_ms"]["delta_pct"] < -30
    with pytest.raises(UsageError, match="not folders"):
        box.diff("captures/ddp_gloo", FIXED)


def test_query_rows_cap_and_tables(box: Toolbox) -> None:
    out = box.query(STALL, "SELECT name, count(*) AS n FROM kernels GROUP BY name ORDER BY n DESC, name")
    tables = pipeline.load_trace(SAMPLES / STALL).tables
    kernels = tables.events.filter(pl.col("kind") == "kernel")
    assert sum(r["n"] for r in out["rows"]) == kernels.height
    assert [c["name"] for c in out["columns"]] == ["name", "n"]
    assert "truncated" not in out
    capped = box.query(STALL, "SELECT event_id FROM events ORDER BY event_id", limit=7)
    assert [r["event_id"] for r in capped["rows"]] == list(range(7))
    assert "more than 7 rows" in capped["truncated"]["rows"]
    assert len(box.query(STALL, "SELECT * FROM events")["rows"]) == 50  # never above the server's cap
    for table in TABLES:
        box.query(STALL, f"SELECT count(*) AS n FROM {table}")
    steps = box.query("captures/ddp_gloo", "SELECT DISTINCT rank FROM steps ORDER BY rank")
    assert [r["rank"] for r in steps["rows"]] == [0, 1]  # a job's ranks together


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM read_csv('/etc/hostname')", "never files"),
        ("select * from READ_PARQUET('x.parquet')", "never files"),
        ('SELECT * FROM "read_ipc"(\'x\')', "never files"),
        ("DROP TABLE events", "one SELECT"),
        ("CREATE TABLE x AS SELECT * FROM events", "one SELECT"),
        ("-- SELECT\nSHOW TABLES", "one SELECT"),
        ("   ", "empty query"),
    ],
)
def test_query_refuses_writes_and_files(sql: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_sql(sql)


def test_query_errors_are_usage_errors(box: Toolbox) -> None:
    with pytest.raises(UsageError, match="the query failed"):
        box.query(STALL, "SELECT nope FROM events")
    with pytest.raises(UsageError, match="the query failed"):
        box.query(STALL, "SELECT * FROM passwords")
    # a thread_name column is not a file function (the word boundary)
    assert check_sql("SELECT thread_name FROM threads") == "SELECT thread_name FROM threads"


def test_list_traces_formats_and_jobs(box: Toolbox) -> None:
    out = box.list_traces("synthetic")
    by_path = {t["path"]: t for t in out["traces"]}
    assert by_path["dataloader_stall.kineto.json"]["format"] == "kineto"
    assert by_path["healthy.nsys.sqlite"]["format"] == "nsys"
    multi = [j for j in out["jobs"] if j["name"].startswith("multi_rank.rank*")]
    assert sorted(j["name"] for j in multi) == ["multi_rank.rank*.kineto.json", "multi_rank.rank*.nsys.sqlite"]
    assert all(j["ranks"] == [0, 1] for j in multi)
    captures = box.list_traces("captures")
    assert any(j["capture"] and j["name"] == "ddp_gloo" and j["ranks"] == [0, 1] for j in captures["jobs"])
    small = Toolbox(box.roots, Limits(max_rows=2)).list_traces(".")
    assert len(small["traces"]) == 2
    assert small["truncated"]["traces"] > 2
    with pytest.raises(UsageError, match="not a folder"):
        box.list_traces(STALL)


def test_timeline_of_one_step(box: Toolbox) -> None:
    out = box.timeline(STALL)
    assert out["chosen"].startswith("representative")
    assert out["complete"]
    gaps = out["idle_gaps"]
    assert gaps["by_cause_ms"]["data_loading"] == pytest.approx(40.0, abs=0.01)
    assert gaps["gaps_total"] == len(gaps["gaps"])
    path = out["critical_path"]
    assert path["path_ms"] == pytest.approx(sum(path["breakdown_ms"].values()), abs=1e-3)
    assert [r["start_ms"] for r in path["runs"]] == sorted(r["start_ms"] for r in path["runs"])
    assert any(r["cause"] == "data_loading" and r["dur_ms"] == pytest.approx(40.0, abs=0.01) for r in path["runs"])
    one = Toolbox(box.roots, Limits(max_rows=1)).timeline(STALL, step=3)
    assert one["step"] == 3
    assert len(one["critical_path"]["runs"]) == 1
    assert one["chosen"] == "given"
    assert one["critical_path"]["runs"][0]["dur_ms"] == max(r["dur_ms"] for r in path["runs"])  # the longest kept
    with pytest.raises(UsageError, match="no step 99"):
        box.timeline(STALL, step=99)
    assert box.timeline("captures/ddp_gloo", rank=1)["rank"] == 1
    with pytest.raises(UsageError, match="no rank 5"):
        box.timeline("captures/ddp_gloo", rank=5)


def test_analyze_description_names_the_plan_only_when_the_contract_has_one(box: Toolbox) -> None:
    pytest.importorskip("mcp")
    import anyio

    from tracekit.mcp.server import TracekitServer

    tools = {t.name: t for t in anyio.run(TracekitServer(box).mcp.list_tools)}
    has_plan = "plan" in box.analyze(STALL)
    assert ("plan" in (tools["analyze"].description or "")) == has_plan


# --------------------------------------------------------------------------- the SDK missing


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tracekit.cli import main

    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp raises ImportError
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    assert main(["mcp", "--root", str(SAMPLES)]) == 4
    err = capsys.readouterr().err
    assert err.startswith("tracekit: missing dependency: the MCP server needs the mcp package")
    assert "pip install 'tracekit-gpu[mcp]'" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- the real client


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@needs_sdk
def test_stdio_client_drives_every_tool(tmp_path: Path) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    bad = tmp_path / "roots" / "notes.json"
    bad.parent.mkdir()
    bad.write_bytes(b"\x00\x01 not json")
    exe = Path(sys.executable).with_name("tracekit")
    params = StdioServerParameters(
        command=str(exe) if exe.exists() else sys.executable,
        args=[*([] if exe.exists() else ["-m", "tracekit"]), "mcp", "--root", str(SAMPLES), "--root", str(bad.parent),
              "--max-rows", "40"],
        cwd=str(REPO), env={"TRACEKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": os.environ.get("PATH", "")},
    )

    async def session() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            init = await s.initialize()
            seen["server"] = init.server_info.name
            seen["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
            calls = {
                "list_traces": {"folder": "synthetic"},
                "analyze": {"path": STALL},
                "diff": {"before": STALL, "after": FIXED},
                "query": {"path": STALL, "sql": "SELECT count(*) AS n FROM kernels"},
                "timeline": {"path": "captures/ddp_gloo", "rank": 1},
                "outside": {"path": "/etc/hostname"},
                "bad": {"path": str(bad)},
            }
            for label, args in calls.items():
                name = "analyze" if label in ("outside", "bad") else label
                result = await s.call_tool(name, args)
                seen[label] = (result.is_error, result.structured_content, _text(result))
        return seen

    seen = anyio.run(session)
    assert seen["server"] == "tracekit"
    assert seen["tools"] == ["analyze", "diff", "list_traces", "query", "timeline"]
    for label in ("list_traces", "analyze", "diff", "query", "timeline"):
        is_error, structured, text = seen[label]
        assert not is_error, text
        assert structured == json.loads(text)  # the same JSON, structured and as text
    assert seen["analyze"][1]["schema"] == "tracekit.report/1"
    assert seen["analyze"][1]["summary"]["top_finding"] == "data_loading"
    assert seen["diff"][1]["verdict"] == "faster"
    assert seen["query"][1]["rows"][0]["n"] > 0
    assert seen["timeline"][1]["rank"] == 1
    assert seen["timeline"][1]["critical_path"]["runs"]
    assert any(t["path"] == "healthy.nsys.sqlite" for t in seen["list_traces"][1]["traces"])
    is_error, _, text = seen["outside"]
    assert is_error
    assert "tracekit: usage: /etc/hostname: outside the folders this server may read" in text
    is_error, _, text = seen["bad"]
    assert is_error
    assert f"tracekit: not a trace: {bad}: unrecognised data" in text
    assert "Traceback" not in text


# --------------------------------------------------------------------------- deadline and progress


@needs_sdk
def test_slow_call_is_stopped_at_the_deadline_with_progress(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio
    from mcp import Client

    from tracekit.mcp.server import TracekitServer

    stopped = threading.Event()

    def endless(self: Toolbox, path: str, progress: Any = None) -> dict[str, Any]:
        try:
            while True:  # reports progress until the server stops it
                progress.phase("reading")
                time.sleep(0.01)
        except Exception:
            stopped.set()
            raise

    slow = Toolbox(box.roots, Limits(max_seconds=1.2))
    monkeypatch.setattr(Toolbox, "analyze", endless)
    server = TracekitServer(slow)
    heard: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    async def call() -> Any:
        async with Client(server.mcp) as client:
            return await client.call_tool("analyze", {"path": STALL}, progress_callback=on_progress)

    started = time.monotonic()
    result = anyio.run(call)
    assert result.is_error
    assert "ran past the per-call limit of 1.2 s" in _text(result)
    assert time.monotonic() - started < 10
    assert stopped.wait(5), "the worker thread was not stopped"
    assert heard
    assert all(m is not None and "reading" in m for m in heard)

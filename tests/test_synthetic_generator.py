"""The synthetic-trace generator (tests/synth, CLI scripts/synthetic.py): determinism, format shape, ground truth.

These tests check the generator and its files only; tracekit's parsers and analyses are tested
elsewhere against these files.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import synth  # noqa: E402  (tests/synth, the generator)
import synthetic  # noqa: E402  (scripts/synthetic.py, its command line)

SAMPLES = REPO / "sample_traces" / "synthetic"
MS = 1_000_000

# Column lists of a real nsys 2024.5 export (schema 3.13.2), typed out independently of the
# generator so a drift in either shows up here.
REAL_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
        "demangledName", "shortName", "mangledName", "launchType", "cacheConfig", "registersPerThread", "gridX",
        "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
        "localMemoryPerThread", "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId",
        "sharedMemoryLimitConfig",
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        "start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid", "bytes",
        "copyKind", "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId", "srcContextId", "dstDeviceId",
        "dstContextId", "migrationCause", "graphNodeId", "virtualAddress",
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        "start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId",
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        "start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
        "syncType", "eventId",
    ],
    "NVTX_EVENTS": [
        "start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid", "textId",
        "domainId", "uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value", "floatValue",
        "jsonTextId", "jsonText",
    ],
    "StringIds": ["id", "value"],
    "ThreadNames": ["nameId", "priority", "globalTid"],
    "META_DATA_EXPORT": ["name", "value"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs", "utcTime", "localTime"],
    "ENUM_CUDA_MEMCPY_OPER": ["id", "name", "label"],
}


@pytest.fixture(scope="module")
def scenarios() -> dict[str, synth.Scenario]:
    return {sc.stem: sc for sc in synth.build_all()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synthetic")
    synth.write_all(out)
    return out


def _kineto(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _ns(us: float) -> int:
    return round(us * 1000)


# -- determinism --------------------------------------------------------------------------------


def test_generation_is_byte_identical(generated: Path, tmp_path: Path) -> None:
    again = synth.write_all(tmp_path)
    assert again, "nothing written"
    for path in again:
        assert path.read_bytes() == (generated / path.name).read_bytes(), path.name


def test_build_is_pure() -> None:
    a, b = synth.build("host_sync"), synth.build("host_sync")
    assert synth.kineto_json(a) == synth.kineto_json(b)
    assert synth.expected_json(a) == synth.expected_json(b)


def test_every_scenario_has_three_files(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    names = sorted(p.name for p in generated.iterdir())
    want = sorted(f"{stem}.{kind}" for stem in scenarios for kind in ("kineto.json", "nsys.sqlite", "expected.json"))
    assert names == want
    assert set(scenarios) == {*(n for n in synth.SCENARIO_NAMES if n != "multi_rank"),
                              "multi_rank.rank0", "multi_rank.rank1"}


def test_committed_samples_are_current(generated: Path) -> None:
    """sample_traces/synthetic must be what the generator writes today (SQLite compared by content)."""
    if not SAMPLES.is_dir():
        pytest.skip("sample_traces/synthetic not generated in this checkout")
    for fresh in sorted(generated.iterdir()):
        committed = SAMPLES / fresh.name
        assert committed.is_file(), f"missing {committed}; run python scripts/synthetic.py"
        if fresh.suffix == ".sqlite":
            assert _dump_sqlite(committed) == _dump_sqlite(fresh), fresh.name
        else:
            assert committed.read_bytes() == fresh.read_bytes(), f"{fresh.name} is stale; run scripts/synthetic.py"


def _dump_sqlite(path: Path) -> list[Any]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: list[Any] = list(con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name"))
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            out.append((table, list(con.execute(f"SELECT * FROM {table}"))))
        return out
    finally:
        con.close()


def test_expected_file_is_the_truth(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        assert json.loads((generated / f"{stem}.expected.json").read_text(encoding="utf-8")) == sc.truth


# -- Kineto files -------------------------------------------------------------------------------


def test_kineto_top_level_shape(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        path = generated / f"{stem}.kineto.json"
        assert path.stat().st_size < 900_000, f"{path.name} is too big for the repository"
        doc = _kineto(path)
        assert list(doc)[:2] == ["schemaVersion", "deviceProperties"]
        assert list(doc)[-2:] == ["traceEvents", "traceName"]
        assert doc["schemaVersion"] == 1
        assert doc["displayTimeUnit"] == "ms"
        assert doc["baseTimeNanoseconds"] == synth.SESSION_EPOCH_NS
        props = doc["deviceProperties"]
        assert len(props) == sc.n_devices
        assert all(p["name"].startswith("NVIDIA H100") and p["computeMajor"] == 9 and p["numSms"] == 132
                   and p["totalGlobalMem"] > 79 * 2**30 for p in props)
        info = doc["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("nccl", sc.rank, sc.world_size)


def test_kineto_counts_match_truth(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        events = _kineto(generated / f"{stem}.kineto.json")["traceEvents"]
        counts = Counter(f"{e['ph']}/{e['cat']}" if "cat" in e else e["ph"] for e in events)
        truth = sc.truth
        assert dict(counts) == truth["kineto"]["event_counts"], stem
        assert counts["X/kernel"] == truth["kernels"]["count"]
        assert counts.get("X/gpu_memcpy", 0) == truth["memcpy"]["count"]
        assert counts.get("X/gpu_memset", 0) == truth["memset"]["count"]
        assert counts.get("X/cuda_sync", 0) == truth["sync"]["count"]
        assert counts["X/cuda_runtime"] == truth["runtime"]["count"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        assert sum(_ns(e["dur"]) for e in kernels) == truth["kernels"]["time_sum_ns"]
        copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
        assert sum(e["args"]["bytes"] for e in copies) == truth["memcpy"]["bytes"]


def test_kineto_timestamps_are_microseconds_with_three_decimals(generated: Path) -> None:
    text = (generated / "dataloader_stall.kineto.json").read_text(encoding="utf-8")
    stamps = re.findall(r'"(?:ts|dur)":([0-9.]+)', text)
    assert stamps
    assert all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps)
    assert any(not s.endswith(".000") for s in stamps), "some times must carry a nanosecond fraction"


def test_kineto_event_shapes(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        events = _kineto(generated / f"{stem}.kineto.json")["traceEvents"]
        gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
        correlations = set()
        for e in events:
            cat = e.get("cat")
            if cat in gpu_cats:
                assert (e["pid"], e["tid"]) == (sc.device, synth.STREAM)
                assert {"External id", "correlation", "device", "stream"} <= set(e["args"])
                correlations.add(e["args"]["correlation"])
            if cat == "kernel":
                args = e["args"]
                assert len(args["grid"]) == len(args["block"]) == 3
                assert {"registers per thread", "shared memory", "est. achieved occupancy %"} <= set(args)
            if cat == "gpu_memcpy":
                assert re.fullmatch(r"Memcpy (HtoD|DtoH) \((Pageable|Pinned|Device) -> (Pageable|Pinned|Device)\)",
                                    e["name"])
            if cat == "cuda_runtime":
                assert e["pid"] == e["tid"] == sc.pid
                assert "correlation" in e["args"]
            if cat == "cpu_op":
                assert "External id" in e["args"]
            if cat == "cuda_sync":
                assert e["args"]["cuda_sync_kind"] == e["name"]
                assert e["name"] in ("Stream Sync", "Context Sync", "Event Sync")
                assert {"stream", "device", "correlation"} <= set(e["args"])
                if e["name"] == "Event Sync":
                    assert {"wait_on_stream", "wait_on_cuda_event_record_corr_id"} <= set(e["args"])
        # Each GPU activity and sync row has one ac2g flow: 's' at the runtime call, 'f' on the GPU.
        starts = {e["id"]: e for e in events if e["ph"] == "s"}
        finishes = {e["id"]: e for e in events if e["ph"] == "f"}
        assert set(starts) == set(finishes)
        assert correlations <= set(finishes)
        runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        for cid, f in finishes.items():
            assert f["bp"] == "e"
            assert f["pid"] == sc.device
            assert starts[cid]["ts"] == runtime[cid]["ts"]
            assert (starts[cid]["pid"], starts[cid]["tid"]) == (sc.pid, sc.pid)
        names = {e["name"] for e in events if e["ph"] == "M"}
        assert {"process_name", "thread_name"} <= names


def test_kineto_annotations(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        events = _kineto(generated / f"{stem}.kineto.json")["traceEvents"]
        steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        assert [e["cat"] for e in steps] == ["user_annotation"] * len(steps)
        assert [int(e["name"].split("#")[1]) for e in steps] == sc.truth["steps"]["numbers"]
        assert [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in steps] == [
            (r["start_ns"], r["end_ns"]) for r in sc.truth["per_step"]]
        names = {e["name"] for e in events if e.get("cat") == "user_annotation"}
        if sc.name != "launch_bound":
            assert "Optimizer.step#SGD.step" in names
    stall = _kineto(generated / "dataloader_stall.kineto.json")["traceEvents"]
    loads = [e for e in stall if e["name"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    assert [_ns(e["dur"]) for e in loads] == [40 * MS] * 8


def test_kineto_and_nsys_agree_on_gpu_times(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem in scenarios:
        events = _kineto(generated / f"{stem}.kineto.json")["traceEvents"]
        k = sorted((e["args"]["correlation"], _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
                   for e in events if e.get("cat") == "kernel")
        con = sqlite3.connect(f"file:{generated / f'{stem}.nsys.sqlite'}?mode=ro", uri=True)
        try:
            n = sorted(con.execute("SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL"))
        finally:
            con.close()
        assert k == n, stem


# -- Nsight files -------------------------------------------------------------------------------


def test_nsys_tables_and_row_counts(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    core = {"StringIds", "ThreadNames", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
            "ENUM_CUPTI_SYNC_TYPE", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME"}
    for stem, sc in scenarios.items():
        con = sqlite3.connect(f"file:{generated / f'{stem}.nsys.sqlite'}?mode=ro", uri=True)
        try:
            assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
            tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert core <= tables, stem
            counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
            assert counts == sc.truth["nsys"]["row_counts"], stem
            assert all(n > 0 for n in counts.values()), "event tables are created lazily, never empty"
            truth = sc.truth
            assert counts["CUPTI_ACTIVITY_KIND_KERNEL"] == truth["kernels"]["count"]
            assert counts.get("CUPTI_ACTIVITY_KIND_MEMCPY", 0) == truth["memcpy"]["count"]
            assert counts.get("CUPTI_ACTIVITY_KIND_MEMSET", 0) == truth["memset"]["count"]
            assert counts.get("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", 0) == truth["sync"]["count"]
            assert counts["CUPTI_ACTIVITY_KIND_RUNTIME"] == truth["runtime"]["count"]
            for table, cols in REAL_COLUMNS.items():
                if table in tables:
                    assert [r[1] for r in con.execute(f"PRAGMA table_info({table})")] == cols, table
            meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
            assert meta["EXPORT_SCHEMA_VERSION"] == "3.13.2"
            assert con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0] == (
                synth.SESSION_EPOCH_NS)
            gpu = con.execute("SELECT name, computeMajor, smCount FROM TARGET_INFO_GPU").fetchall()
            assert len(gpu) == sc.n_devices
            assert all(g[0].startswith("NVIDIA H100") and g[1:] == (9, 132) for g in gpu)
        finally:
            con.close()


def test_nsys_ids_names_and_nvtx(generated: Path, scenarios: dict[str, synth.Scenario]) -> None:
    for stem, sc in scenarios.items():
        con = sqlite3.connect(f"file:{generated / f'{stem}.nsys.sqlite'}?mode=ro", uri=True)
        try:
            names = dict(con.execute("SELECT id, value FROM StringIds"))
            runtime = con.execute("SELECT nameId, globalTid, eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
            assert all(re.fullmatch(r"cuda[A-Za-z]+_v\d+", names[n]) for n, _g, _c in runtime)
            assert {(g >> 24) & 0xFFFFFF for _n, g, _c in runtime} == {sc.pid}
            assert {g & 0xFFFFFF for _n, g, _c in runtime} == {sc.tid}
            assert {g >> 48 for _n, g, _c in runtime} == {0}, "hw and vm bits are 0"
            assert {c for _n, _g, c in runtime} == {0}
            pids = {g >> 24 for (g,) in con.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")}
            assert pids == {sc.pid}
            rows = con.execute(
                "SELECT eventType, start, end, text, textId, domainId FROM NVTX_EVENTS ORDER BY start, end DESC"
            ).fetchall()
            domain = [r for r in rows if r[0] == 75]
            assert len(domain) == 1
            assert domain[0][2] is None
            assert domain[0][3]
            ranges = [r for r in rows if r[0] != 75]
            assert {r[0] for r in ranges} == {59}
            assert all(r[5] == domain[0][5] and r[1] > domain[0][1] for r in ranges)
            texts = [r[3] if r[3] is not None else names[r[4]] for r in ranges]
            steps = [(r[1], r[2]) for r, t in zip(ranges, texts, strict=True) if t.startswith("step ")]
            assert steps == [(r["start_ns"], r["end_ns"]) for r in sc.truth["per_step"]]
            assert {"forward", "backward"} <= set(texts)
            assert ("data loading" in texts) == (sc.name in ("healthy", "dataloader_stall", "dataloader_fixed"))
            syncs = con.execute(
                "SELECT y.syncType, y.streamId, s.value FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = y.correlationId "
                "JOIN StringIds s ON s.id = r.nameId").fetchall()
            assert len(syncs) == sc.truth["sync"]["count"]
            for sync_type, stream, api in syncs:
                want = {"cudaStreamSynchronize_v3020": (3, 7), "cudaDeviceSynchronize_v3020": (4, 4294967295),
                        "cudaEventSynchronize_v3020": (1, 4294967295)}[api]
                assert (sync_type, stream) == want
        finally:
            con.close()


def test_nsys_pageable_copy_rows(generated: Path) -> None:
    con = sqlite3.connect(f"file:{generated / 'pageable_memcpy.nsys.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT end - start, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                           "WHERE copyKind = 1 AND srcKind = 0 AND dstKind = 2").fetchall()
    finally:
        con.close()
    assert rows == [(25 * MS, 512 * 2**20)] * 8


# -- ground truth: the obvious numbers ------------------------------------------------------------


def _per_step(sc: synth.Scenario, key: str, cause: str) -> list[int]:
    return [r[key].get(cause, 0) for r in sc.truth["per_step"]]


def test_healthy_truth(scenarios: dict[str, synth.Scenario]) -> None:
    t = scenarios["healthy"].truth
    assert t["expected_top_cause"] is None
    assert t["steps"]["count"] == 8
    assert t["totals"]["gpu_busy_fraction"] >= 0.97
    assert all(r["gpu_busy_ns"] == r["duration_ns"] for r in t["per_step"][1:])


@pytest.mark.parametrize(("name", "ms"), [("dataloader_stall", 40), ("dataloader_fixed", 2)])
def test_dataloader_truth(scenarios: dict[str, synth.Scenario], name: str, ms: int) -> None:
    sc = scenarios[name]
    assert sc.truth["expected_top_cause"] == "data_loading"
    assert sc.truth["steps"]["count"] == 8
    assert _per_step(sc, "idle_by_cause", "data_loading") == [ms * MS] * 8
    assert [r["kernel_busy_ns"] for r in sc.truth["per_step"]] == [60 * MS] * 8


def test_host_sync_truth(scenarios: dict[str, synth.Scenario]) -> None:
    sc = scenarios["host_sync"]
    assert sc.truth["expected_top_cause"] == "host_device_sync"
    idle = _per_step(sc, "idle_by_cause", "host_device_sync")
    assert idle == [sc.truth["headline"]["host_device_sync_idle_ns_per_step"]] * 8
    assert all(15 * MS <= ns < 15 * MS + 10_000 for ns in idle)
    assert sc.truth["sync"]["by_kind"]["Stream Sync"] == 8
    fixed = scenarios["host_sync_fixed"]
    assert fixed.truth["expected_top_cause"] is None
    assert _per_step(fixed, "idle_by_cause", "host_device_sync") == [0] * 8
    assert "Stream Sync" not in fixed.truth["sync"]["by_kind"]


def test_launch_bound_truth(scenarios: dict[str, synth.Scenario]) -> None:
    sc = scenarios["launch_bound"]
    t = sc.truth
    assert t["expected_top_cause"] == "launch_bound"
    assert t["totals"]["gpu_busy_fraction"] == 0.2
    steps = t["steps"]["count"]
    assert steps >= 2
    assert t["kernels"]["count"] == 400 * steps
    assert {o.dur for o in sc.gpu_ops} == {2_000}
    assert [r["duration_ns"] for r in t["per_step"]] == [4 * MS] * steps
    assert _per_step(sc, "idle_by_cause", "launch_bound") == [3_200_000] * steps


def test_pageable_truth(scenarios: dict[str, synth.Scenario]) -> None:
    t = scenarios["pageable_memcpy"].truth
    assert t["expected_top_cause"] == "pageable_memcpy"
    copies = t["memcpy"]["by_name"]["Memcpy HtoD (Pageable -> Device)"]
    assert copies == {"count": 8, "bytes": 8 * 512 * 2**20, "time_sum_ns": 8 * 25 * MS}
    assert all(25 * MS < r["compute_idle_by_cause"]["pageable_memcpy"] < 25 * MS + 50_000 for r in t["per_step"])


def test_multi_rank_truth(scenarios: dict[str, synth.Scenario], generated: Path) -> None:
    r0, r1 = scenarios["multi_rank.rank0"], scenarios["multi_rank.rank1"]
    assert (r0.world_size, r1.world_size, r0.rank, r1.rank) == (2, 2, 0, 1)
    assert r0.truth["headline"]["straggler_rank"] == r1.truth["headline"]["straggler_rank"] == 1

    def allreduce(stem: str) -> list[tuple[int, int]]:
        events = _kineto(generated / f"{stem}.kineto.json")["traceEvents"]
        return [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events
                if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce_Sum_f32_RING_LL")]

    a0, a1 = allreduce("multi_rank.rank0"), allreduce("multi_rank.rank1")
    assert len(a0) == len(a1) == 8
    assert [e - s for s, e in a0] == [8 * MS] * 8
    assert [e - s for s, e in a1] == [3 * MS] * 8
    assert [e for _s, e in a0] == [e for _s, e in a1]
    assert [s1 - s0 for (s0, _), (s1, _) in zip(a0, a1, strict=True)] == [5 * MS] * 8
    assert r0.truth["per_step"] == r1.truth["per_step"]


def test_causes_tile_idle_time(scenarios: dict[str, synth.Scenario]) -> None:
    for sc in scenarios.values():
        for r in sc.truth["per_step"]:
            assert sum(r["idle_by_cause"].values()) == r["gpu_idle_ns"] == r["duration_ns"] - r["gpu_busy_ns"]
            assert sum(r["compute_idle_by_cause"].values()) == r["compute_idle_ns"]
            assert set(r["compute_idle_by_cause"]) <= set(synth.CAUSES)


def test_diff_pairs_share_kernels(scenarios: dict[str, synth.Scenario]) -> None:
    for before, after in synth.DIFF_PAIRS.values():
        b, a = scenarios[before].truth, scenarios[after].truth
        assert b["kernels"] == a["kernels"]
        assert a["totals"]["gpu_idle_ns"] < b["totals"]["gpu_idle_ns"]


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        synth.build("nope")
    with pytest.raises(ValueError, match="single rank"):
        synth.build("healthy", rank=1)


def test_cli_check_reports_stale_files(generated: Path, tmp_path: Path) -> None:
    shutil.copytree(generated, tmp_path, dirs_exist_ok=True)
    assert synthetic.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "healthy.expected.json").write_text("{}\n", encoding="utf-8")
    assert synthetic.main(["--check", "--out", str(tmp_path)]) == 1

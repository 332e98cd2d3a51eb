"""`tracekit batch`: discovery, one row per file, error rows, job grouping, incremental reruns,
atomic writes, interruption, the process pool, the Ray engine and the real archive."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, shared_trace

from tracekit.batch import BATCH_TABLES, BatchProgress, run_batch
from tracekit.batch import store as batch_store
from tracekit.batch.discover import discover
from tracekit.batch.engines import import_ray
from tracekit.cli import main
from tracekit.errors import MissingDependencyError, TraceNotFoundError

SYNTH = SAMPLE_TRACES / "synthetic"
#: columns that legitimately differ between two runs of the same inputs
TIMING = ("seconds",)


def _archive(root: Path) -> Path:
    """A small mixed archive: a 2-rank job (Kineto), a 2-rank job (Nsight), singles, a duplicate,
    a corrupt file, a JSON file that is not a trace and a README."""
    a = root / "archive"
    (a / "job1").mkdir(parents=True)
    (a / "job2").mkdir()
    (a / "misc" / "deeper").mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(SYNTH / f"multi_rank.rank{r}.kineto.json", a / "job1" / f"train_rank{r}.json")
        shutil.copy(SYNTH / f"multi_rank.rank{r}.nsys.sqlite", a / "job2" / f"rank{r}.nsys.sqlite")
    shutil.copy(SYNTH / "healthy.kineto.json", a / "misc" / "healthy.json")
    shutil.copy(SYNTH / "healthy.kineto.json", a / "misc" / "deeper" / "healthy_copy.json")
    shutil.copy(SYNTH / "dataloader_stall.nsys.sqlite", a / "misc" / "stall.sqlite")
    (a / "misc" / "corrupt.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (a / "misc" / "expected.json").write_text(json.dumps({"not": "a trace"}))
    (a / "README.md").write_text("notes\n")
    return a


def _equal(x: pl.DataFrame, y: pl.DataFrame) -> bool:
    drop = [c for c in TIMING if c in x.columns]
    return x.drop(drop).equals(y.drop(drop))


def test_discover_folders_globs_and_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _archive(tmp_path)
    found = discover([str(a)])
    names = sorted(Path(f).name for f in found.files)
    assert names == ["corrupt.json.gz", "expected.json", "healthy.json", "healthy_copy.json", "rank0.nsys.sqlite",
                     "rank1.nsys.sqlite", "stall.sqlite", "train_rank0.json", "train_rank1.json"]
    assert found.ignored == 1  # the README
    assert found.root == str(a)
    monkeypatch.chdir(tmp_path)
    assert [Path(f).name for f in discover(["archive/job*/rank*.sqlite"]).files] == ["rank0.nsys.sqlite", "rank1.nsys.sqlite"]
    assert len(discover(["archive/**/*.json"]).files) == 5
    manifest = tmp_path / "runs.txt"
    manifest.write_text("# the Kineto job and one single\narchive/job1\n\narchive/misc/stall.sqlite\n")
    assert sorted(Path(f).name for f in discover([str(manifest)]).files) == ["stall.sqlite", "train_rank0.json", "train_rank1.json"]
    other = tmp_path / "list.cfg"
    other.write_text(str(a / "job2" / "rank0.nsys.sqlite") + "\n")
    assert [Path(f).name for f in discover(["@" + str(other)]).files] == ["rank0.nsys.sqlite"]
    with pytest.raises(TraceNotFoundError):
        discover(["archive/nothing-here"])
    with pytest.raises(TraceNotFoundError, match="matches no file"):
        discover(["archive/*.parquet"])


def test_batch_tables_one_row_per_file_errors_and_jobs(tmp_path: Path) -> None:
    a = _archive(tmp_path)
    out = tmp_path / "out"
    seen: list[BatchProgress] = []
    res = run_batch([str(a)], out, workers=1, progress=seen.append)
    assert res.files == 9
    assert res.duplicates == 1
    assert res.analysed == 8
    assert res.reused == 0
    assert seen[0].done == 0
    assert seen[-1].done == 8
    assert seen[-1].total == 8
    assert seen[-1].failed == 2
    for schema in BATCH_TABLES:
        on_disk = pl.read_parquet(out / f"{schema.name}.parquet")
        assert on_disk.schema == schema.polars_schema, schema.name
        assert on_disk.equals(res.tables[schema.name])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left

    traces = res.tables["traces"].with_columns(pl.col("path").str.replace(f"^{a}/", ""))
    assert traces.height == 9
    assert traces["path"].n_unique() == 9
    errors = dict(traces.filter(pl.col("error").is_not_null()).select("path", "error_kind").rows())
    assert errors == {"misc/corrupt.json.gz": "TraceCorruptError", "misc/expected.json": "TraceFormatError"}
    assert traces.filter(pl.col("error").is_not_null())["job"].null_count() == 2
    ok = traces.filter(pl.col("error").is_null())
    assert ok["steps"].to_list() == [8] * 7
    dup = traces.filter(pl.col("path").str.contains("healthy"))
    assert dup["content_hash"].n_unique() == 1
    assert dup["job"].n_unique() == 2

    jobs = {r["job"]: r for r in res.tables["jobs"].iter_rows(named=True)}
    assert set(jobs) == {"job1/train_rank*.json", "job2/rank*.nsys.sqlite", "misc/healthy.json",
                         "misc/deeper/healthy_copy.json", "misc/stall.sqlite"}
    for name in ("job1/train_rank*.json", "job2/rank*.nsys.sqlite"):
        j = jobs[name]
        assert j["n_ranks"] == 2
        assert j["ranks"] == [0, 1]
        assert j["stragglers"] == [1]
        assert j["straggle_ms"] == pytest.approx(5.0, abs=1e-6)
        assert j["aligned_steps"] == 8
        assert j["rank_compute_ms"][1] - j["rank_compute_ms"][0] == pytest.approx(5.0, abs=1e-3)
        assert j["top_finding"] == "straggler"
    assert jobs["job1/train_rank*.json"]["world_size"] == 2
    assert jobs["misc/stall.sqlite"]["top_finding"] == "data_loading"
    assert jobs["misc/stall.sqlite"]["stragglers"] == []

    ranks = res.tables["ranks"].filter(pl.col("job") == "job1/train_rank*.json")
    assert ranks["straggler"].to_list() == [False, True]
    assert ranks["rank_source"].to_list() == ["distributed_info"] * 2
    findings = res.tables["findings"]
    job_findings = findings.filter(pl.col("scope") == "job")
    assert sorted(job_findings["job"].to_list()) == ["job1/train_rank*.json", "job2/rank*.nsys.sqlite"]
    assert json.loads(job_findings["evidence"][0])["straggler_ranks"] == [1]
    stall = findings.filter(pl.col("path").str.ends_with("stall.sqlite"))
    assert stall["kind"][0] == "data_loading"
    assert stall["position"][0] == 1
    steps = res.tables["steps"].filter(pl.col("job") == "job1/train_rank*.json", pl.col("rank") == 0)
    assert steps["wait_ns"].to_list() == [5_000_000] * 8
    colls = res.tables["collectives"]
    assert colls.filter(pl.col("job") == "job2/rank*.nsys.sqlite")["op"].unique().to_list() == ["allreduce"]


def test_rerun_is_incremental(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _archive(tmp_path)
    out = tmp_path / "out"
    first = run_batch([str(a)], out, workers=1)
    again = run_batch([str(a)], out, workers=1)
    assert again.analysed == 0
    assert again.reused == 8
    for name in first.tables:
        assert first.tables[name].equals(again.tables[name]), name  # restored results, timings included
    # a new file: only it is analysed, and it joins the tables
    shutil.copy(SYNTH / "host_sync.kineto.json", a / "misc" / "host_sync.json")
    third = run_batch([str(a)], out, workers=1)
    assert third.analysed == 1
    assert third.reused == 8
    assert third.tables["traces"].height == 10
    # changed bytes are analysed again; touching a file without changing it is not
    os.utime(a / "misc" / "stall.sqlite", ns=(1, 1))
    assert run_batch([str(a)], out, workers=1).analysed == 0
    shutil.copy(SYNTH / "launch_bound.kineto.json", a / "misc" / "healthy.json")
    fourth = run_batch([str(a)], out, workers=1)
    assert fourth.analysed == 1
    row = fourth.tables["traces"].filter(pl.col("path").str.ends_with("misc/healthy.json"))
    assert row["top_finding"][0] == "launch_bound"
    # another tracekit version analyses everything again
    monkeypatch.setattr(batch_store, "__version__", "0.0.0-other")
    assert run_batch([str(a)], out, workers=1).analysed == 10  # no duplicate left: 10 distinct files


def test_ops_table_rates_every_operator_shape_of_traces_with_shapes(tmp_path: Path) -> None:
    """ops.parquet: one row per trace, rank and operator shape, with the numbers the scenario
    fixes (4 steps, one 370 us bf16 GEMM and four 120 us elementwise ops per step on an H100);
    a trace without shapes has no rows, and a rerun restores the rows unchanged."""
    import efficiency_scenarios as sc

    from tracekit.analysis.efficiency import OP_EFFICIENCY
    from tracekit.batch.schemas import OPS

    a = tmp_path / "archive"
    a.mkdir()
    sc.write(a / "chain.json", sc.unfused_chain())
    sc.write(a / "bare.json", sc.unfused_chain(), shapes=False)
    out = tmp_path / "out"
    res = run_batch([str(a)], out, workers=1)
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops.schema == OPS.polars_schema
    assert ops.equals(res.tables["ops"])
    assert set(ops["path"].str.replace(f"^{a}/", "").to_list()) == {"chain.json"}
    bare = res.tables["traces"].filter(pl.col("path").str.ends_with("bare.json")).row(0, named=True)
    assert "record_shapes=True" in bare["mfu_note"]

    rows = {(r["name"], r["shape"]): r for r in ops.iter_rows(named=True)}
    assert set(rows) == {("aten::linear", "M=8192 N=4096 K=4096"), ("aten::mul", "[8192, 4096]"), ("aten::add", "[8192, 4096]")}
    gemm = rows["aten::linear", "M=8192 N=4096 K=4096"]
    flops = 2 * 8192 * 4096 * 4096
    assert (gemm["job"], gemm["rank"], gemm["file_rank"]) == ("chain.json", 0, 0)
    assert (gemm["gpu"], gemm["peak_model"], gemm["op_class"], gemm["dtype"]) == (sc.H100, "H100 SXM", "gemm", "bf16")
    assert (gemm["calls"], gemm["flops"], gemm["gpu_ns"]) == (4, 4 * flops, 4 * 370_000)
    assert gemm["bytes"] == 4 * 2 * (8192 * 4096 + 4096 * 4096 + 4096 + 8192 * 4096)
    assert gemm["tflops"] == pytest.approx(flops / 370e-6 / 1e12, rel=1e-12)
    assert gemm["bound"] == "compute"
    assert gemm["pct_of_attainable"] == pytest.approx(flops / 370e-6 / 989.4e12, rel=1e-9)
    assert gemm["ms_per_step"] == pytest.approx(0.370, rel=1e-12)
    assert gemm["share_of_gpu_time"] == pytest.approx(370 / (370 + 4 * 120), rel=1e-12)
    for name in ("aten::mul", "aten::add"):
        ew = rows[name, "[8192, 4096]"]
        assert (ew["calls"], ew["flops"], ew["gpu_ns"], ew["bound"]) == (8, 0, 8 * 120_000, "memory")
        assert ew["bytes"] == 8 * 3 * 8192 * 4096 * 2
        assert ew["gbps"] == pytest.approx(3 * 8192 * 4096 * 2 / 120e-6 / 1e9, rel=1e-12)
        assert ew["ms_per_step"] == pytest.approx(0.240, rel=1e-12)
    assert sum(ops["share_of_gpu_time"]) == pytest.approx(1.0)
    # the same numbers as tracekit export's efficiency table for the file
    export = tmp_path / "export"
    assert main(["export", str(a / "chain.json"), "--out", str(export), "--no-cache"]) == 0
    exported = pl.read_parquet(export / "efficiency.parquet").sort("name", "shape")
    assert ops.select(OP_EFFICIENCY.names).sort("name", "shape").equals(exported)

    again = run_batch([str(a)], out, workers=1)
    assert again.analysed == 0
    assert again.tables["ops"].equals(res.tables["ops"])
    # results written before the table existed are not restored without it
    (out / "ops.parquet").unlink()
    third = run_batch([str(a)], out, workers=1)
    assert third.analysed == 2
    assert any("lack ops.parquet" in n for n in third.notes)
    assert third.tables["ops"].equals(res.tables["ops"])


@pytest.mark.shared
def test_ops_table_on_the_tracelens_traces(tmp_path: Path) -> None:
    """The same Hugging Face models on an H100 and an MI300X: per model, the GEMM shapes and FLOPs
    of ops.parquet are the same on both GPUs; a trace without shapes has no rows."""
    h100, mi300 = shared_trace("tracelens/h100"), shared_trace("tracelens/mi300")
    bare = shared_trace("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz")
    res = run_batch([str(h100), str(mi300), str(bare)], tmp_path / "out", workers=1)
    ops, traces = res.tables["ops"], res.tables["traces"]
    assert traces.filter(pl.col("error").is_not_null()).height == 0
    assert ops.filter(pl.col("path") == str(bare)).height == 0
    assert set(ops["path"].unique().to_list()) == set(traces.filter(pl.col("mfu").is_not_null())["path"].to_list())
    for model in ("Qwen_Qwen1.5-0.5B-Chat__1016005", "gaunernst_bert-small-uncased__1016001", "Falconsai_nsfw_image_detection__1016002"):
        gemms = {}
        for gpu, folder in (("h100", h100), ("mi300", mi300)):
            rows = ops.filter(pl.col("path") == str(folder / f"{model}.json.gz"), pl.col("op_class") == "gemm")
            assert rows["peak_model"].unique().to_list() == [{"h100": "H100 SXM", "mi300": "Instinct MI300X"}[gpu]]
            gemms[gpu] = rows.group_by("shape").agg(pl.col("flops").sum()).sort("shape")
        assert gemms["h100"].height > 0
        assert gemms["h100"].equals(gemms["mi300"]), model


def test_previous_results_that_are_unreadable_are_ignored(tmp_path: Path) -> None:
    a = _archive(tmp_path)
    out = tmp_path / "out"
    run_batch([str(a / "job1")], out, workers=1)
    (out / "steps.parquet").write_bytes(b"PAR1 truncated")
    res = run_batch([str(a / "job1")], out, workers=1)
    assert res.analysed == 2
    assert any("could not be read" in n for n in res.notes)


def test_interrupted_batch_keeps_what_was_done(tmp_path: Path) -> None:
    a = _archive(tmp_path)
    out = tmp_path / "out"
    run_batch([str(a / "job1")], out, workers=1)
    before = (out / "jobs.parquet").read_bytes()

    def stop_after_two(p: BatchProgress) -> None:
        if p.done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch([str(a)], out, workers=1, progress=stop_after_two)
    assert (out / "jobs.parquet").read_bytes() != before  # the checkpoint replaced it whole
    traces = pl.read_parquet(out / "traces.parquet")  # readable: never half-written
    assert json.loads((out / "batch.json").read_text())["complete"] is False
    done = traces.height
    assert 2 <= done < 9
    resumed = run_batch([str(a)], out, workers=1)
    assert resumed.reused >= 2
    assert resumed.analysed + resumed.reused == 8


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(target)

    def broken(self: pl.DataFrame, path: Path, **_: object) -> None:
        Path(path).write_bytes(b"PAR1 half")
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        batch_store.write_parquet_atomic(pl.DataFrame({"a": [2]}), target)
    monkeypatch.undo()
    assert pl.read_parquet(target)["a"].to_list() == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_cli_summary_failures_and_fail_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _archive(tmp_path)
    assert main(["batch", str(a), "--out", str(tmp_path / "o1"), "-j", "1"]) == 0
    text = capsys.readouterr().out
    assert "9 files: 8 analysed, 0 reused, 1 duplicate · 5 jobs" in text
    assert "failed: 2 files (1 TraceCorruptError, 1 TraceFormatError)" in text
    assert "stragglers 1" in text
    assert "1 other file in the folders" in text
    code = main(["batch", str(a / "misc"), "--out", str(tmp_path / "o2"), "-j", "1", "--fail-fast"])
    captured = capsys.readouterr()
    assert code == 3
    assert "stopped by --fail-fast" in captured.err
    assert "stopped early" in captured.out
    assert pl.read_parquet(tmp_path / "o2" / "traces.parquet").filter(pl.col("error").is_not_null()).height == 1


def test_process_pool_gives_the_same_tables(tmp_path: Path) -> None:
    a = _archive(tmp_path)
    one = run_batch([str(a)], tmp_path / "one", workers=1)
    two = run_batch([str(a)], tmp_path / "two", workers=2)
    for name in one.tables:
        assert _equal(one.tables[name], two.tables[name]), name


def test_ray_engine_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError) as info:
        import_ray()
    assert "pip install 'tracekit-gpu[ray]'" in info.value.render()


@pytest.mark.slow  # a local Ray instance; .ci/run installs Ray for it, the local engines run by default
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'tracekit-gpu[ray]')")
def test_ray_engine_gives_the_same_tables(tmp_path: Path) -> None:
    a = _archive(tmp_path)
    inputs = [str(a / "job1"), str(a / "misc" / "stall.sqlite"), str(a / "misc" / "corrupt.json.gz")]
    local = run_batch(inputs, tmp_path / "local", workers=1)
    ray_run = run_batch(inputs, tmp_path / "ray", workers=2, engine="ray")
    assert ray_run.analysed == local.analysed == 4
    assert ray_run.failed == 1
    assert ray_run.tables["jobs"].filter(pl.col("n_ranks") == 2)["stragglers"].to_list() == [[1]]
    for name in local.tables:
        assert _equal(local.tables[name], ray_run.tables[name]), name


def test_real_two_rank_traces_form_one_job(tmp_path: Path) -> None:
    folder = shared_trace("hta/tests/data/trace_filter")
    nsys = shared_trace("nsight/nsys-ai/h100_2gpu_1s.sqlite")
    res = run_batch([str(folder), str(nsys)], tmp_path / "out", workers=1)
    jobs = {Path(r["job"]).name: r for r in res.tables["jobs"].iter_rows(named=True)}
    j = jobs["sampled_rank-*.json.gz"]
    assert j["ranks"] == [0, 1]
    assert j["world_size"] == 128
    assert j["files"] == 2
    assert j["stragglers"] == [1]
    assert jobs["h100_2gpu_1s.sqlite"]["ranks"] == [0, 1]
    assert jobs["h100_2gpu_1s.sqlite"]["files"] == 1
    ranks = res.tables["ranks"]
    assert ranks.filter(pl.col("job") == j["job"])["path"].n_unique() == 2
    t = res.tables["traces"].filter(pl.col("path") == str(nsys))
    assert t["rank"][0] is None
    assert t["ranks"][0].to_list() == [0, 1]


@pytest.mark.slow
def test_batch_over_the_whole_shared_archive(tmp_path: Path) -> None:
    if not SHARED_TRACES.exists():
        pytest.skip("../shared/traces is not available")
    res = run_batch([str(SHARED_TRACES)], tmp_path / "out", workers=2)
    traces = res.tables["traces"]
    assert traces.height == res.files == len(discover([str(SHARED_TRACES)]).files)
    failed = traces.filter(pl.col("error").is_not_null())
    # only files that are not profiler timelines tracekit can read here fail
    for path, kind in failed.select("path", "error_kind").rows():
        assert path.endswith((".nsys-rep", "benchmark_simple_add_et.json.gz")), (path, kind)
    sampled = res.tables["jobs"].filter(pl.col("job").str.ends_with("trace_filter/sampled_rank-*.json.gz"))
    assert sampled["ranks"][0].to_list() == [0, 1]
    again = run_batch([str(SHARED_TRACES)], tmp_path / "out", workers=2)
    assert again.reused == res.analysed - failed.filter(pl.col("error_kind") == "ExternalToolError").height

"""Where in the code: findings located by the user's Python frames and by a capture's program facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import SAMPLE_TRACES, shared_trace, write_trace

import tracekit
from tracekit import pipeline
from tracekit.analysis.codeloc import (
    CodeLocation,
    finding_locations,
    is_library_file,
    outermost,
    top_location,
    user_frames,
)
from tracekit.analysis.findings import Finding
from tracekit.analysis.program_advice import advise, loader_changes, loader_fix, memory_from_program
from tracekit.analysis.steps import find_steps
from tracekit.analysis.syncs import find_syncs
from tracekit.reading.program import read_program
from tracekit.reading.source import SourceLines
from tracekit.report.formatting import location_text


def _py(name: str, ts: float, dur: float, i: int, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {"Python id": i}}


def _op(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _stack_trace(tmp_path: Path) -> tracekit.TraceTables:
    """Two syncs: ``loss.item()`` in train.py:12 (260 µs) and a device sync reached from
    train.py:20 through a library and the standard library (50 µs), plus one on another thread
    with no user frame around it."""
    events = [
        _py("train.py(40): <module>", 0, 1000, 1),
        _py("train.py(12): train_step", 10, 500, 2),
        _py("torch/_tensor.py(40): wrapped", 90, 320, 3),
        _py("<built-in method item of Tensor object at 0x7f00>", 100, 300, 4),
        _op("cpu_op", "aten::item", 110, 280),
        _op("cpu_op", "aten::_local_scalar_dense", 115, 270),
        _op("cuda_runtime", "cudaStreamSynchronize", 120, 260, correlation=5),
        _py("train.py(20): log_metrics", 600, 200, 5),
        _py("transformers/trainer.py(10): log", 610, 150, 6),
        _py("threading.py(300): wait", 615, 100, 7),
        _op("cuda_runtime", "cudaDeviceSynchronize", 620, 50, correlation=6),
        _py("threading.py(1000): run", 0, 900, 8, tid=2),
        _op("cuda_runtime", "cudaStreamSynchronize", 100, 30, tid=2, correlation=7),
    ]
    return tracekit.read_trace(write_trace(tmp_path / "stack.json", events), cache=False)


def test_user_frames_pass_over_torch_the_standard_library_and_packages(tmp_path: Path) -> None:
    frames = user_frames(_stack_trace(tmp_path).events)
    assert frames.select("file", "line", "function").rows() == [
        ("train.py", 40, "<module>"), ("train.py", 12, "train_step"), ("train.py", 20, "log_metrics"),
    ]


@pytest.mark.parametrize(("file", "library"), [
    ("train.py", False),
    ("models/resnet.py", False),
    ("/home/me/project/train.py", False),
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", False),
    ("torch/nn/modules/module.py", True),
    ("/opt/pytorch/torch/utils/data/dataloader.py", True),
    ("/usr/lib/python3.10/site-packages/numpy/core/fromnumeric.py", True),
    ("/opt/conda/lib/python3.11/threading.py", True),
    ("threading.py", True),
    ("multiprocessing/queues.py", True),
    ("transformers/models/bert/modeling_bert.py", True),
    ("/tmp/torchinductor_root/ob/cobh.py", True),
    ("/work/repo/tracekit/capture/runtime.py", True),
    ("<frozen importlib._bootstrap>", True),
])
def test_library_files(file: str, library: bool) -> None:
    assert pl.DataFrame({"file": [file]}).select(is_library_file())["file"][0] is library


def test_sync_points_name_the_innermost_user_frame(tmp_path: Path) -> None:
    t = _stack_trace(tmp_path)
    steps = find_steps(t.events, t.links)
    syncs = find_syncs(t.events, t.links, steps.frame).sort("start_ns")
    assert syncs.select("tid", "api", "python_frame").rows() == [
        (2, "cudaStreamSynchronize", None),
        (1, "cudaStreamSynchronize", "train.py(12): train_step"),
        (1, "cudaDeviceSynchronize", "train.py(20): log_metrics"),
    ]


def test_the_finding_is_located_where_most_of_its_time_is(tmp_path: Path) -> None:
    t = _stack_trace(tmp_path)
    steps = find_steps(t.events, t.links)
    syncs = find_syncs(t.events, t.links, steps.frame)
    (tmp_path / "train.py").write_text("\n".join(f"line {i}" for i in range(1, 41)) + "\n", encoding="utf-8")
    where = finding_locations(["host_device_sync", "data_loading"], t.events, t.links, steps.frame, syncs, SourceLines([tmp_path]))
    assert where == {"host_device_sync": CodeLocation("train.py", 12, "train_step", "line 12", count=1)}
    assert location_text(where["host_device_sync"]) == "train.py:12 in train_step (×1): line 12"


def test_a_trace_without_python_frames_has_no_locations() -> None:
    result = pipeline.run(pipeline.load(SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json"))
    assert result.diagnosis.findings
    assert all(f.location is None for f in result.diagnosis.findings)
    assert user_frames(result.tables.events).height == 0


def test_outermost_keeps_one_point_per_nesting() -> None:
    points = pl.DataFrame({
        "pid": [1, 1, 1, 1, 1], "tid": [1, 1, 1, 2, 1], "start_ns": [0, 10, 20, 10, 200], "dur_ns": [100, 50, 10, 5, 10],
    })
    assert outermost(points).select("tid", "start_ns").sort("tid", "start_ns").rows() == [(1, 0), (1, 200), (2, 10)]


def test_top_location_ranks_by_time_then_count() -> None:
    located = pl.DataFrame({
        "file": ["a.py", "b.py", "b.py"], "line": [1, 2, 2], "function": ["f", "g", "g"], "dur_ns": [30, 10, 10],
    })
    assert top_location(located) == CodeLocation("a.py", 1, "f", None, count=1)
    assert top_location(located.with_columns(pl.lit(5).alias("dur_ns"))) == CodeLocation("b.py", 2, "g", None, count=2)
    assert top_location(located.clear()) is None


def test_source_lines_read_only_python_files_under_the_roots(tmp_path: Path) -> None:
    inside = tmp_path / "proj"
    inside.mkdir()
    (inside / "train.py").write_text("import torch\n    loss.item()  \n", encoding="utf-8")
    (tmp_path / "secret.py").write_text("token = 1\n", encoding="utf-8")
    (inside / "notes.txt").write_text("text\n", encoding="utf-8")
    lines = SourceLines([inside])
    assert lines("train.py", 2) == "loss.item()"
    assert lines(str(inside / "train.py"), 1) == "import torch"
    assert lines("train.py", 3) is None
    assert lines("../secret.py", 1) is None
    assert lines(str(tmp_path / "secret.py"), 1) is None
    assert lines("notes.txt", 1) is None
    assert lines("missing.py", 1) is None


def _facts(**rank: Any) -> Any:
    return read_program({"version": 1, "ranks": [{"rank": 0, "pid": 7, **rank}]})[0]


_LOADER = {"site": {"file": "train.py", "line": 42, "function": "main"}, "batch_size": 64, "num_workers": 0,
           "pin_memory": False, "persistent_workers": False, "iterations": 3, "fetches": 30}


def test_loader_fix_names_the_site_and_the_arguments_to_change() -> None:
    loader = _facts(dataloaders=[_LOADER]).training_loader()
    assert loader_changes(loader, host_only=False) == ["num_workers=4", "pin_memory=True", "persistent_workers=True"]
    assert loader_changes(loader, host_only=True) == ["num_workers=4", "persistent_workers=True"]
    fix = loader_fix(loader, host_only=False)
    assert fix is not None
    assert fix.startswith("train.py:42 `DataLoader(batch_size=64, num_workers=0, pin_memory=False)`: set num_workers=4, "
                          "pin_memory=True, persistent_workers=True")
    tuned = _facts(dataloaders=[{**_LOADER, "num_workers": 8, "pin_memory": True, "persistent_workers": True}]).training_loader()
    assert loader_changes(tuned, host_only=False) == ["num_workers=16"]


def _finding(kind: str, fix: str = "generic fix") -> Finding:
    return Finding(kind=kind, title=kind, ms_per_step=10.0, share_of_step=0.1, evidence={}, fix=fix)


def test_advice_follows_what_the_program_already_uses() -> None:
    plain = [_finding("data_loading"), _finding("no_tensor_cores"), _finding("launch_bound"), _finding("unfused_elementwise")]
    assert advise(plain, None, host_only=False) == plain
    untouched = advise(plain, _facts(), host_only=False)
    assert [f.fix for f in untouched] == ["generic fix"] * 4
    program = _facts(
        dataloaders=[_LOADER],
        autocast=[{"device_type": "cuda", "dtype": "torch.bfloat16", "enabled": True, "entered": 12}],
        compile=[{"site": {"file": "train.py", "line": 30}, "mode": "reduce-overhead", "calls": 1}],
        math={"matmul_allow_tf32": True},
        memory={"device": 0, "total_bytes": 80 * 2**30, "peak_reserved_bytes": 20 * 2**30, "peak_allocated_bytes": 18 * 2**30},
    )
    loading, amp, launch, fusion = advise(plain, program, host_only=False, data_points=5, code=lambda f, n: f"{f}#{n}")
    assert loading.location == CodeLocation("train.py", 42, "main", "train.py#42", count=5)
    assert loading.fix.startswith("train.py:42 `DataLoader(")
    assert amp.fix.startswith("Autocast is already on (torch.bfloat16)")
    assert "TF32" not in amp.fix
    assert launch.fix.startswith("The program already uses CUDA graphs (train.py:30)")
    assert "60.0 GiB of 80.0 GiB unused at the peak (75%)" in launch.fix
    assert fusion.fix.startswith("torch.compile is already used at train.py:30")
    (m,) = memory_from_program(program)
    assert m.headroom == pytest.approx(0.75)
    assert memory_from_program(_facts()) == ()


def test_capture_data_loading_finding_names_the_example_line_and_arguments() -> None:
    folder = SAMPLE_TRACES / "captures" / "slow_dataloader"
    result = pipeline.run(pipeline.load(folder))
    assert isinstance(result, pipeline.JobResult)
    (d,) = [r.diagnosis for r in result.ranks.values()]
    f = next(f for f in d.findings if f.kind == "data_loading")
    assert f.location is not None
    assert (f.location.file, f.location.line, f.location.function) == ("scripts/examples/slow_dataloader.py", 61, "main")
    assert f.location.count == d.complete_steps
    assert f.fix.startswith(
        "scripts/examples/slow_dataloader.py:61 `DataLoader(batch_size=4, num_workers=0, pin_memory=False)`: set num_workers=4"
    )
    assert json.loads(json.dumps(f.to_dict()))["location"]["line"] == 61


@pytest.mark.shared
def test_real_with_stack_trace_locates_the_sync_and_the_copy() -> None:
    path = shared_trace("gpupuzzlers/streams/blocking/blocking_streams.json.gz")
    d = pipeline.run(pipeline.load(path)).diagnosis
    where = {f.kind: f.location for f in d.findings}
    for kind in ("host_device_sync", "pageable_memcpy"):
        loc = where[kind]
        assert loc is not None
        assert (loc.file, loc.line, loc.function, loc.count) == ("streams3_blocking.py", 4, "streams2", 200)
    assert d.syncs.filter(pl.col("api") == "cudaStreamSynchronize")["python_frame"].unique().to_list() == [
        "streams3_blocking.py(4): streams2"
    ]

"""What ``tracekit capture`` records about the program: the recorder's hooks (with a fake torch),
the ``program`` section of the process report and of ``metadata.json``, the typed reader
(tolerant of old and malformed metadata), and a real capture with torch on the CPU."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tracekit.capture import runner
from tracekit.capture.config import ENV_VAR, CaptureConfig
from tracekit.capture.program import MAX_ENTRIES, ProgramRecorder, SiteFinder
from tracekit.capture.session import ProcessFacts, Session
from tracekit.reading import program as reading
from tracekit.reading.job import read_capture_metadata
from tracekit.reading.program import CodeSite, DataLoaderInfo, DeviceMemory, MathFlags, read_program

HERE = Path(__file__).resolve()


# ---------------------------------------------------------------------- a fake torch


class FakeParam:
    def __init__(self, n: int, *, dtype: str = "torch.float32", device: str = "cpu", grad: bool = True) -> None:
        self.n, self.dtype, self.device, self.requires_grad = n, dtype, device, grad

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return 2 if "16" in self.dtype else 4


class FakeModule:
    def __init__(self, *params: FakeParam) -> None:
        self._params = params

    def forward(self, x: Any) -> Any:
        return x

    def parameters(self) -> Any:
        return iter(self._params)


class Dataset:
    pass


class IterableDataset(Dataset):
    pass


class DataLoader:
    def __init__(self, dataset: Any, batch_size: int | None = 1, num_workers: int = 0, pin_memory: bool = False,
                 prefetch_factor: int | None = None, persistent_workers: bool = False) -> None:
        if batch_size == -1:
            raise ValueError("bad batch size")
        self.dataset, self.batch_size, self.num_workers, self.pin_memory = dataset, batch_size, num_workers, pin_memory
        self.prefetch_factor, self.persistent_workers, self.drop_last, self.timeout = prefetch_factor, persistent_workers, False, 0
        self.multiprocessing_context = None

    def __iter__(self) -> Any:
        return _LoaderIter()


class _LoaderIter:
    def __iter__(self) -> _LoaderIter:
        return self

    def __next__(self) -> Any:
        raise StopIteration


class Optimizer:
    def __init__(self, params: Any, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.param_groups = [{"params": list(params)}]


class FakeAdam(Optimizer):
    def __init__(self, params: Any, lr: float = 1e-3, fused: bool | None = None) -> None:
        super().__init__(params, {"lr": lr, "fused": fused, "foreach": None, "capturable": False})


class Autocast:
    def __init__(self, device_type: str, dtype: str = "torch.bfloat16", enabled: bool = True) -> None:
        self.device, self.fast_dtype, self._enabled = device_type, dtype, enabled

    def __enter__(self) -> Autocast:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class CUDAGraph:
    def capture_begin(self, pool: Any = None) -> None:
        pass

    def replay(self) -> None:
        pass


def fake_torch(*, cuda: bool = False) -> SimpleNamespace:
    def compile(model: Any = None, **kwargs: Any) -> Any:
        return model

    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132)
    gib = 2**30
    cuda_ns = SimpleNamespace(
        is_initialized=lambda: cuda, current_device=lambda: 0, get_device_properties=lambda d: props,
        mem_get_info=lambda d: (100 * gib, 140 * gib), memory_allocated=lambda d: 10 * gib,
        memory_reserved=lambda d: 12 * gib, max_memory_allocated=lambda d: 30 * gib,
        max_memory_reserved=lambda d: 35 * gib, get_allocator_backend=lambda: "native",
        graphs=SimpleNamespace(CUDAGraph=CUDAGraph),
    )
    return SimpleNamespace(
        utils=SimpleNamespace(data=SimpleNamespace(DataLoader=DataLoader, IterableDataset=IterableDataset)),
        optim=SimpleNamespace(Optimizer=Optimizer),
        amp=SimpleNamespace(autocast_mode=SimpleNamespace(autocast=Autocast)),
        compile=compile,
        cuda=cuda_ns,
        backends=SimpleNamespace(
            cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True, fp32_precision="tf32")),
            cudnn=SimpleNamespace(allow_tf32=True, benchmark=True, deterministic=False),
        ),
        get_float32_matmul_precision=lambda: "high",
        are_deterministic_algorithms_enabled=lambda: False,
    )


@pytest.fixture
def recorded() -> Any:
    """A recorder installed on a fake torch; its hooks are removed afterwards."""
    undo: list[Any] = []
    torch = fake_torch()
    rec = ProgramRecorder(torch)
    rec.install(undo.append)
    yield torch, rec
    while undo:
        undo.pop()()


def _line_after() -> int:
    """The line number of the caller's next line (where the constructor below it is called)."""
    return sys._getframe(1).f_lineno + 1


# ---------------------------------------------------------------------- the recorder (fakes)


def test_dataloaders_are_recorded_with_their_arguments_site_and_use(recorded: Any) -> None:
    torch, rec = recorded
    line = _line_after()
    loader = torch.utils.data.DataLoader(Dataset(), batch_size=64, num_workers=0)
    for _ in range(2):  # two epochs of three batches
        it = iter(loader)
        for _ in range(3):
            rec.fetched(it)
    workers = torch.utils.data.DataLoader(IterableDataset(), batch_size=8, num_workers=4, prefetch_factor=2, persistent_workers=True)
    (first, second) = rec.snapshot()["dataloaders"]
    assert first["site"] == {"file": os.path.relpath(HERE), "line": line, "function": "test_dataloaders_are_recorded_with_their_arguments_site_and_use"}
    assert (first["batch_size"], first["num_workers"], first["pin_memory"], first["prefetch_factor"]) == (64, 0, False, None)
    assert (first["dataset"], first["iterable_dataset"], first["constructed"]) == ("Dataset", False, 1)
    assert (first["iterations"], first["fetches"]) == (2, 6)
    assert (second["num_workers"], second["prefetch_factor"], second["persistent_workers"], second["iterable_dataset"]) == (4, 2, True, True)
    assert (second["iterations"], second["fetches"]) == (0, 0)
    assert workers.batch_size == 8  # the loader itself is untouched


def test_loaders_built_in_a_loop_are_one_entry_and_the_list_is_bounded(recorded: Any) -> None:
    torch, rec = recorded
    for _ in range(5):
        torch.utils.data.DataLoader(Dataset(), batch_size=4)
    assert [e["constructed"] for e in rec.snapshot()["dataloaders"]] == [5]
    for size in range(MAX_ENTRIES + 3):
        torch.utils.data.DataLoader(Dataset(), batch_size=100 + size)
    snap = rec.snapshot()
    assert len(snap["dataloaders"]) == MAX_ENTRIES
    assert snap["dropped"]["dataloaders"] == 4


def test_a_failing_constructor_raises_as_before_and_records_nothing(recorded: Any) -> None:
    torch, rec = recorded
    with pytest.raises(ValueError, match="bad batch size"):
        torch.utils.data.DataLoader(Dataset(), batch_size=-1)
    assert rec.snapshot()["dataloaders"] == []


def test_optimizers_autocast_compile_and_cuda_graphs(recorded: Any) -> None:
    torch, rec = recorded
    model = FakeModule(FakeParam(1000), FakeParam(24))
    line = _line_after()
    opt = FakeAdam(model.parameters(), lr=0.1, fused=True)  # a subclass: the site is this call, not its super().__init__
    for _ in range(3):
        rec.optimizer_stepped(opt)
    for _ in range(4):
        with torch.amp.autocast_mode.autocast("cuda"):
            pass
    with torch.amp.autocast_mode.autocast("cpu", enabled=False):
        pass
    assert torch.compile(model, mode="reduce-overhead") is model
    graph = torch.cuda.graphs.CUDAGraph()
    graph.capture_begin()
    for _ in range(7):
        graph.replay()
    snap = rec.snapshot()
    (o,) = snap["optimizers"]
    assert (o["class"], o["fused"], o["foreach"], o["lr"], o["parameters"], o["steps"]) == ("FakeAdam", True, None, 0.1, 1024, 3)
    assert o["site"]["line"] == line
    assert [(a["device_type"], a["dtype"], a["enabled"], a["entered"]) for a in snap["autocast"]] == [
        ("cuda", "bfloat16", True, 4), ("cpu", "bfloat16", False, 1)]
    (c,) = snap["compile"]
    assert (c["target"], c["mode"], c["backend"], c["calls"]) == ("FakeModule", "reduce-overhead", None, 1)
    assert snap["cuda_graphs"] == {"captures": 1, "replays": 7}


def test_nothing_is_recorded_while_compiling() -> None:
    torch = fake_torch()
    compiling = [True]
    rec = ProgramRecorder(torch, lambda: compiling[0])
    undo: list[Any] = []
    rec.install(undo.append)
    try:
        with torch.amp.autocast_mode.autocast("cuda"):
            pass
        torch.compile(FakeModule())
        assert rec.snapshot()["autocast"] == []
        assert rec.snapshot()["compile"] == []
    finally:
        while undo:
            undo.pop()()


def test_uninstalling_restores_torch_and_a_torch_without_a_piece_is_noted() -> None:
    torch = fake_torch()
    before = (DataLoader.__init__, DataLoader.__iter__, Optimizer.__init__, Autocast.__enter__, torch.compile,
              CUDAGraph.capture_begin, CUDAGraph.replay)
    del torch.cuda.graphs
    undo: list[Any] = []
    rec = ProgramRecorder(torch)
    rec.install(undo.append)
    assert DataLoader.__init__ is not before[0]
    assert any(n.startswith("CUDA graphs not recorded") for n in rec.snapshot()["notes"])
    while undo:
        undo.pop()()
    after = (DataLoader.__init__, DataLoader.__iter__, Optimizer.__init__, Autocast.__enter__, torch.compile,
             CUDAGraph.capture_begin, CUDAGraph.replay)
    assert after == before


def test_flags_model_memory_and_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    torch = fake_torch(cuda=True)
    rec = ProgramRecorder(torch)
    shared = FakeParam(10)
    model, loss = FakeModule(FakeParam(100, dtype="torch.bfloat16", device="cuda:0"), shared), FakeModule()
    wrapper = FakeModule(shared)  # a second top-level module sharing a parameter: counted once
    rec.watch_modules(lambda: [model, loss, wrapper])
    snap = rec.snapshot()
    assert snap["math"] == {
        "matmul_allow_tf32": True, "matmul_fp32_precision": "tf32", "float32_matmul_precision": "high",
        "cudnn_allow_tf32": True, "cudnn_benchmark": True, "cudnn_deterministic": False, "deterministic_algorithms": False,
    }
    m = snap["model"]
    assert (m["parameters"], m["trainable"], m["bytes"]) == (110, 110, 240)
    assert m["dtypes"] == {"bfloat16": 100, "float32": 10}
    assert m["devices"] == {"cuda:0": 100, "cpu": 10}
    assert [x["parameters"] for x in m["modules"]] == [110, 0, 10]
    gib = 2**30
    assert snap["memory"] == {
        "device": 0, "name": "NVIDIA H200", "capability": "9.0", "multiprocessors": 132, "total_bytes": 140 * gib,
        "free_bytes": 100 * gib, "allocated_bytes": 10 * gib, "reserved_bytes": 12 * gib,
        "peak_allocated_bytes": 30 * gib, "peak_reserved_bytes": 35 * gib,
    }
    assert snap["allocator"] == {"caching": False, "alloc_conf": "expandable_segments:True", "backend": "native"}
    # a report written while a CUDA graph is being captured makes no CUDA call and keeps the last reading
    mem_get_info = torch.cuda.mem_get_info
    torch.cuda.is_current_stream_capturing = lambda: True
    torch.cuda.mem_get_info = lambda d: pytest.fail("mem_get_info during stream capture")
    assert rec.snapshot()["memory"] == snap["memory"]
    torch.cuda.is_current_stream_capturing, torch.cuda.mem_get_info = (lambda: False), mem_get_info
    # at exit the flags keep their training-time values and the model its last count
    torch.backends.cudnn.benchmark = False
    rec.watch_modules(list)
    final = rec.snapshot(final=True)
    assert final["math"]["cudnn_benchmark"] is True
    assert final["model"] == m
    assert rec.snapshot()["math"]["cudnn_benchmark"] is False


def test_no_cuda_means_no_memory_and_broken_flags_read_as_unknown() -> None:
    torch = fake_torch(cuda=False)
    del torch.backends.cuda
    torch.get_float32_matmul_precision = lambda: 1 / 0
    snap = ProgramRecorder(torch).snapshot()
    assert snap["memory"] is None
    assert snap["math"]["matmul_allow_tf32"] is None
    assert snap["math"]["float32_matmul_precision"] is None
    assert snap["math"]["cudnn_benchmark"] is True
    assert snap["allocator"]["caching"] is True
    json.dumps(snap)  # the section is plain JSON


def test_site_finder_skips_torch_the_standard_library_and_tracekit(tmp_path: Path) -> None:
    stdlib = tmp_path / "lib" / "python3"
    torch_dir = tmp_path / "lib" / "python3" / "site-packages" / "torch"
    finder = SiteFinder(stdlib=str(stdlib), skipped=[str(torch_dir), str(tmp_path / "tracekit")])
    assert not finder.is_user(str(stdlib / "threading.py"))
    assert not finder.is_user(str(torch_dir / "utils" / "data" / "dataloader.py"))
    assert not finder.is_user(str(tmp_path / "tracekit" / "marks.py"))
    assert not finder.is_user("<frozen runpy>")
    assert finder.is_user(str(stdlib / "site-packages" / "lightning" / "trainer.py"))
    assert finder.is_user(str(tmp_path / "train.py"))
    assert finder.is_user("<string>")

    def inner() -> Any:
        return finder.site(sys._getframe(0))

    site = inner()
    assert site is not None
    assert site["function"] == "inner"


def test_the_recorder_is_installed_with_the_capture_hooks_and_reports_through_the_session(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from tracekit.capture import torch_hooks

    rec = ProgramRecorder(torch)
    torch_hooks.install(torch, lambda: None, rec)
    try:
        loader = torch.utils.data.DataLoader(list(range(6)), batch_size=2)
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]
        (entry,) = rec.snapshot()["dataloaders"]
        assert (entry["batch_size"], entry["iterations"], entry["fetches"]) == (2, 1, 3)
    finally:
        torch_hooks.uninstall()
    facts = torch_hooks.process_facts(torch, lambda: None, rec)
    session = Session(CaptureConfig(out=str(tmp_path)), backend=_null_backend(), ranges=_NoRanges(), facts=facts)
    assert session.report()["program"]["dataloaders"][0]["fetches"] == 3


def _null_backend() -> Any:
    from tracekit.capture.backend import NullBackend

    return NullBackend()


class _NoRanges:
    def push(self, name: str) -> Any:
        return None

    def pop(self, handle: Any) -> None:
        pass

    def start_step(self, step: int) -> Any:
        return None

    def end_step(self, handle: Any) -> None:
        pass


def test_a_report_whose_program_cannot_be_read_says_why(tmp_path: Path) -> None:
    def broken(final: bool) -> dict[str, Any]:
        raise RuntimeError("no facts")

    session = Session(CaptureConfig(out=str(tmp_path)), backend=_null_backend(), ranges=_NoRanges(),
                      facts=ProcessFacts(program=broken))
    report = session.report()
    assert "program" not in report
    assert any("could not record what the program built: RuntimeError: no facts" in n for n in report["notes"])
    assert "program" not in Session(CaptureConfig(out=str(tmp_path)), backend=_null_backend(), ranges=_NoRanges()).report()


# ---------------------------------------------------------------------- metadata.json


def _report(rank: int, pid: int, program: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": pid, "rank": rank, "world_size": 2, "steps": 3, "steps_completed": 3, "traces": [],
                           "gpus": [], "notes": [], "nvtx": "nvtx", "nvtx_version": "0.2.17"}
    if program is not None:
        out["program"] = program
    return out


def test_metadata_merges_each_ranks_program_in_rank_order(tmp_path: Path) -> None:
    config = CaptureConfig(out=str(tmp_path))
    reports = [_report(1, 20, {"version": 1, "dataloaders": [{"batch_size": 8}]}), _report(0, 10, {"version": 1, "optimizers": []}),
               _report(0, 5), _report(1, 30, ["not", "an", "object"])]
    meta = runner.build_metadata(command=["python", "t.py"], cwd=".", config=config, start=0.0, end=1.0, returncode=0,
                                 interrupted=False, reports=reports)
    assert meta["format_version"] == 2
    assert (meta["nvtx"], meta["nvtx_version"]) == ("nvtx", "0.2.17")  # where the ranges went
    assert meta["program"] == {"version": 1, "ranks": [
        {"rank": 0, "pid": 10, "optimizers": []}, {"rank": 1, "pid": 20, "dataloaders": [{"batch_size": 8}]}]}
    facts = read_program(meta["program"])
    assert sorted(facts) == [0, 1]
    assert facts[1].dataloaders[0].batch_size == 8


# ---------------------------------------------------------------------- the typed reader


GOOD = {
    "rank": 0, "pid": 7,
    "dataloaders": [
        {"site": {"file": "eval.py", "line": 9, "function": "evaluate"}, "batch_size": 256, "num_workers": 0, "pin_memory": False,
         "iterations": 1, "fetches": 4, "constructed": 1},
        {"site": {"file": "train.py", "line": 42, "function": "main"}, "batch_size": 64, "num_workers": 2, "pin_memory": True,
         "prefetch_factor": 2, "persistent_workers": False, "iterations": 1, "fetches": 120, "constructed": 1},
    ],
    "optimizers": [{"class": "AdamW", "module": "torch.optim.adamw", "foreach": None, "fused": True, "lr": 0.001,
                    "param_groups": 2, "parameters": 1000, "steps": 5, "constructed": 1}],
    "autocast": [{"device_type": "cuda", "dtype": "bfloat16", "enabled": True, "entered": 5}],
    "compile": [{"site": {"file": "train.py", "line": 30}, "target": "Net", "mode": "reduce-overhead", "backend": None,
                 "options": None, "calls": 1}],
    "cuda_graphs": {"captures": 2, "replays": 40},
    "math": {"matmul_allow_tf32": False, "float32_matmul_precision": "high", "cudnn_benchmark": True},
    "model": {"parameters": 1000, "trainable": 900, "bytes": 4000, "dtypes": {"float32": 1000}, "devices": {"cuda:0": 1000},
              "modules": [{"class": "Net", "parameters": 1000}]},
    "memory": {"device": 0, "name": "NVIDIA H200", "total_bytes": 1000, "peak_reserved_bytes": 250, "peak_allocated_bytes": 200},
    "allocator": {"caching": True, "alloc_conf": None, "backend": "native"},
    "notes": [],
}


def test_the_reader_gives_typed_frozen_facts() -> None:
    (facts,) = read_program({"version": 1, "ranks": [GOOD]}).values()
    assert facts.ignored == ()
    loader = facts.training_loader()
    assert loader is not None
    assert loader.site == CodeSite("train.py", 42, "main")
    assert loader.describe() == "train.py:42 `DataLoader(batch_size=64, num_workers=2, pin_memory=True, prefetch_factor=2, persistent_workers=False)`"
    assert facts.dataloaders[0].call() == "DataLoader(batch_size=256, num_workers=0, pin_memory=False)"
    assert (facts.optimizers[0].name, facts.optimizers[0].fused, facts.optimizers[0].foreach) == ("AdamW", True, None)
    assert facts.uses_autocast
    assert facts.uses_cuda_graphs
    assert facts.compiles[0].cuda_graphs
    assert facts.math is not None
    assert facts.math.tf32_matmul is True  # "high" allows TF32 although allow_tf32 is off
    assert facts.model is not None
    assert facts.model.modules[0].name == "Net"
    assert facts.memory is not None
    assert (facts.memory.headroom_bytes, facts.memory.headroom) == (750, 0.75)
    with pytest.raises(AttributeError):
        facts.rank = 3  # type: ignore[misc]


def test_the_reader_is_tolerant_of_old_and_malformed_metadata() -> None:
    assert read_program(None) == {}
    assert read_program([1, 2]) == {}
    assert read_program({"version": 1, "ranks": "x"}) == {}
    bad = {
        "rank": 1, "pid": "seven",
        "dataloaders": [{"batch_size": "64", "num_workers": True, "site": {"line": 3}, "fetches": -2}, "junk"],
        "optimizers": {"class": "SGD"},
        "math": {"cudnn_benchmark": "yes", "float32_matmul_precision": 3},
        "memory": {"total_bytes": 1.5e9, "peak_reserved_bytes": 10},
        "model": {"parameters": None, "dtypes": {"float32": "many", "bfloat16": 4}},
        "cuda_graphs": [],
        "notes": "not a list",
    }
    facts = read_program({"ranks": [bad, {"pid": 3}, "x", {**GOOD, "rank": 1}]})
    f = facts[1]
    assert f.pid is None
    (loader,) = f.dataloaders
    assert (loader.batch_size, loader.num_workers, loader.site, loader.fetches) == (None, None, None, 0)
    assert loader.call() == "DataLoader()"
    assert f.optimizers == ()
    assert f.math == MathFlags()
    assert f.math.tf32_matmul is None
    assert f.memory == DeviceMemory(None, None, None, None, None, None, None, None, None, 10)
    assert f.memory.headroom_bytes is None
    assert f.model is not None
    assert (f.model.parameters, dict(f.model.dtypes)) == (0, {"bfloat16": 4})
    assert (f.cuda_graph_captures, f.notes) == (0, ())
    assert "program.ranks[0].pid: expected an integer, got str" in f.ignored
    assert any("dataloaders: 1 item(s) that are not objects" in i for i in f.ignored)
    assert len(f.ignored) >= 8
    assert DataLoaderInfo.read(reading._Reader({}, "x", [])).describe() == "`DataLoader()`"


def test_capture_metadata_exposes_the_program(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text(json.dumps({"world_size": 1, "ranks": [{"rank": 0, "pid": 7, "trace": "rank0.json"}],
                                                        "program": {"version": 1, "ranks": [GOOD]}}))
    meta = read_capture_metadata(tmp_path)
    assert meta is not None
    facts = meta.program_of(0)
    assert facts is not None
    assert facts.optimizers[0].parameters == 1000
    assert meta.program_of(1) is None
    (tmp_path / "metadata.json").write_text(json.dumps({"world_size": 1, "ranks": [], "program": "garbage"}))
    old = read_capture_metadata(tmp_path)
    assert old is not None
    assert old.program == {}


def test_the_reader_docstring_example_runs() -> None:
    result = doctest.testmod(reading, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


# ---------------------------------------------------------------------- a real capture (torch on the CPU)


PROGRAM = '''
import sys, torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")
torch.backends.cudnn.benchmark = True


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(torch.relu(self.a(x))).float()


net = Net()
model = torch.compile(net, backend="eager")
data = TensorDataset(torch.randn(48, 16), torch.randint(0, 4, (48,)))
loader = DataLoader(data, batch_size=8, shuffle=False, drop_last=True)  # LOADER
opt = torch.optim.AdamW(net.parameters(), lr=0.01, foreach=False)  # OPTIMIZER
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"{loss.item():.6f}")
'''


def _line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None, reason="torch is not installed")
def test_a_real_capture_records_the_program_without_changing_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    plain = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=300, check=True)
    out = tmp_path / "cap"
    captured = subprocess.run(
        [sys.executable, "-m", "tracekit", "capture", "-q", "-o", str(out), "--wait", "1", "--warmup", "1", "--active", "2",
         "--", sys.executable, "-W", "ignore", "train.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False,
    )
    assert captured.returncode == 0, captured.stderr
    assert captured.stdout == plain.stdout  # the same losses: the program ran unchanged
    meta = read_capture_metadata(out)
    assert meta is not None
    assert meta.raw["format_version"] == 2
    facts = meta.program_of(0)
    assert facts is not None
    assert facts.ignored == ()
    loader = facts.training_loader()
    assert loader is not None
    assert loader.describe() == f"train.py:{_line_of(PROGRAM, '# LOADER')} `DataLoader(batch_size=8, num_workers=0, pin_memory=False)`"
    assert (loader.drop_last, loader.dataset, loader.iterations, loader.fetches) == (True, "TensorDataset", 1, 6)
    (opt,) = facts.optimizers
    assert (opt.name, opt.foreach, opt.fused, opt.steps) == ("AdamW", False, None, 6)
    assert opt.site == CodeSite("train.py", _line_of(PROGRAM, "# OPTIMIZER"), "<module>")
    assert opt.parameters == 16 * 32 + 32 + 32 * 4 + 4
    (compiled,) = facts.compiles
    assert (compiled.target, compiled.backend, compiled.mode, compiled.calls) == ("Net", "eager", None, 1)
    assert not facts.uses_cuda_graphs
    assert facts.uses_autocast
    assert {(a.device_type, a.dtype) for a in facts.autocast} == {("cpu", "bfloat16")}
    assert facts.math is not None
    assert (facts.math.matmul_allow_tf32, facts.math.float32_matmul_precision, facts.math.cudnn_benchmark) == (True, "high", True)
    assert facts.model is not None
    assert facts.model.parameters == opt.parameters  # the compiled wrapper and the module share their parameters
    assert facts.memory is None  # no CUDA

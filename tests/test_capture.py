"""``tracekit capture``: the environment contract, the per-process state machine, the wrapper,
the explicit marks, and end-to-end captures of the examples with torch on the CPU.

The state machine (:class:`tracekit.capture.session.Session`) and the torch-facing helpers are
tested with fakes; the end-to-end tests run real commands (they need torch, and skip without
it).  CUDA code paths (CUDA activities, sync events, the nsys capture range) are tested with
fake torch modules here; there is no GPU on the machines these tests run on.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import REPO

import tracekit
from tracekit.capture import importhook, runner, torch_hooks
from tracekit.capture.config import (
    ENV_VAR,
    NONE,
    RECORD,
    RECORD_AND_SAVE,
    WARMUP,
    CaptureConfig,
    Schedule,
    bootstrap_dir,
    trace_name,
)
from tracekit.capture.session import ProcessFacts, Session
from tracekit.cli import main
from tracekit.errors import CaptureError, ExternalToolError, UsageError

EXAMPLES = REPO / "scripts" / "examples"


# ---------------------------------------------------------------------- the contract


def test_schedule_phases_follow_the_torch_rule() -> None:
    s = Schedule(wait=1, warmup=1, active=3, repeat=2)
    phases = [s.action(i) for i in range(12)]
    assert phases == [NONE, WARMUP, RECORD, RECORD, RECORD_AND_SAVE] * 2 + [NONE, NONE]
    assert s.recorded_steps(0) == (2, 4)
    assert s.recorded_steps(1) == (7, 9)
    assert s.cycle_of(8) == 1
    assert Schedule(wait=0, warmup=0, active=1, repeat=0).action(1000) == RECORD_AND_SAVE
    assert Schedule().describe() == "steps 2-6"
    assert "until the run ends" in Schedule(repeat=0).describe()
    assert Schedule(active=0).problems()
    assert Schedule(wait=-1).problems()


def test_schedule_matches_torch_profiler_schedule() -> None:
    torch = pytest.importorskip("torch")
    names = {NONE: "NONE", WARMUP: "WARMUP", RECORD: "RECORD", RECORD_AND_SAVE: "RECORD_AND_SAVE"}
    for wait, warmup, active, repeat in [(1, 1, 5, 1), (0, 2, 1, 0), (3, 0, 2, 3), (2, 1, 1, 2)]:
        ours = Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
        for step in range(40):
            assert theirs(step).name == names[ours.action(step)], (wait, warmup, active, repeat, step)


def test_config_round_trips_through_the_environment(tmp_path: Path) -> None:
    config = CaptureConfig(out=str(tmp_path), backend="none", schedule=Schedule(2, 0, 4, 3), with_stack=True, step_on="dataloader")
    again = CaptureConfig.from_environ({ENV_VAR: config.to_json()})
    assert again == config
    assert CaptureConfig.from_environ({}) is None
    for bad in ['{"out": "x"}', '[1]', json.dumps({**json.loads(config.to_json()), "backend": "gpu"}),
                json.dumps({**json.loads(config.to_json()), "schedule": {"active": 0}}), "{"]:
        with pytest.raises(ValueError, match=r"."):  # json.JSONDecodeError is a ValueError too
            CaptureConfig.from_json(bad)


def test_trace_names() -> None:
    assert trace_name(0, 0) == "rank0.cycle0.pt.trace.json.gz"
    assert trace_name(3, 2) == "cycle2/rank3.cycle2.pt.trace.json.gz"
    assert trace_name(1, 0, pid=77) == "rank1.pid77.cycle0.pt.trace.json.gz"
    assert trace_name(2, 0, backend="nsys") == "rank2.nsys.sqlite"


def test_rank_from_launcher_environment() -> None:
    assert torch_hooks.env_rank_info({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == (3, 8, 1, "env:RANK")
    assert torch_hooks.env_rank_info({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}) == (2, 4, None, "env:OMPI_COMM_WORLD_RANK")
    assert torch_hooks.env_rank_info({"SLURM_PROCID": "5"}) == (5, 6, None, "env:SLURM_PROCID")
    assert torch_hooks.env_rank_info({"RANK": "x"}) == (0, 1, None, "default")


# ---------------------------------------------------------------------- the state machine


class FakeRanges:
    """Records every range event in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.open: list[str] = []

    def push(self, name: str) -> Any:
        self.log.append(f"+{name}")
        self.open.append(name)
        return name

    def pop(self, handle: Any) -> None:
        assert self.open, "a range closed that was never opened"
        assert self.open[-1] == handle, "ranges must close in LIFO order"
        self.open.pop()
        self.log.append(f"-{handle}")

    def start_step(self, step: int) -> Any:
        self.log.append(f"[step {step}")
        return step

    def end_step(self, handle: Any) -> None:
        self.log.append(f"step {handle}]")


class FakeBackend:
    name = "torch"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def start(self) -> None:
        if self.fail:
            raise RuntimeError("no kineto")
        self.calls.append("start")

    def step(self, step: int) -> None:
        self.calls.append(f"step {step}")

    def stop(self) -> None:
        self.calls.append("stop")


def _session(tmp_path: Path, **kw: Any) -> tuple[Session, FakeBackend, FakeRanges]:
    backend = kw.pop("backend", FakeBackend())
    ranges = FakeRanges()
    facts = kw.pop("facts", ProcessFacts(describe=lambda: {"torch_version": "fake"}))
    config = CaptureConfig(out=str(tmp_path), **kw)
    return Session(config, backend=backend, ranges=ranges, facts=facts), backend, ranges


def _iteration(s: Session, *, log_after: bool = False) -> None:
    h = s.fetch_begin()
    s.end(h)
    s.forward_pre()
    s.forward_pre()  # a submodule: no new range
    s.forward_post()
    s.forward_post()
    h = s.backward_begin()
    s.end(h)
    s.optimizer_pre()
    s.optimizer_post()


def test_steps_end_at_the_optimizer_and_the_next_begins_with_the_next_fetch(tmp_path: Path) -> None:
    s, backend, ranges = _session(tmp_path)
    for _ in range(3):
        _iteration(s)
    assert ranges.log[:11] == [
        "[step 0", "+tracekit.data_loading", "-tracekit.data_loading", "+tracekit.forward", "-tracekit.forward",
        "+tracekit.backward", "-tracekit.backward", "+tracekit.optimizer", "-tracekit.optimizer", "step 0]", "[step 1",
    ]
    # the profiler hears of step N when step N's first activity begins
    assert backend.calls == ["start", "step 1", "step 2"]
    assert s.step == 2
    assert s.steps_completed == 3
    s.finish()
    assert backend.calls[-1] == "stop"
    report = json.loads((tmp_path / ".tracekit" / f"process-{os.getpid()}.json").read_text())
    assert report["steps"] == 3
    assert report["steps_completed"] == 3
    assert report["torch_version"] == "fake"
    assert report["end_time"].endswith("Z")
    s.finish()  # idempotent
    assert backend.calls.count("stop") == 1


def test_optimizers_stepping_back_to_back_are_one_step(tmp_path: Path) -> None:
    s, backend, ranges = _session(tmp_path)
    for _ in range(2):
        h = s.fetch_begin()
        s.end(h)
        h = s.backward_begin()
        s.end(h)
        for _opt in range(3):  # e.g. one optimizer per parameter group
            s.optimizer_pre()
            s.optimizer_post()
    assert s.step == 1
    assert backend.calls == ["start", "step 1"]
    assert ranges.log.count("+tracekit.optimizer") == 6


def test_explicit_steps_take_over_from_the_optimizer(tmp_path: Path) -> None:
    s, backend, ranges = _session(tmp_path)
    for _ in range(3):
        h = s.fetch_begin()  # outside the marked block
        s.end(h)
        with s.user_step():
            s.optimizer_pre()
            s.optimizer_post()
            s.optimizer_pre()  # a second optimizer step inside one marked step
            s.optimizer_post()
    assert s.step == 2
    assert backend.calls == ["start", "step 1", "step 2"]
    assert ranges.log.count("[step 0") == 1
    assert ranges.log.count("[step 2") == 1
    # the first marked step adopts the step the fetch opened; later ones open their own
    assert ranges.log[0] == "[step 0"
    assert ranges.log.index("step 0]") > ranges.log.index("+tracekit.optimizer")


def test_dataloader_boundaries_for_inference_loops(tmp_path: Path) -> None:
    s, backend, _ = _session(tmp_path, step_on="dataloader")
    for _ in range(4):
        h = s.fetch_begin()
        s.end(h)
        s.forward_pre()
        s.forward_post()
    assert s.step == 3
    assert backend.calls == ["start", "step 1", "step 2", "step 3"]


def test_an_exhausted_loader_adds_no_step(tmp_path: Path) -> None:
    s, _, ranges = _session(tmp_path)
    for _ in range(2):
        _iteration(s)
    h = s.fetch_begin()  # the fetch that raises StopIteration
    s.end(h)
    s.fetch_exhausted()
    assert s.steps_seen == 2
    _iteration(s)  # next epoch: continues the same step number
    assert s.step == 2
    assert s.steps_seen == 3
    assert ranges.log.count("[step 2") == 2


def test_other_threads_and_dataloader_workers_are_not_instrumented(tmp_path: Path) -> None:
    s, _backend, ranges = _session(tmp_path)
    _iteration(s)
    seen = len(ranges.log)
    t = threading.Thread(target=lambda: (s.forward_pre(), s.forward_post(), s.end(s.fetch_begin())))
    t.start()
    t.join()
    assert len(ranges.log) == seen

    w, wbackend, wranges = _session(tmp_path / "worker", facts=ProcessFacts(is_worker=lambda: True))
    _iteration(w)
    assert wbackend.calls == []
    assert wranges.log == []
    assert not w.active
    w.finish()
    assert not (tmp_path / "worker").exists()  # a worker writes nothing


def test_a_profiler_that_cannot_start_leaves_the_ranges(tmp_path: Path) -> None:
    s, _, ranges = _session(tmp_path, backend=FakeBackend(fail=True))
    _iteration(s)
    assert "+tracekit.forward" in ranges.log
    assert any("could not start" in n for n in s.notes)
    assert s.backend.name == "none"


def test_traces_are_moved_into_place_and_ranks_are_claimed_once(tmp_path: Path) -> None:
    s, _, _ = _session(tmp_path)
    _iteration(s)
    name = s.save_trace(0, 2, 6, lambda p: Path(p).write_bytes(gzip.compress(b"{}")))
    assert name == "rank0.cycle0.pt.trace.json.gz"
    assert (tmp_path / name).exists()
    assert s.traces[0]["complete"]
    assert not list((tmp_path / ".tracekit").glob("tmp-*"))
    partial = s.save_trace(1, 7, 8, lambda p: Path(p).write_bytes(b"x"))
    assert partial == "cycle1/rank0.cycle1.pt.trace.json.gz"
    assert not s.traces[1]["complete"]
    # another process claiming rank 0 in the same folder gets its pid in the name
    other = Session(s.config, backend=FakeBackend(), ranges=FakeRanges(), pid=os.getpid() + 1)
    assert other.trace_path(0)[0] == f"rank0.pid{os.getpid() + 1}.cycle0.pt.trace.json.gz"
    # a failing writer is a note, not an exception
    assert s.save_trace(2, 12, 16, lambda p: (_ for _ in ()).throw(OSError("disk full"))) is None
    assert any("disk full" in n for n in s.notes)


def test_exceptions_are_recorded(tmp_path: Path) -> None:
    s, _, _ = _session(tmp_path)
    s.record_exception(ValueError, ValueError("bad batch"))
    assert s.error == "ValueError: bad batch"
    assert not s.interrupted
    s.record_exception(KeyboardInterrupt, KeyboardInterrupt())
    assert s.interrupted


# ---------------------------------------------------------------------- torch-facing helpers (fakes)


class _Enum:
    def __init__(self, *names: str) -> None:
        for n in names:
            setattr(self, n, n)


def _fake_torch(*, cuda: bool, sync_supported: bool = True) -> SimpleNamespace:
    calls: list[str] = []

    class ExperimentalConfig:
        def __init__(self, **kw: Any) -> None:
            if not sync_supported and "enable_cuda_sync_events" in kw:
                raise TypeError("unexpected keyword")
            self.kw = kw

    cuda_ns = SimpleNamespace(
        is_available=lambda: cuda,
        synchronize=lambda: calls.append("sync"),
        profiler=SimpleNamespace(start=lambda: calls.append("cudaProfilerStart"), stop=lambda: calls.append("cudaProfilerStop")),
    )
    return SimpleNamespace(
        profiler=SimpleNamespace(
            ProfilerActivity=_Enum("CPU", "CUDA"), ProfilerAction=_Enum("NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE")
        ),
        _C=SimpleNamespace(_profiler=SimpleNamespace(_ExperimentalConfig=ExperimentalConfig)),
        cuda=cuda_ns,
        calls=calls,
    )


def test_profiler_arguments_on_a_gpu_machine_enable_cuda_and_sync_events(tmp_path: Path) -> None:
    config = CaptureConfig(out=str(tmp_path), schedule=Schedule(1, 1, 2, 1), with_stack=True, record_shapes=True, memory=True)
    torch = _fake_torch(cuda=True)
    kwargs, sync = torch_hooks.profiler_kwargs(torch, config, cuda=True, on_trace_ready=print)
    assert kwargs["activities"] == ["CPU", "CUDA"]
    assert sync is True
    assert kwargs["experimental_config"].kw == {"enable_cuda_sync_events": True}
    assert kwargs["with_stack"]
    assert kwargs["record_shapes"]
    assert kwargs["profile_memory"]
    assert [kwargs["schedule"](i) for i in range(5)] == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE"]

    old = _fake_torch(cuda=True, sync_supported=False)
    kwargs, sync = torch_hooks.profiler_kwargs(old, config, cuda=True, on_trace_ready=print)
    assert sync is False
    assert "experimental_config" not in kwargs

    kwargs, sync = torch_hooks.profiler_kwargs(_fake_torch(cuda=False), config, cuda=False, on_trace_ready=print)
    assert kwargs["activities"] == ["CPU"]
    assert sync is None
    assert "experimental_config" not in kwargs


def test_nsys_capture_range_follows_the_schedule(tmp_path: Path) -> None:
    torch = _fake_torch(cuda=True)
    config = CaptureConfig(out=str(tmp_path), backend="nsys", schedule=Schedule(1, 1, 3, 1))
    holder: dict[str, Session] = {}
    backend = torch_hooks.NsysRangeBackend(torch, config, lambda: holder.get("s"))
    s = Session(config, backend=backend, ranges=FakeRanges())
    holder["s"] = s
    for _ in range(8):
        _iteration(s)
    s.finish()
    assert torch.calls == ["cudaProfilerStart", "sync", "cudaProfilerStop"]
    assert s.traces == [{"file": None, "cycle": 0, "first_step": 2, "last_step": 4, "complete": True}]

    cpu = _fake_torch(cuda=False)
    backend = torch_hooks.NsysRangeBackend(cpu, config, lambda: holder.get("c"))
    c = Session(config, backend=backend, ranges=FakeRanges())
    holder["c"] = c
    for _ in range(5):
        _iteration(c)
    assert cpu.calls == []
    assert any("never opened" in n for n in c.notes)


def test_import_hook_runs_after_the_module_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fake_torch_xyz").mkdir()
    (tmp_path / "fake_torch_xyz" / "__init__.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[bool] = []
    finder = importhook.TorchImportFinder(lambda m: seen.append(m.READY), target="fake_torch_xyz")
    sys.meta_path.insert(0, finder)
    try:
        import fake_torch_xyz  # type: ignore[import-not-found]

        assert seen == [True]
        assert finder not in sys.meta_path
        assert fake_torch_xyz.__spec__.loader.is_package("fake_torch_xyz")  # delegated
    finally:
        finder.disarm()
        sys.modules.pop("fake_torch_xyz", None)


def test_bootstrap_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = '1'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bootstrap_dir()), str(other)])}
    env.pop(ENV_VAR, None)
    code = "import os, sys; print(os.environ.get('SHADOWED_RAN'), 'torch' in sys.modules, any(type(f).__name__ == 'TorchImportFinder' for f in sys.meta_path))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False", "False"]
    env[ENV_VAR] = CaptureConfig(out=str(tmp_path / "o")).to_json()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False", "True"]  # armed, torch still not imported


# ---------------------------------------------------------------------- the marks


def test_marks_are_free_without_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit import marks

    monkeypatch.setattr(marks, "_REQUESTED", False)
    monkeypatch.setattr(marks, "_SESSION", None)

    def f(x: int) -> int:
        return x + 1

    assert tracekit.range("x")(f) is f
    assert tracekit.step() is tracekit.range("y")
    with tracekit.step(), tracekit.range("inner"):
        pass
    # the same shared no-op object every time: nothing allocated, nothing looked up
    # (its cost is measured by scripts/bench_capture.py, docs/performance.md)
    assert tracekit.range("a") is tracekit.range("b") is marks._INACTIVE


def test_marks_drive_the_session_when_a_capture_is_active(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit import marks

    s, backend, ranges = _session(tmp_path)
    monkeypatch.setattr(marks, "_REQUESTED", True)
    monkeypatch.setattr(marks, "_SESSION", None)

    @tracekit.range("augment")
    def augment() -> int:
        return 7

    assert augment() == 7
    assert ranges.log == []
    monkeypatch.setattr(marks, "_SESSION", s)
    for _ in range(2):
        with tracekit.step():
            assert augment() == 7
            with tracekit.range("loss"):
                pass
    assert ranges.log[:5] == ["[step 0", "+augment", "-augment", "+loss", "-loss"]
    assert backend.calls == ["start", "step 1"]
    assert s.state.explicit


def test_importing_tracekit_does_not_import_torch() -> None:
    code = "import sys, tracekit; tracekit.step; tracekit.range; import tracekit.capture.runner; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------- the wrapper


def test_metadata_says_how_the_run_ended(tmp_path: Path) -> None:
    config = CaptureConfig(out=str(tmp_path))
    reports = [
        {"pid": 11, "rank": 1, "world_size": 2, "gpus": ["H100"], "torch_version": "2.13", "steps": 9,
         "traces": [{"file": "rank1.cycle0.pt.trace.json.gz", "cycle": 0, "first_step": 2, "last_step": 6, "complete": True}]},
        {"pid": 10, "rank": 0, "world_size": 2, "gpus": ["H100"], "steps": 4, "traces": [], "error": "ValueError: x"},
    ]
    meta = runner.build_metadata(command=["python", "t.py"], cwd="/w", config=config, start=0.0, end=2.5, returncode=1,
                                 interrupted=False, reports=reports)
    assert meta["crashed"]
    assert not meta["interrupted"]
    assert meta["exit_code"] == 1
    assert meta["start_time"] == "1970-01-01T00:00:00.000Z"
    assert meta["duration_s"] == 2.5
    assert [r["rank"] for r in meta["ranks"]] == [0, 1]
    assert meta["world_size"] == 2
    assert meta["gpus"] == ["H100"]
    assert meta["ranks"][1]["trace"] == "rank1.cycle0.pt.trace.json.gz"
    assert meta["ranks"][0]["trace"] is None
    assert meta["ranks"][0]["error"] == "ValueError: x"
    assert any("rank 0" in n and "no trace" in n for n in meta["notes"])
    assert meta["schedule"] == {"wait": 1, "warmup": 1, "active": 5, "repeat": 1}

    killed = runner.build_metadata(command=["x"], cwd="/", config=config, start=0, end=1, returncode=-signal.SIGINT,
                                   interrupted=False, reports=[])
    assert killed["exit_code"] == 130
    assert killed["signal"] == "SIGINT"
    assert killed["interrupted"]
    assert not killed["crashed"]
    assert any("no process was instrumented" in n for n in killed["notes"])
    assert runner.exit_status(-9) == (137, "SIGKILL")

    inference = runner.build_metadata(command=["x"], cwd="/", config=config, start=0, end=1, returncode=0, interrupted=False,
                                      reports=[{"pid": 5, "rank": 0, "steps": 1, "steps_completed": 0, "traces": []}])
    assert any("--step-on dataloader" in n for n in inference["notes"])


def test_output_folder_is_never_overwritten_silently(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    runner.prepare_output(out, overwrite=False)  # unrelated files are fine
    (out / "metadata.json").write_text("{}")
    (out / "rank0.cycle0.pt.trace.json.gz").write_bytes(b"")
    (out / "cycle1").mkdir()
    with pytest.raises(UsageError, match="already holds a capture"):
        runner.prepare_output(out, overwrite=False)
    runner.prepare_output(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [".tracekit", "notes.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError):
        runner.prepare_output(tmp_path / "file", overwrite=True)


def test_child_environment_and_command_resolution(tmp_path: Path) -> None:
    config = CaptureConfig(out=str(tmp_path))
    env = runner.child_environment(config, {"PYTHONPATH": "/a:/b", "PATH": os.environ["PATH"]})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(bootstrap_dir()), "/a", "/b"]
    assert CaptureConfig.from_json(env[ENV_VAR]) == config
    assert runner.child_environment(config, {})["PYTHONPATH"] == str(bootstrap_dir())
    with pytest.raises(CaptureError, match="command not found"):
        runner.resolve_command(["no-such-program-tk"], {"PATH": os.environ["PATH"]})
    with pytest.raises(UsageError):
        runner.resolve_command([], {})


def test_cli_errors_are_one_paragraph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "-o", str(tmp_path / "o"), "--", "no-such-program-tk"]) == CaptureError.exit_code
    err = capsys.readouterr().err
    assert "command not found: no-such-program-tk" in err
    assert "Traceback" not in err
    assert main(["capture", "-o", str(tmp_path / "o"), "--active", "0", "--", sys.executable, "-c", "pass"]) == 2
    env_path = os.environ["PATH"]
    try:
        os.environ["PATH"] = str(tmp_path)  # no nsys here
        code = main(["capture", "--backend", "nsys", "-o", str(tmp_path / "n"), "--", sys.executable, "-c", "pass"])
    finally:
        os.environ["PATH"] = env_path
    assert code == ExternalToolError.exit_code
    assert "nsys" in capsys.readouterr().err


def test_plain_command_exit_code_is_preserved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    code = main(["capture", "-o", str(out), "--", sys.executable, "-c", "import sys; sys.exit(3)"])
    assert code == 3
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["exit_code"] == 3
    assert meta["crashed"]
    assert meta["ranks"] == []
    assert any("no process was instrumented" in n for n in meta["notes"])
    assert not (out / ".tracekit").exists()
    assert "no trace was written" in capsys.readouterr().err


def test_nsys_backend_with_a_stand_in_nsys(tmp_path: Path) -> None:
    """A fake ``nsys`` records its arguments, runs the command, and 'exports' a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nsys.log"
    fake = bin_dir / "nsys"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import subprocess, sys
        args = sys.argv[1:]
        with open({str(log)!r}, "a") as fh:
            fh.write(" ".join(args) + "\\n")
        if args[0] == "profile":
            out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
            cmd = [a for a in args[1:] if not a.startswith("--")]
            code = subprocess.call(cmd)
            open(out + ".nsys-rep", "w").write("report")
            sys.exit(code)
        if args[0] == "export":
            out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
            open(out, "w").write("sqlite")
        """))
    fake.chmod(0o755)
    out = tmp_path / "cap"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "tracekit", "capture", "--backend", "nsys", "-o", str(out), "--",
                           sys.executable, "-c", "import sys; sys.exit(5)"], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 5, proc.stderr
    lines = log.read_text().splitlines()
    assert lines[0].startswith("profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop")
    assert lines[1].startswith("export --type=sqlite")
    assert (out / "raw" / "report.nsys-rep").exists()
    assert (out / "rank0.nsys.sqlite").exists()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["backend"] == "nsys"
    assert meta["exit_code"] == 5


# ---------------------------------------------------------------------- end to end (torch on the CPU)

needs_torch = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'tracekit-gpu[capture]')",
)


def _capture(out: Path, *command: str, options: tuple[str, ...] = (), timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "capture", "-o", str(out), *options, "--", *command],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )


def _metadata(out: Path) -> dict[str, Any]:
    return json.loads((out / "metadata.json").read_text())  # type: ignore[no-any-return]


def _names_per_step(trace: Path) -> dict[int, list[str]]:
    """Ranges (tracekit.* and DataLoader) inside each ProfilerStep#N, in order."""
    import polars as pl

    from tracekit.reading.trace import read_trace

    events = read_trace(trace, cache=False).events.filter(pl.col("tid").is_not_null())
    steps = events.filter(pl.col("name").str.contains(r"^ProfilerStep#\d+$")).sort("start_ns")
    out: dict[int, list[str]] = {}
    for name, start, end in steps.select("name", "start_ns", "end_ns").iter_rows():
        inside = events.filter(
            (pl.col("start_ns") >= start) & (pl.col("end_ns") <= end) & pl.col("name").str.starts_with("tracekit.")
        ).sort("start_ns")
        out[int(name.split("#")[1])] = inside["name"].to_list()
    return out


def _findings(out: Path, tmp_path: Path) -> list[str]:
    """Finding kinds of ``tracekit analyze OUT/`` (the folder: a job of one rank)."""
    report = tmp_path / f"{out.name}.json"
    assert main(["analyze", str(out), "--format", "json", "--out", str(report)]) == 0
    return [f["kind"] for f in json.loads(report.read_text())["findings"]]


@needs_torch
def test_capture_slow_dataloader_names_data_loading_and_the_fix_removes_it(tmp_path: Path) -> None:
    """The issue's done-when: numbered steps with DataLoader/forward/backward/optimizer ranges,
    and `tracekit analyze` names data_loading first for the slow loader and not for the fixed one."""
    script = str(EXAMPLES / "slow_dataloader.py")
    stall = tmp_path / "stall"
    proc = _capture(stall, sys.executable, "-W", "ignore", script, options=("--wait", "4"))
    assert proc.returncode == 0, proc.stderr
    assert "next: tracekit analyze" in proc.stderr
    meta = _metadata(stall)
    assert meta["exit_code"] == 0
    assert not meta["crashed"]
    assert meta["world_size"] == 1
    assert meta["torch_version"].startswith("2.")
    assert meta["schedule"]["wait"] == 4
    (rank,) = meta["ranks"]
    assert rank["trace"] == "rank0.cycle0.pt.trace.json.gz"
    assert rank["steps"] == 12
    assert rank["profiled"][0]["complete"]
    steps = _names_per_step(stall / rank["trace"])
    assert sorted(steps) == [5, 6, 7, 8, 9]
    for names in steps.values():
        assert names == ["tracekit.data_loading", "tracekit.forward", "tracekit.backward", "tracekit.optimizer"]
    assert _findings(stall, tmp_path)[:1] == ["data_loading"]


@pytest.mark.slow  # the same capture and analysis as the slow loader's, which runs by default
@needs_torch
def test_capture_fixed_dataloader_is_not_blamed(tmp_path: Path) -> None:
    """The same example with four DataLoader workers: data loading is no longer the first finding."""
    fixed = tmp_path / "fixed"
    proc = _capture(fixed, sys.executable, "-W", "ignore", str(EXAMPLES / "slow_dataloader.py"), "--num-workers", "4",
                    options=("--wait", "4"))
    assert proc.returncode == 0, proc.stderr
    assert _names_per_step(fixed / "rank0.cycle0.pt.trace.json.gz")
    assert "data_loading" not in _findings(fixed, tmp_path)[:1]


@pytest.mark.slow  # three processes importing torch; ranks are claimed in test_traces_are_moved_into_place_and_ranks_are_claimed_once
@needs_torch
def test_capture_two_gloo_ranks_writes_one_trace_per_rank(tmp_path: Path) -> None:
    from tracekit.reading.job import read_job

    out = tmp_path / "ddp"
    proc = _capture(out, sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                    str(EXAMPLES / "ddp.py"), "--steps", "7", options=("--wait", "1", "--active", "4"))
    assert proc.returncode == 0, proc.stderr
    meta = _metadata(out)
    assert meta["world_size"] == 2
    assert [(r["rank"], r["trace"], r["rank_source"]) for r in meta["ranks"]] == [
        (0, "rank0.cycle0.pt.trace.json.gz", "torch.distributed"),
        (1, "rank1.cycle0.pt.trace.json.gz", "torch.distributed"),
    ]  # the torchrun agent imports torch too, and is not a rank
    for r in (0, 1):
        with gzip.open(out / f"rank{r}.cycle0.pt.trace.json.gz", "rt") as fh:
            info = json.load(fh)["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (r, 2, "gloo")
    job = read_job(out, cache=False)
    assert [r.rank for r in job.ranks] == [0, 1]


CRASHING = """
import sys, torch, tracekit
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    with tracekit.step():
        with tracekit.range("my.batch"):
            x = torch.randn(4, 8)
        model(x).sum().backward()
        opt.step()
raise RuntimeError("diverged at step " + sys.argv[1])
"""


@needs_torch
def test_a_crash_keeps_the_trace_and_the_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    out = tmp_path / "crash"
    proc = _capture(out, sys.executable, str(script), "5", options=("--wait", "0", "--warmup", "1", "--active", "8"))
    assert proc.returncode == 1
    assert "RuntimeError: diverged at step 5" in proc.stderr  # the user's traceback is untouched
    meta = _metadata(out)
    assert meta["crashed"]
    assert meta["exit_code"] == 1
    assert not meta["interrupted"]
    (rank,) = meta["ranks"]
    assert rank["error"] == "RuntimeError: diverged at step 5"
    # steps 0-4 ran; the window planned for steps 1-8 holds steps 1-4
    assert rank["profiled"] == [{"cycle": 0, "first_step": 1, "last_step": 4, "complete": False}]
    steps = _names_per_step(out / rank["trace"])
    assert sorted(steps) == [1, 2, 3, 4]  # the recorded window was flushed when the process ended
    assert all(n[:2] == ["tracekit.forward", "tracekit.backward"] or "my.batch" in " ".join(n) for n in steps.values())
    assert any("ended during the recorded window" in n for n in meta["notes"])


SLEEPER = """
import sys, time, torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10_000):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if step == 3:
        print("ready", flush=True)
    time.sleep(0.01)
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@needs_torch
@pytest.mark.parametrize("inherited", ["default", pytest.param("ignored", marks=pytest.mark.slow)])
def test_interrupt_stops_cleanly_and_saves_the_window(tmp_path: Path, inherited: str) -> None:
    """SIGINT to tracekit stops the command, which saves its window; also when tracekit started with
    SIGINT ignored, as a background job of a non-interactive shell does (the command must not
    inherit that)."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    out = tmp_path / "int"
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "capture", "-o", str(out), "--wait", "0", "--warmup", "0", "--active", "100000",
         "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)  # not from a terminal: tracekit forwards it to the command
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    meta = _metadata(out)
    assert meta["interrupted"]
    assert not meta["crashed"]
    assert meta["signal"] == "SIGINT"
    (rank,) = meta["ranks"]
    assert rank["error"] == "KeyboardInterrupt"
    assert rank["trace"]
    assert (out / rank["trace"]).exists()
    assert "waiting for the command to save its traces" in err


# ---------------------------------------------------------------------- shipped samples and hooks


SAMPLES = sorted((REPO / "sample_traces" / "captures").glob("*.expected.json"))


@pytest.mark.parametrize("expected_file", SAMPLES, ids=[p.name.split(".")[0] for p in SAMPLES])
def test_shipped_captures_say_what_they_promise(expected_file: Path, tmp_path: Path) -> None:
    """sample_traces/captures/: each capture's analysis matches its stated expectation."""
    from capture_samples import check, check_program  # scripts/ is on the test path (pyproject.toml)

    doc = json.loads(expected_file.read_text())
    folder = expected_file.with_name(doc["sample"])
    meta = _metadata(folder)
    assert len(meta["ranks"]) == doc["expected"]["ranks"]
    assert all((folder / r["trace"]).stat().st_size < 1_000_000 for r in meta["ranks"])
    assert meta["command"][0] == "python"
    assert meta["cwd"] == "."
    assert check(doc["expected"], _findings(folder, tmp_path)) == []
    assert check_program(doc["expected"], meta) == []


def test_forward_ranges_move_from_global_hooks_to_the_top_level_modules(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.modules import module as nn_module

    s, _, ranges = _session(tmp_path)
    installed = torch_hooks.Installed()
    fwd = torch_hooks.ForwardRanges(lambda: s, lambda: False, installed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    loss_fn = torch.nn.MSELoss()
    x = torch.randn(2, 4)
    try:
        assert fwd.pre in nn_module._global_forward_pre_hooks.values()
        for _ in range(3):
            loss_fn(model(x), x)
            s.optimizer_pre()
            s.optimizer_post()
            fwd.at_boundary(s)
        assert not fwd.discovering
        assert set(fwd.roots) == {id(model), id(loss_fn)}
        assert fwd.pre not in nn_module._global_forward_pre_hooks.values()  # the slow path is gone
        assert ranges.log.count("+tracekit.forward") == 6  # two top-level calls in each of three steps
        model[0](x)  # a submodule called directly after discovery: not a top-level module
        assert ranges.log.count("+tracekit.forward") == 6
    finally:
        installed.remove()
    loss_fn(model(x), x)
    assert ranges.log.count("+tracekit.forward") == 6
    assert not model._forward_pre_hooks

    # in a process that will never be instrumented (a DataLoader worker) the global hooks go away
    worker, _, _ = _session(tmp_path / "w", facts=ProcessFacts(is_worker=lambda: True))
    fwd = torch_hooks.ForwardRanges(lambda: worker, lambda: False, torch_hooks.Installed())
    model(x)
    assert fwd.pre not in nn_module._global_forward_pre_hooks.values()
    assert fwd.post not in nn_module._global_forward_hooks.values()


def test_install_and_uninstall_restore_torch() -> None:
    torch = pytest.importorskip("torch")
    backward, fetch = torch.autograd.backward, torch.utils.data.dataloader._BaseDataLoaderIter.__next__
    torch_hooks.install(torch, lambda: None)
    try:
        assert torch.autograd.backward is not backward
        loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]  # no session: hooks pass through
    finally:
        torch_hooks.uninstall()
    assert torch.autograd.backward is backward
    assert torch.utils.data.dataloader._BaseDataLoaderIter.__next__ is fetch


TERMINATED = """
import os, signal, torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if step == 4:  # what torchrun does to the other ranks when one fails
        os.kill(os.getpid(), signal.SIGTERM)
"""


@pytest.mark.slow  # the SIGINT case runs by default
@needs_torch
def test_sigterm_saves_the_recorded_window(tmp_path: Path) -> None:
    script = tmp_path / "term.py"
    script.write_text(TERMINATED)
    out = tmp_path / "term"
    proc = _capture(out, sys.executable, str(script), options=("--wait", "0", "--warmup", "1", "--active", "50"))
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    meta = _metadata(out)
    assert meta["signal"] == "SIGTERM"
    assert meta["crashed"]
    (rank,) = meta["ranks"]
    assert rank["error"] == "terminated by SIGTERM"
    assert rank["profiled"] == [{"cycle": 0, "first_step": 1, "last_step": 4, "complete": False}]
    assert sorted(_names_per_step(out / rank["trace"])) == [1, 2, 3, 4]


@pytest.mark.slow  # the SIGINT case runs by default
@needs_torch
def test_ctrl_c_in_a_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    """Ctrl-C typed in a terminal signals the whole foreground group: tracekit must not forward
    a second SIGINT (that would interrupt the command's own clean-up)."""
    import fcntl
    import select
    import termios

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER.replace('print("ready", flush=True)', 'print("ready", flush=True)\n        import atexit, time as _t\n        atexit.register(_t.sleep, 0.5)'))
    out = tmp_path / "tty"
    master, slave = os.openpty()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "capture", "-o", str(out), "--wait", "0", "--warmup", "0", "--active", "100000",
         "--", sys.executable, str(script)],
        stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=controlling_terminal, close_fds=True,
    )
    os.close(slave)
    seen = b""
    deadline = time.time() + 120
    while b"ready" not in seen and time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            seen += os.read(master, 4096)
    assert b"ready" in seen, seen
    os.write(master, b"\x03")  # Ctrl-C
    while proc.poll() is None and time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 130, seen.decode(errors="replace")
    meta = _metadata(out)
    assert meta["interrupted"]
    (rank,) = meta["ranks"]
    assert rank["error"] == "KeyboardInterrupt"
    assert (out / rank["trace"]).exists()
    assert seen.count(b"Traceback") == 1, seen.decode(errors="replace")  # one interrupt, one traceback

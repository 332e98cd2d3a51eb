"""The torch-facing half of capture: hooks, ranges and profiler backends.

Everything here receives the ``torch`` module as an argument (it is only ever called after
torch was imported), so tests can hand in small fakes.

Hooks (all no-ops while ``torch.compiler.is_compiling()``, so compiled regions stay whole):

* ``_BaseDataLoaderIter.__next__`` is wrapped: ``tracekit.data_loading`` around every fetch;
* global module forward pre/post hooks: ``tracekit.forward`` around the outermost module call;
* ``torch.autograd.backward`` is wrapped (``Tensor.backward`` calls it): ``tracekit.backward``;
* global optimizer step pre/post hooks: ``tracekit.optimizer``, and the end of a step;
* what the program builds (DataLoaders, optimizers, autocast, ``torch.compile``, CUDA graphs)
  is recorded by :class:`tracekit.capture.program.ProgramRecorder`, whose hooks go in with these.

Ranges go to NVTX (the ``nvtx`` package, domain ``tracekit``; without it ``torch.cuda.nvtx``
on a CUDA machine; otherwise nowhere) and, while a torch profiler records, to
``record_function`` so they appear in Kineto traces too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .backend import NullBackend, ProcessFacts
from .config import NONE, RECORD, RECORD_AND_SAVE, WARMUP, CaptureConfig

if TYPE_CHECKING:
    from .program import ProgramRecorder
    from .session import Session

GetSession = Callable[[], "Session | None"]

#: NVTX domain of every tracekit range
NVTX_DOMAIN = "tracekit"


# ---------------------------------------------------------------------- NVTX


class _NoNvtx:
    name = "none"

    def push(self, name: str) -> None:
        pass

    def pop(self) -> None:
        pass

    def start(self, name: str) -> Any:
        return None

    def end(self, handle: Any) -> None:
        pass


class _NvtxPackage:
    """The ``nvtx`` package, domain ``tracekit``, with cached event attributes."""

    name = "nvtx"

    def __init__(self, nvtx: Any) -> None:
        self._domain = nvtx.get_domain(NVTX_DOMAIN)
        self._attrs: dict[str, Any] = {}

    def _attr(self, name: str) -> Any:
        attr = self._attrs.get(name)
        if attr is None:
            attr = self._attrs[name] = self._domain.get_event_attributes(message=name)
        return attr

    def push(self, name: str) -> None:
        self._domain.push_range(self._attr(name))

    def pop(self) -> None:
        self._domain.pop_range()

    def start(self, name: str) -> Any:
        return self._domain.start_range(self._domain.get_event_attributes(message=name))

    def end(self, handle: Any) -> None:
        if handle is not None:
            self._domain.end_range(handle)


class _TorchCudaNvtx:
    """``torch.cuda.nvtx`` (default domain) when the ``nvtx`` package is missing."""

    name = "torch.cuda.nvtx"

    def __init__(self, nvtx: Any) -> None:
        self._nvtx = nvtx

    def push(self, name: str) -> None:
        self._nvtx.range_push(name)

    def pop(self) -> None:
        self._nvtx.range_pop()

    def start(self, name: str) -> Any:
        return self._nvtx.range_start(name)

    def end(self, handle: Any) -> None:
        if handle is not None:
            self._nvtx.range_end(handle)


def choose_nvtx(torch: Any) -> _NoNvtx | _NvtxPackage | _TorchCudaNvtx:
    """The NVTX emitter for this process (see the module docstring)."""
    try:
        import nvtx
    except ImportError:
        nvtx = None
    if nvtx is not None:
        try:
            return _NvtxPackage(nvtx)
        except Exception:  # a broken nvtx install must not break training
            pass
    try:
        if torch.cuda.is_available():
            return _TorchCudaNvtx(torch.cuda.nvtx)
    except Exception:
        pass
    return _NoNvtx()


class TorchRanges:
    """NVTX ranges always; ``record_function`` ranges while a torch profiler is enabled."""

    def __init__(self, torch: Any, nvtx: Any = None) -> None:
        self._torch = torch
        self._profiler = torch.autograd.profiler
        self._record_function = torch.autograd.profiler.record_function
        self._nvtx = nvtx

    @property
    def nvtx(self) -> Any:
        if self._nvtx is None:
            self._nvtx = choose_nvtx(self._torch)
        return self._nvtx

    def _profiling(self) -> bool:
        flag = getattr(self._profiler, "_is_profiler_enabled", None)
        if flag is None:
            return bool(self._torch.autograd._profiler_enabled())
        return bool(flag)

    def push(self, name: str) -> Any:
        self.nvtx.push(name)
        rf = None
        if self._profiling():
            rf = self._record_function(name)
            rf.__enter__()
        return (rf,)

    def pop(self, handle: Any) -> None:
        rf = handle[0]
        if rf is not None:
            rf.__exit__(None, None, None)
        self.nvtx.pop()

    def start_step(self, step: int) -> Any:
        return self.nvtx.start(f"step {step}")

    def end_step(self, handle: Any) -> None:
        self.nvtx.end(handle)


# ---------------------------------------------------------------------- profiler backends


def sync_events_config(torch: Any) -> Any:
    """``_ExperimentalConfig(enable_cuda_sync_events=True)`` where this torch has it, else None."""
    cls = getattr(getattr(getattr(torch, "_C", None), "_profiler", None), "_ExperimentalConfig", None)
    if cls is None:
        return None
    try:
        return cls(enable_cuda_sync_events=True)
    except TypeError:
        return None


def profiler_kwargs(
    torch: Any, config: CaptureConfig, *, cuda: bool, on_trace_ready: Callable[[Any], None]
) -> tuple[dict[str, Any], bool | None]:
    """Arguments of ``torch.profiler.profile`` for ``config``, and whether CUDA sync events are on
    (None on a machine without a GPU)."""
    prof = torch.profiler
    activities = [prof.ProfilerActivity.CPU]
    if cuda:
        activities.append(prof.ProfilerActivity.CUDA)
    actions = {
        NONE: prof.ProfilerAction.NONE,
        WARMUP: prof.ProfilerAction.WARMUP,
        RECORD: prof.ProfilerAction.RECORD,
        RECORD_AND_SAVE: prof.ProfilerAction.RECORD_AND_SAVE,
    }
    schedule = config.schedule

    def schedule_fn(step: int) -> Any:
        return actions[schedule.action(step)]

    kwargs: dict[str, Any] = {
        "activities": activities,
        "schedule": schedule_fn,
        "on_trace_ready": on_trace_ready,
        "record_shapes": config.record_shapes,
        "profile_memory": config.memory,
        "with_stack": config.with_stack,
    }
    sync: bool | None = None
    if cuda:
        experimental = sync_events_config(torch)
        sync = experimental is not None
        if experimental is not None:
            kwargs["experimental_config"] = experimental
    return kwargs, sync


class TorchProfilerBackend:
    """Backend ``torch``: ``torch.profiler`` on the step schedule, one trace per recorded cycle."""

    name = "torch"

    def __init__(self, torch: Any, config: CaptureConfig, get_session: GetSession) -> None:
        self._torch = torch
        self._config = config
        self._get_session = get_session
        self._prof: Any = None
        self._step = 0
        self._stopping = False
        self.cuda: bool | None = None
        self.sync_events: bool | None = None

    def start(self) -> None:
        torch = self._torch
        self.cuda = bool(torch.cuda.is_available())
        kwargs, self.sync_events = profiler_kwargs(torch, self._config, cuda=self.cuda, on_trace_ready=self._ready)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof = torch.profiler.profile(**kwargs)
            prof.start()
        self._prof = prof

    def step(self, step: int) -> None:
        if self._prof is None:
            return
        self._step = step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._prof.step()

    def stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        self._stopping = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.stop()

    def _ready(self, prof: Any) -> None:
        # called by torch at the end of each recorded cycle (inside step() or stop())
        last = self._step if self._stopping else self._step - 1
        cycle = self._config.schedule.cycle_of(last)
        first = self._config.schedule.recorded_steps(cycle)[0]
        session = self._get_session()
        if session is not None:
            session.save_trace(cycle, first, last, prof.export_chrome_trace)


class NsysRangeBackend:
    """Backend ``nsys``: opens and closes the Nsight Systems capture range
    (``cudaProfilerStart``/``Stop``, ``--capture-range=cudaProfilerApi``) on the step schedule."""

    name = "nsys"

    def __init__(self, torch: Any, config: CaptureConfig, get_session: GetSession) -> None:
        self._torch = torch
        self._schedule = config.schedule
        self._get_session = get_session
        self.recording_since: int | None = None
        self._cuda: bool | None = None

    def _recorded(self, step: int) -> bool:
        return self._schedule.action(step) in (RECORD, RECORD_AND_SAVE)

    def _start(self, step: int) -> None:
        if self._cuda is None:
            self._cuda = bool(self._torch.cuda.is_available())
            if not self._cuda:
                session = self._get_session()
                if session is not None:
                    session.notes.append("no CUDA device in this process: the Nsight Systems capture range was never opened")
        if self._cuda:
            self._torch.cuda.profiler.start()
            self.recording_since = step

    def _stop(self, last: int) -> None:
        if self.recording_since is None:
            return
        self._torch.cuda.synchronize()
        self._torch.cuda.profiler.stop()
        session = self._get_session()
        if session is not None:
            cycle = self._schedule.cycle_of(self.recording_since)
            first, planned_last = self._schedule.recorded_steps(cycle)
            session.traces.append(
                {"file": None, "cycle": cycle, "first_step": self.recording_since, "last_step": last,
                 "complete": self.recording_since <= first and last >= planned_last}
            )
        self.recording_since = None

    def start(self) -> None:
        if self._recorded(0):
            self._start(0)

    def step(self, step: int) -> None:
        previous = step - 1
        if self.recording_since is not None and (
            not self._recorded(step) or self._schedule.action(previous) == RECORD_AND_SAVE
        ):
            self._stop(previous)
        if self.recording_since is None and self._recorded(step):
            self._start(step)

    def stop(self) -> None:
        session = self._get_session()
        self._stop(session.step if session is not None else 0)


def make_backend(torch: Any, config: CaptureConfig, get_session: GetSession) -> Any:
    if config.backend == "torch":
        return TorchProfilerBackend(torch, config, get_session)
    if config.backend == "nsys":
        return NsysRangeBackend(torch, config, get_session)
    return NullBackend()


# ---------------------------------------------------------------------- process facts

#: (rank, world size) variables of common launchers, in order of preference
RANK_VARIABLES = (
    ("RANK", "WORLD_SIZE", "env:RANK"),  # torchrun, accelerate, deepspeed
    ("PMI_RANK", "PMI_SIZE", "env:PMI_RANK"),  # MPICH, Intel MPI
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "env:OMPI_COMM_WORLD_RANK"),  # Open MPI
    ("SLURM_PROCID", "SLURM_NTASKS", "env:SLURM_PROCID"),  # srun
)
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def env_rank_info(environ: Mapping[str, str]) -> tuple[int, int, int | None, str]:
    """(rank, world_size, local_rank, source) from a launcher's environment variables."""
    local = next((v for v in (_int(environ.get(k)) for k in LOCAL_RANK_VARIABLES) if v is not None), None)
    for rank_var, size_var, source in RANK_VARIABLES:
        rank = _int(environ.get(rank_var))
        if rank is not None and rank >= 0:
            size = _int(environ.get(size_var))
            return rank, size if size and size > rank else rank + 1, local, source
    return 0, 1, local, "default"


def process_facts(torch: Any, get_session: GetSession = lambda: None, program: ProgramRecorder | None = None) -> ProcessFacts:
    """How a session learns about this process; ``get_session`` returns the session once it exists
    (the process report says whether its backend records sync events); ``program`` records
    what the program built (the report's ``program`` section)."""

    def rank_info() -> tuple[int, int, int | None, str]:
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                local = env_rank_info(os.environ)[2]
                return int(dist.get_rank()), int(dist.get_world_size()), local, "torch.distributed"
        except Exception:
            pass
        return env_rank_info(os.environ)

    def describe() -> dict[str, Any]:
        return describe_process(torch, get_session)

    def is_worker() -> bool:
        try:
            return torch.utils.data.get_worker_info() is not None
        except Exception:
            return False

    if program is None:
        return ProcessFacts(rank_info=rank_info, describe=describe, is_worker=is_worker)
    return ProcessFacts(rank_info=rank_info, describe=describe, is_worker=is_worker, program=program.snapshot)


def describe_process(torch: Any, get_session: GetSession = lambda: None) -> dict[str, Any]:
    """Versions and devices of this process, without initialising CUDA."""
    version = getattr(torch, "version", None)
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch_version": str(getattr(torch, "__version__", "")) or None,
        "cuda_version": getattr(version, "cuda", None),
        "hip_version": getattr(version, "hip", None),
        "gpus": [],
    }
    try:
        import importlib.metadata as md

        out["nvtx_version"] = md.version("nvtx")
    except Exception:
        out["nvtx_version"] = None
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            out["gpus"] = [str(cuda.get_device_name(i)) for i in range(int(cuda.device_count()))]
    except Exception:
        pass
    session = get_session()
    backend = session.backend if session is not None else None
    out["cuda_sync_events"] = getattr(backend, "sync_events", None)
    ranges = session.ranges if session is not None else None
    nv = getattr(ranges, "_nvtx", None)
    out["nvtx"] = getattr(nv, "name", None)
    return out


# ---------------------------------------------------------------------- hooks


def compiling_check(torch: Any) -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (a function that says False where torch has none)."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:
        return lambda: False
    return fn  # type: ignore[no-any-return]


class Installed:
    """The hooks installed in this process; :meth:`remove` restores torch as it was."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def add(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()


_INSTALLED: Installed | None = None


def install(torch: Any, get_session: GetSession, program: ProgramRecorder | None = None) -> Installed:
    """Install every hook (once per process; a second call returns the first installation),
    with ``program``'s when given."""
    global _INSTALLED
    if _INSTALLED is not None:
        return _INSTALLED
    compiling = compiling_check(torch)
    installed = Installed()
    forward = ForwardRanges(get_session, compiling, installed)
    if program is not None:
        program.watch_modules(forward.modules)
        program.install(installed.add)
    _install_dataloader(torch, get_session, compiling, installed, forward, program)
    _install_backward(torch, get_session, compiling, installed)
    _install_optimizer(torch, get_session, compiling, installed, forward, program)
    _INSTALLED = installed
    return installed


def uninstall() -> None:
    """Remove the hooks (benchmarks and tests compare with and without them in one process)."""
    global _INSTALLED
    if _INSTALLED is not None:
        _INSTALLED.remove()
        _INSTALLED = None


#: steps during which global module hooks find the top-level modules
DISCOVERY_STEPS = 1


class ForwardRanges:
    """``tracekit.forward`` around every top-level module call.

    A global module hook puts every module call of the process on torch's slower call path
    (a few microseconds each: many percent of a short step with hundreds of modules).  So
    the global hooks only run for the first :data:`DISCOVERY_STEPS` step(s), recording which
    modules are called at the top level (the model, the loss module, a DDP or compiled
    wrapper); at the next step boundary they are replaced by hooks on those modules alone.
    A module first called at the top level after that (an evaluation model) gets no range.
    """

    def __init__(self, get: GetSession, compiling: Callable[[], bool], installed: Installed) -> None:
        from torch.nn.modules import module as nn_module

        self._get = get
        self._compiling = compiling
        self.roots: dict[int, Any] = {}  # id → weakref to the module
        self.discovering = True
        self._handles: list[Any] = [nn_module.register_module_forward_pre_hook(self.pre)]
        try:
            self._handles.append(nn_module.register_module_forward_hook(self.post, always_call=True))
        except TypeError:  # torch without always_call: a failing forward leaves the range open
            self._handles.append(nn_module.register_module_forward_hook(self.post))
        installed.add(self.remove)

    def pre(self, module: Any, args: Any) -> None:
        if self._compiling():
            return
        session = self._get()
        if session is None:
            return
        if not session.active:  # a DataLoader worker, a forked child: leave torch's fast path alone
            self.remove()
            return
        if self.discovering and session.state.forward_depth == 0 and session.state.owner in (None, threading.get_ident()):
            key = id(module)
            if key not in self.roots:
                with contextlib.suppress(TypeError):
                    self.roots[key] = weakref.ref(module)
        session.forward_pre()

    def post(self, module: Any, args: Any, output: Any) -> None:
        if self._compiling():
            return
        session = self._get()
        if session is not None:
            session.forward_post()

    def modules(self) -> list[Any]:
        """The top-level modules found so far that are still alive."""
        return [m for m in (ref() for ref in list(self.roots.values())) if m is not None]

    def at_boundary(self, session: Session) -> None:
        """Between steps (no forward running): replace the global hooks once discovery is over."""
        if not self.discovering or session.steps_completed < DISCOVERY_STEPS or session.state.forward_depth:
            return
        alive = self.modules()
        if not alive:
            return
        self.discovering = False
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for module in alive:
            self._handles.append(module.register_forward_pre_hook(self.pre))
            try:
                self._handles.append(module.register_forward_hook(self.post, always_call=True))
            except TypeError:
                self._handles.append(module.register_forward_hook(self.post))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _install_dataloader(
    torch: Any, get: GetSession, compiling: Callable[[], bool], installed: Installed, forward: ForwardRanges,
    program: ProgramRecorder | None = None,
) -> None:
    cls = torch.utils.data.dataloader._BaseDataLoaderIter
    original = cls.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        session = get()
        handle = None
        if session is not None and not compiling():
            if forward.discovering:
                forward.at_boundary(session)
            handle = session.fetch_begin()
        try:
            batch = original(self)
            if program is not None:
                program.fetched(self)
            return batch
        except StopIteration:
            if handle is not None:
                session.end(handle)  # type: ignore[union-attr]
                handle = None
                session.fetch_exhausted()  # type: ignore[union-attr]
            raise
        finally:
            if handle is not None:
                session.end(handle)  # type: ignore[union-attr]

    cls.__next__ = __next__
    installed.add(lambda: setattr(cls, "__next__", original))


def _install_backward(torch: Any, get: GetSession, compiling: Callable[[], bool], installed: Installed) -> None:
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        session = get()
        handle = session.backward_begin() if session is not None and not compiling() else None
        try:
            return original(*args, **kwargs)
        finally:
            if handle is not None:
                session.end(handle)  # type: ignore[union-attr]

    torch.autograd.backward = backward
    installed.add(lambda: setattr(torch.autograd, "backward", original))


def _install_optimizer(
    torch: Any, get: GetSession, compiling: Callable[[], bool], installed: Installed, forward: ForwardRanges,
    program: ProgramRecorder | None = None,
) -> None:
    from torch.optim import optimizer as optim

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        if compiling():
            return
        if program is not None:
            program.optimizer_stepped(opt)
        session = get()
        if session is not None:
            session.optimizer_pre()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        if compiling():
            return
        session = get()
        if session is not None:
            session.optimizer_post()
            if forward.discovering:
                forward.at_boundary(session)

    installed.add(optim.register_optimizer_step_pre_hook(pre).remove)
    installed.add(optim.register_optimizer_step_post_hook(post).remove)

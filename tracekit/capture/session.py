"""The capture session of one process: step numbering, ranges, the profiler schedule and the
process report.

:class:`Session` is the state machine of one process (:mod:`.runtime` creates it and wires it
into the process); it knows nothing about torch (the
torch-facing pieces are handed in, see :mod:`tracekit.capture.torch_hooks`), so its rules
are tested with fakes:

* **Lazy start.** Nothing is profiled until the first training activity (a DataLoader fetch,
  a forward, a backward or an optimizer step) on some thread, which becomes the session's
  thread; hooks firing on other threads (DataParallel replicas) are ignored.  A process
  that only imports torch (a launcher, a compile worker) writes nothing.  DataLoader worker
  processes never start a session.
* **Steps.** Step 0 starts with the first activity.  A step ends when an optimizer step
  returns (or, with ``step_on="dataloader"``, when the next fetch begins); the next step
  begins at the next fetch, forward or backward, so work after ``optimizer.step()`` in the
  loop body (logging, ``loss.item()``) belongs to the step it follows, and optimizer steps
  back to back (one optimizer per parameter group) are one step.  Explicit
  :func:`tracekit.step` blocks take over from the optimizer rule once used.
* **Profiler.** The backend is started at step 0 and told about every new step
  (``torch.profiler``'s ``step()``), so ``ProfilerStep#N`` matches ``step N``.
* **Report.** The process writes ``.tracekit/process-<pid>.json`` in the output folder when
  it starts training, after every trace and at exit: rank, versions, devices, steps, traces,
  what the program built (``program``, :mod:`tracekit.capture.program`) and the error that
  ended it, if any.  The wrapper merges these into ``metadata.json``.
* **Exit.** At exit (normal, an exception, Ctrl-C, or SIGTERM when the script has no handler
  of its own) the profiler is stopped, which saves a recorded window cut short.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backend import Backend, NullBackend, ProcessFacts, Ranges
from .config import CaptureConfig, trace_name

#: phase names, as recognised by tracekit's analyses (tracekit/analysis/patterns.py)
DATA_LOADING = "tracekit.data_loading"
FORWARD = "tracekit.forward"
BACKWARD = "tracekit.backward"
OPTIMIZER = "tracekit.optimizer"


@dataclass
class _State:
    started: bool = False
    enabled: bool = True
    step: int = 0
    in_step: bool = False
    step_handle: Any = None
    pending: bool = False
    explicit: bool = False
    owner: int | None = None
    forward_depth: int = 0
    forward_handle: Any = None
    optimizer_handles: list[Any] = field(default_factory=list)


class Session:
    """The capture state of one process (rules in the module docstring)."""

    def __init__(
        self,
        config: CaptureConfig,
        *,
        backend: Backend,
        ranges: Ranges,
        facts: ProcessFacts | None = None,
        pid: int | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.ranges = ranges
        self.facts = facts or ProcessFacts()
        self.pid = os.getpid() if pid is None else pid
        self.state = _State()
        self.traces: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.error: str | None = None
        self.interrupted = False
        self.finished = False
        self.start_time: str | None = None
        self.steps_seen = 0
        self._opened_by_fetch = False
        self.steps_completed = 0
        self._rank: tuple[int, int, int | None, str] | None = None
        self._claimed: dict[int, bool] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ activity rules

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def active(self) -> bool:
        """Whether this process is (or may become) instrumented."""
        return self.state.enabled and not self.finished

    def _owned(self) -> bool:
        st = self.state
        if not st.enabled or self.finished:
            return False
        if st.owner is None:
            return True
        return st.owner == threading.get_ident()

    def _start(self) -> bool:
        st = self.state
        if self.facts.is_worker():
            st.enabled = False
            return False
        st.started = True
        st.owner = threading.get_ident()
        self.start_time = _now()
        try:
            self.backend.start()
        except Exception as exc:  # the profiler could not start: keep the ranges, say why
            self.notes.append(f"the {self.backend.name} profiler could not start: {type(exc).__name__}: {exc}")
            self.backend = NullBackend()
        self.write_report()
        return True

    def _advance(self) -> None:
        st = self.state
        st.step += 1
        st.pending = False
        try:
            self.backend.step(st.step)
        except Exception as exc:
            self.notes.append(f"profiler step {st.step} failed: {type(exc).__name__}: {exc}")

    def _open_step(self) -> None:
        st = self.state
        st.step_handle = self.ranges.start_step(st.step)
        st.in_step = True
        self.steps_seen = max(self.steps_seen, st.step + 1)

    def _close_step(self) -> None:
        st = self.state
        if st.in_step:
            self.ranges.end_step(st.step_handle)
            st.in_step = False
            st.step_handle = None

    def _boundary(self) -> None:
        self._close_step()
        if not self.state.pending:
            self.steps_completed += 1
        self.state.pending = True

    def _activity(self, *, starts_iteration: bool, fetch: bool = False) -> bool:
        """Common prologue of every instrumented event; False when not instrumented."""
        st = self.state
        if not st.started and not self._start():
            return False
        if st.pending and starts_iteration:
            self._advance()
        opened = False
        if not st.explicit and not st.in_step and not st.pending:
            self._open_step()
            opened = True
        self._opened_by_fetch = opened and fetch
        return True

    # ------------------------------------------------------------------ hooks call these

    def fetch_begin(self) -> Any:
        """Before a DataLoader fetch; returns a handle for :meth:`end` (None: not instrumented)."""
        if not self._owned():
            return None
        st = self.state
        if self.config.step_on == "dataloader" and st.started and not st.explicit and st.in_step:
            self._boundary()
        if not self._activity(starts_iteration=True, fetch=True):
            return None
        return self.ranges.push(DATA_LOADING)

    def fetch_exhausted(self) -> None:
        """The fetch found the DataLoader exhausted (StopIteration).  When that fetch opened
        a new step, no step happened: the step range is closed and the step stays open for
        the next activity (the next epoch's first fetch continues it)."""
        if not self._owned() or not self._opened_by_fetch:
            return
        st = self.state
        self._opened_by_fetch = False
        if st.in_step:
            self.ranges.end_step(st.step_handle)
            st.in_step = False
            st.step_handle = None
            self.steps_seen = st.step

    def backward_begin(self) -> Any:
        if not self._owned() or not self._activity(starts_iteration=True):
            return None
        return self.ranges.push(BACKWARD)

    def forward_pre(self) -> None:
        """Global module forward pre-hook: only the outermost module call is a range."""
        if not self._owned():
            return
        st = self.state
        st.forward_depth += 1
        if st.forward_depth == 1 and self._activity(starts_iteration=True):
            st.forward_handle = self.ranges.push(FORWARD)

    def forward_post(self) -> None:
        if not self._owned():
            return
        st = self.state
        if st.forward_depth == 0:
            return
        st.forward_depth -= 1
        if st.forward_depth == 0 and st.forward_handle is not None:
            handle, st.forward_handle = st.forward_handle, None
            self.ranges.pop(handle)

    def optimizer_pre(self) -> None:
        if not self._owned():
            self.state.optimizer_handles.append(None)
            return
        # a pending boundary is not taken here: optimizers stepping back to back are one step
        if self._activity(starts_iteration=False):
            self.state.optimizer_handles.append(self.ranges.push(OPTIMIZER))
        else:
            self.state.optimizer_handles.append(None)

    def optimizer_post(self) -> None:
        st = self.state
        handle = st.optimizer_handles.pop() if st.optimizer_handles else None
        if handle is not None:
            self.ranges.pop(handle)
        if not self._owned() or not st.started:
            return
        if not st.explicit and self.config.step_on == "optimizer":
            self._boundary()

    def end(self, handle: Any) -> None:
        """Close a range opened by :meth:`fetch_begin`, :meth:`backward_begin` or :meth:`user_range`."""
        if handle is not None:
            self.ranges.pop(handle)

    # ------------------------------------------------------------------ explicit marks

    def user_step_begin(self) -> bool:
        if not self._owned():
            return False
        st = self.state
        if not st.started and not self._start():
            return False
        st.explicit = True
        if st.pending:
            self._advance()
        if not st.in_step:
            self._open_step()
        return True

    def user_step_end(self, began: bool) -> None:
        if began and self._owned():
            self._boundary()

    @contextmanager
    def user_step(self) -> Iterator[None]:
        began = self.user_step_begin()
        try:
            yield
        finally:
            self.user_step_end(began)

    def user_range(self, name: str) -> Any:
        """Open a user range (no step logic; any thread: NVTX and record_function ranges are
        per thread); close it with :meth:`end` on the same thread."""
        if not self.state.enabled or self.finished:
            return None
        return self.ranges.push(name)

    # ------------------------------------------------------------------ rank, traces, report

    def rank_info(self) -> tuple[int, int, int | None, str]:
        """(rank, world_size, local_rank, source), remembered once torch.distributed answered."""
        if self._rank is not None:
            return self._rank
        info = self.facts.rank_info()
        if info[3] == "torch.distributed":
            self._rank = info
        return info

    def trace_path(self, cycle: int) -> tuple[str, Path]:
        """(relative name, absolute path) for this process's trace of ``cycle``."""
        rank = self.rank_info()[0]
        pid = None if self._claim(rank) else self.pid
        name = trace_name(rank, cycle, backend=self.backend.name, pid=pid)
        return name, Path(self.config.out) / name

    def _claim(self, rank: int) -> bool:
        """Whether this process owns ``rank`` in the output folder (the first to ask does)."""
        if rank in self._claimed:
            return self._claimed[rank]
        marker = self.config.process_dir / f"rank{rank}.claim"
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(marker.read_text().strip() or -1)
            except (OSError, ValueError):
                owner = -1
            ok = owner == self.pid
        except OSError:
            ok = True
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(str(self.pid))
            ok = True
        self._claimed[rank] = ok
        return ok

    def save_trace(self, cycle: int, first_step: int, last_step: int, write: Callable[[str], None]) -> str | None:
        """Write one trace through ``write(temporary_path)`` and move it into place atomically."""
        with self._lock:
            name, path = self.trace_path(cycle)
            tmp = self.config.process_dir / f"tmp-{self.pid}-{cycle}.pt.trace.json.gz"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.parent.mkdir(parents=True, exist_ok=True)
                write(str(tmp))
                os.replace(tmp, path)
            except Exception as exc:
                self.notes.append(f"could not write the trace of cycle {cycle}: {type(exc).__name__}: {exc}")
                _warn(f"could not write {path}: {exc}")
                return None
            first, last = self.config.schedule.recorded_steps(cycle)
            self.traces.append(
                {
                    "file": name,
                    "cycle": cycle,
                    "first_step": first_step,
                    "last_step": last_step,
                    "complete": first_step <= first and last_step >= last,
                }
            )
            self.write_report()
            return name

    def report(self) -> dict[str, Any]:
        rank, world, local, source = self.rank_info()
        st = self.state
        data: dict[str, Any] = {
            "pid": self.pid,
            "ppid": os.getppid(),
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "rank": rank,
            "world_size": world,
            "local_rank": local,
            "rank_source": source,
            "backend": self.backend.name,
            "start_time": self.start_time,
            "end_time": _now() if self.finished else None,
            "steps": self.steps_seen,
            "steps_completed": self.steps_completed,
            "explicit_steps": st.explicit,
            "traces": list(self.traces),
            "error": self.error,
            "interrupted": self.interrupted,
            "notes": list(self.notes),
        }
        try:
            data.update(self.facts.describe())
        except Exception as exc:
            data.setdefault("notes", []).append(f"could not describe the process: {exc}")
        try:
            program = self.facts.program(self.finished)
        except Exception as exc:
            data["notes"].append(f"could not record what the program built: {type(exc).__name__}: {exc}")
        else:
            if program is not None:
                data["program"] = program
        return data

    def write_report(self) -> None:
        if not self.state.started:
            return
        folder = self.config.process_dir
        path = folder / f"process-{self.pid}.json"
        tmp = folder / f".process-{self.pid}.json.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.report(), indent=1, default=str), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            _warn(f"could not write the process report {path}: {exc}")

    # ------------------------------------------------------------------ lifecycle

    def record_exception(self, exc_type: type[BaseException], exc: BaseException) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            self.interrupted = True
            self.error = "KeyboardInterrupt"
        elif not issubclass(exc_type, SystemExit):
            self.error = f"{exc_type.__name__}: {exc}"[:2000]

    def finish(self) -> None:
        """At exit: close the step, stop the profiler (saving a partial window), write the report."""
        if self.finished or os.getpid() != self.pid:
            return
        with self._lock:
            if not self.state.started:
                self.finished = True
                return
            self._close_step()
            try:
                self.backend.stop()
            except Exception as exc:
                self.notes.append(f"stopping the profiler failed: {type(exc).__name__}: {exc}")
            self.finished = True
            self.write_report()

    def disable(self) -> None:
        """Stop instrumenting (a forked child of an instrumented process)."""
        self.state.enabled = False


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _warn(message: str) -> None:
    with suppress(OSError, ValueError):
        sys.stderr.write(f"tracekit: {message}\n")

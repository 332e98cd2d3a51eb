"""What a capture session is handed by the torch-facing code: a profiler backend, named
ranges and facts about its process.

:mod:`tracekit.capture.runtime` (the session) and :mod:`tracekit.capture.torch_hooks` (the
torch-facing implementations) both import these; neither imports the other at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Backend(Protocol):
    """What a profiler backend does at the session's step boundaries."""

    name: str

    def start(self) -> None: ...

    def step(self, step: int) -> None: ...

    def stop(self) -> None: ...


class Ranges(Protocol):
    """Named ranges (NVTX and, while a torch profiler records, record_function)."""

    def push(self, name: str) -> Any: ...

    def pop(self, handle: Any) -> None: ...

    def start_step(self, step: int) -> Any: ...

    def end_step(self, handle: Any) -> None: ...


class NullBackend:
    """Backend ``none``: ranges only, no profiler."""

    name = "none"

    def start(self) -> None:
        pass

    def step(self, step: int) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class ProcessFacts:
    """How the session learns about its process (torch-dependent parts come from hooks)."""

    #: (rank, world_size, local_rank, where the rank came from)
    rank_info: Callable[[], tuple[int, int, int | None, str]] = lambda: (0, 1, None, "default")
    #: versions, devices and capabilities, for the process report
    describe: Callable[[], dict[str, Any]] = dict
    #: True inside a DataLoader worker process (never instrumented)
    is_worker: Callable[[], bool] = lambda: False
    #: the report's ``program`` section (what the program built), given whether the process is
    #: exiting; None: not recorded (:class:`tracekit.capture.program.ProgramRecorder`)
    program: Callable[[bool], dict[str, Any] | None] = lambda final: None


__all__ = ["Backend", "NullBackend", "ProcessFacts", "Ranges"]

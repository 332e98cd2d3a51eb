"""The contract between ``tracekit capture`` and the processes it instruments.

The wrapper passes one JSON object in the environment variable :data:`ENV_VAR` and puts the
bootstrap directory (:func:`bootstrap_dir`, a ``sitecustomize`` module) first on
``PYTHONPATH``.  Every Python process of the command's tree then reads the same
:class:`CaptureConfig`; the ones that import torch and train get instrumented.

This module is imported by the bootstrap in every child process, so it uses the standard
library only and costs almost nothing to import.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

#: the environment variable holding the JSON configuration; its presence requests a capture
ENV_VAR = "TRACEKIT_CAPTURE"
#: version of the JSON contract (bumped when a field changes meaning)
CONTRACT_VERSION = 1
#: profiler backends: ``torch`` (torch.profiler → Kineto traces), ``nsys`` (Nsight Systems
#: capture range + NVTX), ``none`` (NVTX and record_function ranges only)
BACKENDS = ("torch", "nsys", "none")
#: what ends a training step: the optimizer's step() (default) or each DataLoader fetch
STEP_ON = ("optimizer", "dataloader")
#: hidden folder of the output where processes leave their reports for the wrapper
PROCESS_DIR = ".tracekit"

#: schedule phases (the same names torch.profiler uses, lower case)
NONE, WARMUP, RECORD, RECORD_AND_SAVE = "none", "warmup", "record", "record_and_save"


@dataclass(frozen=True)
class Schedule:
    """Which steps are profiled: ``wait`` steps skipped, ``warmup`` steps traced and thrown
    away, ``active`` steps recorded; the cycle runs ``repeat`` times (0: until the run ends).

    Steps are numbered from 0, the first training step of each process.
    """

    wait: int = 1
    warmup: int = 1
    active: int = 5
    repeat: int = 1

    def problems(self) -> list[str]:
        """What is wrong with these numbers (empty when they are usable)."""
        out = []
        for name in ("wait", "warmup", "repeat"):
            if getattr(self, name) < 0:
                out.append(f"--{name} must be 0 or more (got {getattr(self, name)})")
        if self.active < 1:
            out.append(f"--active must be at least 1 (got {self.active})")
        return out

    @property
    def cycle_length(self) -> int:
        return self.wait + self.warmup + self.active

    def action(self, step: int) -> str:
        """The phase of ``step``: :data:`NONE`, :data:`WARMUP`, :data:`RECORD` or
        :data:`RECORD_AND_SAVE` (the last recorded step of a cycle).  Same rule as
        ``torch.profiler.schedule``."""
        if step < 0:
            return NONE
        n = self.cycle_length
        if self.repeat > 0 and step >= self.repeat * n:
            return NONE
        pos = step % n
        if pos < self.wait:
            return NONE
        if pos < self.wait + self.warmup:
            return WARMUP
        return RECORD if pos < n - 1 else RECORD_AND_SAVE

    def cycle_of(self, step: int) -> int:
        """The cycle (0, 1, ...) a step belongs to."""
        return max(step, 0) // self.cycle_length

    def recorded_steps(self, cycle: int = 0) -> tuple[int, int]:
        """First and last step recorded in ``cycle``."""
        first = cycle * self.cycle_length + self.wait + self.warmup
        return first, first + self.active - 1

    def describe(self) -> str:
        first, last = self.recorded_steps(0)
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        if self.repeat == 1:
            return steps
        if self.repeat == 0:
            return f"{steps}, again every {self.cycle_length} steps until the run ends"
        return f"{steps}, again every {self.cycle_length} steps ({self.repeat} cycles)"

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CaptureConfig:
    """Everything an instrumented process needs to know, passed through :data:`ENV_VAR`."""

    #: absolute path of the output folder
    out: str
    backend: str = "torch"
    schedule: Schedule = field(default_factory=Schedule)
    with_stack: bool = False
    record_shapes: bool = False
    memory: bool = False
    step_on: str = "optimizer"
    #: folder holding the ``tracekit`` package, for children whose Python cannot import it
    tracekit_path: str | None = None

    def problems(self) -> list[str]:
        out = list(self.schedule.problems())
        if self.backend not in BACKENDS:
            out.append(f"unknown backend {self.backend!r} (choose from {', '.join(BACKENDS)})")
        if self.step_on not in STEP_ON:
            out.append(f"unknown step boundary {self.step_on!r} (choose from {', '.join(STEP_ON)})")
        return out

    @property
    def process_dir(self) -> Path:
        return Path(self.out) / PROCESS_DIR

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        data["version"] = CONTRACT_VERSION
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureConfig:
        """Parse :meth:`to_json` output; raises ``ValueError`` on anything else."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the capture configuration is not a JSON object")
        version = data.pop("version", None)
        if version != CONTRACT_VERSION:
            raise ValueError(f"capture configuration version {version!r}, expected {CONTRACT_VERSION}")
        sched = data.pop("schedule", {})
        if not isinstance(sched, dict):
            raise ValueError("schedule is not an object")
        try:
            schedule = Schedule(**{k: int(v) for k, v in sched.items()})
            config = cls(schedule=schedule, **data)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc
        if not isinstance(config.out, str) or not config.out:
            raise ValueError("out is not a folder name")
        problems = config.problems()
        if problems:
            raise ValueError("; ".join(problems))
        return config

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> CaptureConfig | None:
        """The configuration of this process, or None when no capture was requested."""
        env = os.environ if environ is None else environ
        text = env.get(ENV_VAR)
        if not text:
            return None
        return cls.from_json(text)


def bootstrap_dir() -> Path:
    """The directory put first on the children's ``PYTHONPATH`` (holds ``sitecustomize.py``)."""
    return Path(__file__).resolve().parent / "bootstrap"


def trace_name(rank: int, cycle: int, *, backend: str = "torch", pid: int | None = None) -> str:
    """File name (relative to the output folder) of one rank's trace.

    ``rank{R}.cycle{C}.pt.trace.json.gz`` for the torch backend; cycles after the first go
    to a ``cycle{C}/`` subfolder so the top level holds exactly one trace per rank.  ``pid``
    is added when two processes claim the same rank.
    """
    who = f"rank{rank}" if pid is None else f"rank{rank}.pid{pid}"
    if backend == "nsys":
        return f"{who}.nsys.sqlite"
    name = f"{who}.cycle{cycle}.pt.trace.json.gz"
    return name if cycle == 0 else f"cycle{cycle}/{name}"


#: the longest file name (one path part, in UTF-8 bytes) common file systems allow
NAME_MAX = 255


def is_inside_name(name: object) -> bool:
    """Whether ``name`` is a path that stays inside the folder it is joined to: a non-empty
    relative path with no ``..`` part, no drive, no backslash, no NUL byte and no part longer
    than :data:`NAME_MAX` bytes (the names of :func:`trace_name` are; a name a process report
    gives is used only if it is)."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        return False
    path = PurePosixPath(name)
    if not path.parts or path.is_absolute() or PureWindowsPath(name).drive or ".." in path.parts:
        return False
    try:
        return all(len(part.encode("utf-8")) <= NAME_MAX for part in path.parts)
    except UnicodeEncodeError:  # a lone surrogate: no file has that name
        return False

"""Steady-state step timing for the example loops (``--timing FILE``).

``scripts/gpu_truth.py`` runs each example without tracekit and reads its step time from the
JSON file this writes.  A step's time is the interval between the ends of two consecutive
steps: on CUDA, between CUDA events recorded on the current stream at each step's end (so the
timing itself never waits for the GPU, and the interval is the rate at which the GPU finishes
steps, whoever holds it up); on the CPU, between ``time.perf_counter()`` readings.  The first
``--timing-warmup`` steps are not timed (the end of the last of them starts the clock); ``torch.cuda.synchronize()`` brackets the timed ones,
which also gives the wall-clock time per step as a cross-check.

Without ``--timing`` nothing is measured and the loop runs exactly as before.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timing", type=Path, metavar="FILE", help="write the steady-state step times to FILE (JSON)")
    parser.add_argument("--timing-warmup", type=int, default=10, metavar="N", help="steps before the timed ones (default 10, at least 1)")


class StepClock:
    """Call :meth:`step` at the end of every training step and :meth:`finish` after the loop."""

    def __init__(self, torch: Any, device: Any, path: Path | None, warmup: int) -> None:
        self._torch = torch
        self._cuda = getattr(device, "type", str(device)) == "cuda"
        self._path = path
        self._warmup = max(warmup, 1)  # the timing starts at the end of a step
        self._steps = 0
        self._marks: list[Any] = []
        self._wall_start: float | None = None

    def _mark(self) -> Any:
        if self._cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def step(self) -> None:
        self._steps += 1
        if self._path is None or self._steps < self._warmup:
            return
        if self._steps == self._warmup:  # the end of the last warm-up step starts the timing
            if self._cuda:
                self._torch.cuda.synchronize()
            self._wall_start = time.perf_counter()
        self._marks.append(self._mark())

    def finish(self, **facts: Any) -> dict[str, Any] | None:
        """Write the timing (with ``facts`` such as the batch size) and return it; None without ``--timing``."""
        if self._path is None:
            return None
        if self._cuda:
            self._torch.cuda.synchronize()
        wall_end = time.perf_counter()
        marks = self._marks
        if self._cuda:
            step_ms = [float(a.elapsed_time(b)) for a, b in itertools.pairwise(marks)]
        else:
            step_ms = [(b - a) * 1e3 for a, b in itertools.pairwise(marks)]
        result: dict[str, Any] = {
            "device": "cuda" if self._cuda else "cpu",
            "clock": "cuda_events" if self._cuda else "perf_counter",
            "warmup_steps": self._warmup,
            "steps_timed": len(step_ms),
            "step_ms": [round(t, 4) for t in step_ms],
            "median_step_ms": round(statistics.median(step_ms), 4) if step_ms else None,
            "mean_step_ms": round(statistics.fmean(step_ms), 4) if step_ms else None,
            "wall_ms_per_step": round((wall_end - self._wall_start) * 1e3 / len(step_ms), 4)
            if step_ms and self._wall_start is not None else None,
            **facts,
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return result


def pick_device(torch: Any, name: str) -> Any:
    """``auto``: CUDA when available, else the CPU; otherwise the device named."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)

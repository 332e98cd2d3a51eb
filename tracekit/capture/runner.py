"""The wrapper side of ``tracekit capture``: run the command, then describe what it left.

:func:`run_capture` prepares the output folder, starts the command with the capture
environment (:mod:`tracekit.capture.config`) — under ``nsys profile`` for the ``nsys``
backend — waits for it while passing interrupts on, exports the Nsight report, merges the
per-process reports into ``metadata.json`` and returns the command's exit status.

Output folder::

    OUT/metadata.json                        what ran, when, how it ended, every rank's trace
    OUT/rank{R}.cycle0.pt.trace.json.gz      torch backend: one Kineto trace per rank
    OUT/cycle{C}/rank{R}.cycle{C}...         later cycles (--repeat > 1)
    OUT/rank{R}.nsys.sqlite                  nsys backend, one process (job.nsys.sqlite: several)
    OUT/raw/report.nsys-rep                  nsys backend: the report itself, for Nsight Systems

Interrupts: the first Ctrl-C reaches the command directly when both run in the terminal's
foreground (and is forwarded otherwise); tracekit then waits for the command to save its
traces.  A second Ctrl-C terminates the command (SIGTERM), a third kills it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from .._version import __version__
from ..errors import CaptureError, ExternalToolError, UsageError
from .config import ENV_VAR, PROCESS_DIR, CaptureConfig, bootstrap_dir, is_inside_name

METADATA = "metadata.json"
#: format name and version of metadata.json (2 added the ``program`` section: what each rank's
#: program built, tracekit.capture.program; readers accept 1 and 2)
METADATA_FORMAT = "tracekit-capture"
METADATA_VERSION = 2
NSYS_REPORT = "raw/report"
NSYS_TRACE = "cuda,nvtx,osrt"


@dataclass(frozen=True)
class CaptureResult:
    """What a capture produced."""

    out: Path
    exit_code: int
    metadata: dict[str, Any]

    @property
    def traces(self) -> list[str]:
        """Trace files (relative to :attr:`out`), one per rank, rank order."""
        seen: list[str] = []
        for entry in self.metadata.get("ranks", []):
            trace = entry.get("trace")
            if trace and trace not in seen:
                seen.append(trace)
        return seen


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


# ---------------------------------------------------------------------- output folder


def _ours(path: Path) -> bool:
    """Files and folders a previous capture wrote (the only ones --overwrite removes)."""
    name = path.name
    if path.is_dir():
        return name in (PROCESS_DIR, "raw") or (name.startswith("cycle") and name[5:].isdigit())
    return name == METADATA or (name.startswith("rank") and (name.endswith(".pt.trace.json.gz") or name.endswith(".nsys.sqlite"))) or name == "job.nsys.sqlite"


def prepare_output(out: Path, *, overwrite: bool) -> None:
    """Create ``out`` (or check it can be used) and its process-report folder."""
    if out.exists() and not out.is_dir():
        raise UsageError("the output path exists and is not a folder", path=out, hint="choose another --out")
    if out.is_dir():
        previous = [p for p in out.iterdir() if _ours(p)]
        if previous and not overwrite:
            raise UsageError(
                "the output folder already holds a capture",
                path=out,
                hint="pass --overwrite to replace it, or choose another --out",
            )
        for p in previous:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    try:
        (out / PROCESS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder: {exc.strerror or exc}", path=out) from exc


def default_out(now: float | None = None) -> Path:
    """``tracekit-capture-YYYYmmdd-HHMMSS`` in the current folder."""
    return Path(time.strftime("tracekit-capture-%Y%m%d-%H%M%S", time.localtime(now)))


# ---------------------------------------------------------------------- the command


def child_environment(config: CaptureConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: the configuration and the bootstrap first on PYTHONPATH."""
    env = dict(environ)
    env[ENV_VAR] = config.to_json()
    boot = str(bootstrap_dir())
    old = env.get("PYTHONPATH", "")
    parts = [p for p in old.split(os.pathsep) if p and p != boot]
    env["PYTHONPATH"] = os.pathsep.join([boot, *parts])
    return env


def resolve_command(command: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The command with its program resolved on PATH (a clear error when it is not found)."""
    if not command:
        raise UsageError("no command to capture", hint="usage: tracekit capture [OPTIONS] -- python train.py ...")
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not Path(program).exists():
            raise CaptureError(f"the program does not exist: {program}")
        return list(command)
    found = shutil.which(program, path=environ.get("PATH"))
    if found is None:
        raise CaptureError(f"command not found: {program}", hint="check the spelling, or activate the environment that has it")
    return [program, *command[1:]]


def nsys_profile_argv(nsys: str, out: Path, command: Sequence[str], config: CaptureConfig) -> list[str]:
    """``nsys profile`` around the command; the capture range follows the step schedule
    (the instrumented processes call cudaProfilerStart/Stop)."""
    return [
        nsys,
        "profile",
        f"--trace={NSYS_TRACE}",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        f"--output={out / NSYS_REPORT}",
        "--force-overwrite=true",
        *command,
    ]


def nsys_export_argv(nsys: str, report: Path, sqlite: Path) -> list[str]:
    return [nsys, "export", "--type=sqlite", f"--output={sqlite}", "--force-overwrite=true", str(report)]


def find_nsys(environ: Mapping[str, str]) -> str:
    found = shutil.which("nsys", path=environ.get("PATH"))
    if found is None:
        raise ExternalToolError(
            "the nsys backend needs Nsight Systems, and `nsys` is not on PATH",
            hint="install Nsight Systems (https://developer.nvidia.com/nsight-systems) and put its bin folder on PATH, "
            "or use --backend torch",
        )
    return found


class _Interrupts:
    """Signal handling while the command runs (see the module docstring)."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        #: the command, once started (the handlers are installed before it starts, see :func:`_run`)
        self.proc: subprocess.Popen[bytes] | None = None
        self.echo = echo
        self.count = 0
        self.terminated = False
        self._previous: dict[int, Any] = {}

    def _in_foreground(self) -> bool:
        try:
            fd = sys.stdin.fileno()
            return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
        except (OSError, ValueError, AttributeError):
            return False

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.count == 1:
            if not self._in_foreground():
                self.proc.send_signal(signal.SIGINT)
            self.echo("tracekit: interrupted; waiting for the command to save its traces (Ctrl-C again to stop it now)")
        elif self.count == 2:
            self.echo("tracekit: terminating the command")
            self.proc.terminate()
        else:
            self.proc.kill()

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def __enter__(self) -> _Interrupts:
        try:
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self.on_sigint)
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self.on_sigterm)
            if hasattr(signal, "SIGHUP"):
                self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self.on_sigterm)
        except ValueError:  # not the main thread: leave signals alone
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _run(argv: Sequence[str], env: Mapping[str, str], echo: Callable[[str], None]) -> tuple[int, bool]:
    """Run ``argv`` to completion; (return code as Popen reports it, interrupted)."""
    # the handlers go in before the command starts: a signal handled here reaches the command with
    # its default action, whereas one tracekit inherited as ignored (a background job of a
    # non-interactive shell starts with SIGINT ignored) would stay ignored there, and the forwarded
    # Ctrl-C would never stop it
    with _Interrupts(echo) as interrupts:
        try:
            proc = subprocess.Popen(list(argv), env=dict(env))
        except OSError as exc:
            raise CaptureError(f"could not start {argv[0]}: {exc.strerror or exc}") from exc
        interrupts.proc = proc
        if interrupts.count or interrupts.terminated:  # interrupted while it was starting
            proc.send_signal(signal.SIGINT if interrupts.count else signal.SIGTERM)
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # a handler could not be installed: forward and keep waiting
                interrupts.on_sigint(signal.SIGINT, None)
    return code, interrupts.count > 0 or interrupts.terminated


def exit_status(returncode: int) -> tuple[int, str | None]:
    """(shell-style exit code, signal name) from a Popen return code (negative: killed by a signal)."""
    if returncode >= 0:
        return returncode, None
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return 128 + signum, name


# ---------------------------------------------------------------------- metadata


#: fields of a process report the wrapper computes with, and the types it accepts for them
_REPORT_FIELDS: dict[str, tuple[type, ...]] = {
    "pid": (int,),
    "rank": (int, type(None)),
    "world_size": (int, type(None)),
    "steps": (int, type(None)),
    "steps_completed": (int, type(None)),
    "traces": (list,),
    "gpus": (list, type(None)),
    "notes": (list, type(None)),
}


def read_process_reports(out: Path) -> list[dict[str, Any]]:
    """The reports instrumented processes left in ``OUT/.tracekit``.

    Unreadable reports, and reports whose fields have the wrong types, are skipped; a trace
    entry is kept only when its file name stays inside ``out`` (:func:`is_inside_name`).
    """
    reports = []
    folder = out / PROCESS_DIR
    for path in sorted(folder.glob("process-*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        data.setdefault("traces", [])
        if all(isinstance(data.get(k), types) for k, types in _REPORT_FIELDS.items()):
            data["traces"] = [t for t in data["traces"] if isinstance(t, dict) and is_inside_name(t.get("file"))]
            reports.append(data)
    return reports


def _first(reports: Sequence[Mapping[str, Any]], key: str) -> Any:
    return next((r[key] for r in reports if r.get(key)), None)


def program_section(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``metadata.json``'s ``program``: each instrumented process's ``program`` report, with its
    rank and pid, in the order of ``ranks``; a process whose report has none (or not an object)
    is left out."""
    from .program import PROGRAM_VERSION

    ranks = []
    for r in sorted(reports, key=lambda r: (int(r.get("rank") or 0), int(r["pid"]))):
        facts = r.get("program")
        if isinstance(facts, dict):
            ranks.append({"rank": int(r.get("rank") or 0), "pid": int(r["pid"]), **{k: v for k, v in facts.items() if k != "version"}})
    return {"version": PROGRAM_VERSION, "ranks": ranks}


def build_metadata(
    *,
    command: Sequence[str],
    cwd: str,
    config: CaptureConfig,
    start: float,
    end: float,
    returncode: int,
    interrupted: bool,
    reports: Sequence[Mapping[str, Any]],
    nsys_trace: str | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """``metadata.json`` from the run and the process reports (a pure function)."""
    code, signame = exit_status(returncode)
    interrupted = interrupted or signame == "SIGINT" or any(r.get("interrupted") for r in reports)
    ranks: list[dict[str, Any]] = []
    for r in sorted(reports, key=lambda r: (int(r.get("rank") or 0), int(r["pid"]))):
        files = [t["file"] for t in r.get("traces", []) if t.get("file")]
        trace = files[0] if files else (nsys_trace if config.backend == "nsys" and nsys_trace else None)
        ranks.append(
            {
                "rank": int(r.get("rank") or 0),
                "pid": int(r["pid"]),
                "trace": trace,
                "traces": files if files else ([trace] if trace else []),
                "host": r.get("host"),
                "local_rank": r.get("local_rank"),
                "rank_source": r.get("rank_source"),
                "steps": r.get("steps"),
                "steps_completed": r.get("steps_completed"),
                "profiled": [
                    {k: t.get(k) for k in ("cycle", "first_step", "last_step", "complete")} for t in r.get("traces", [])
                ],
                "error": r.get("error"),
                "notes": list(r.get("notes") or []),
            }
        )
    world = max([int(r.get("world_size") or 1) for r in reports], default=None)
    gpus: list[str] = []
    for r in reports:
        for name in r.get("gpus") or []:
            if name not in gpus:
                gpus.append(str(name))
    all_notes = list(notes)
    if not reports:
        all_notes.append(
            "no process was instrumented: none imported torch and ran a training step with tracekit's bootstrap "
            "active (is the command a Python program? python -I, -E and -S turn the bootstrap off)"
        )
    else:
        first, last = config.schedule.recorded_steps(0)
        for r in ranks:
            if config.backend == "torch" and not r["traces"]:
                if (r["steps"] or 0) <= 1 and not r["steps_completed"]:
                    why = (
                        "no step ended (the script never called optimizer.step()); for an inference loop use "
                        "--step-on dataloader, or mark steps with tracekit.step()"
                    )
                else:
                    why = (
                        f"it ran {r['steps'] or 0} step(s) and the schedule records steps {first}-{last}; lower "
                        "--wait/--warmup or run more steps"
                    )
                all_notes.append(f"rank {r['rank']} (pid {r['pid']}) wrote no trace: {why}")
            elif any(not p["complete"] for p in r["profiled"]):
                short = [p for p in r["profiled"] if not p["complete"]]
                all_notes.append(
                    f"rank {r['rank']}: the run ended during the recorded window (trace of cycle {short[0]['cycle']} "
                    f"holds steps {short[0]['first_step']}-{short[0]['last_step']})"
                )
    return {
        "format": METADATA_FORMAT,
        "format_version": METADATA_VERSION,
        "tracekit_version": __version__,
        "command": list(command),
        "cwd": cwd,
        "host": socket.gethostname(),
        "start_time": _utc(start),
        "end_time": _utc(end),
        "duration_s": round(end - start, 3),
        "exit_code": code,
        "signal": signame,
        "crashed": code != 0 and not interrupted,
        "interrupted": interrupted,
        "backend": config.backend,
        "schedule": config.schedule.to_dict(),
        "options": {
            "with_stack": config.with_stack,
            "record_shapes": config.record_shapes,
            "memory": config.memory,
            "step_on": config.step_on,
        },
        "world_size": world,
        "torch_version": _first(reports, "torch_version"),
        "cuda_version": _first(reports, "cuda_version") or _first(reports, "hip_version"),
        "gpus": gpus,
        "cuda_sync_events": _first(reports, "cuda_sync_events"),
        "nvtx": _first(reports, "nvtx"),
        "nvtx_version": _first(reports, "nvtx_version"),
        "ranks": ranks,
        "program": program_section(reports),
        "notes": all_notes,
    }


def write_metadata(out: Path, metadata: Mapping[str, Any]) -> Path:
    path = out / METADATA
    tmp = out / (METADATA + ".tmp")
    tmp.write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------- the whole capture


def run_capture(
    command: Sequence[str],
    config: CaptureConfig,
    *,
    overwrite: bool = False,
    echo: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CaptureResult:
    """Run ``command`` under capture and describe the result (see the module docstring)."""
    say = echo or (lambda text: None)
    env_in = dict(os.environ if environ is None else environ)
    problems = config.problems()
    if problems:
        raise UsageError("; ".join(problems))
    argv = resolve_command(command, env_in)
    nsys = find_nsys(env_in) if config.backend == "nsys" else None
    if nsys is not None and config.schedule.repeat != 1:
        raise UsageError("the nsys backend records one window: use --repeat 1")
    out = Path(config.out)
    prepare_output(out, overwrite=overwrite)
    env = child_environment(config, env_in)
    if nsys is not None:
        (out / NSYS_REPORT).parent.mkdir(parents=True, exist_ok=True)
        argv = nsys_profile_argv(nsys, out, argv, config)

    start = time.time()
    returncode, interrupted = _run(argv, env, say)
    end = time.time()

    reports = read_process_reports(out)
    notes: list[str] = []
    nsys_trace = None
    if nsys is not None:
        nsys_trace, note = _export_nsys(nsys, out, reports, say)
        if note:
            notes.append(note)
    metadata = build_metadata(
        command=command, cwd=os.getcwd(), config=config, start=start, end=end, returncode=returncode,
        interrupted=interrupted, reports=reports, nsys_trace=nsys_trace, notes=notes,
    )
    write_metadata(out, metadata)
    shutil.rmtree(out / PROCESS_DIR, ignore_errors=True)
    return CaptureResult(out=out, exit_code=metadata["exit_code"], metadata=metadata)


def _export_nsys(nsys: str, out: Path, reports: Sequence[Mapping[str, Any]], say: Callable[[str], None]) -> tuple[str | None, str | None]:
    report = out / (NSYS_REPORT + ".nsys-rep")
    if not report.exists():
        return None, "nsys wrote no report (no process opened the capture range: no CUDA work in the recorded steps?)"
    ranks = sorted({int(r.get("rank") or 0) for r in reports}) or [0]
    name = f"rank{ranks[0]}.nsys.sqlite" if len(ranks) == 1 else "job.nsys.sqlite"
    say(f"tracekit: exporting {report} to SQLite")
    proc = subprocess.run(nsys_export_argv(nsys, report, out / name), capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not (out / name).exists():
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"nsys export failed ({detail[-1] if detail else f'exit code {proc.returncode}'}); the report is {report}"
    return name, None

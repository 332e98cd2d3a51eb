#!/usr/bin/env python3
"""The real-GPU truth campaign: every cause tracekit prices, measured before and after its fix.

Each *pair* is an example loop of ``scripts/examples/`` run before and after one change (a
*chain* applies several changes one after another).  Each configuration (a *run*) is

1. timed without tracekit: ``--steps 40 --timing-warmup 10 --timing FILE``, so the median of
   30 steady steps, timed with CUDA events between ``torch.cuda.synchronize()`` calls on a GPU
   (``scripts/examples/_timing.py``), and
2. captured with ``tracekit capture --with-stack --record-shapes`` for a few steps, into
   ``OUT/<run>/`` (metadata.json and one Kineto trace).

``OUT/measured.json`` holds every run's step times, the exact commands, the machine (GPU,
driver, torch and CUDA versions) and every pair's status; it is rewritten after each run, so a
campaign cut short keeps what it measured.  ``scripts/gpu_truth_compare.py`` (run where
tracekit's analysis is installed) analyses each "before" capture and compares its predictions
with the measured "after" runs; ``tests/test_gpu_truth.py`` holds the analysis to them.

    python scripts/gpu_truth.py run [--only PAIR ...] [--out DIR] [--budget-s S] [--dry-run]
    python scripts/gpu_truth.py check-cuda [--out DIR]        # scripts/gpu_truth_check.py
    python scripts/gpu_truth.py device --pack DIR             # a lent GPU machine: both, packed
    python scripts/gpu_truth.py pairs                         # what each pair changes

Without CUDA, every pair that needs a GPU is skipped with a message and the others (the
DataLoader, ``.item()``, element-wise ``.cpu()`` and batch-size pairs) run end to end with
CPU-sized arguments into a temporary folder (never into ``sample_traces/gpu``).

Budget: the campaign must fit one short run of a lent H200 (8 minutes with the CUDA check).
Every run has an estimate of its cost there (``Run.cost_s``: interpreter and torch start-up,
CUDA and cuBLAS initialisation, 40 timed and 8 captured steps sized to tens of milliseconds
each, the profiler's start and the trace's export; ``torch.compile`` compiles twice); the
seventeen runs add up to about five minutes.  A run whose estimate no longer fits the budget
left is skipped (its pairs say so), and every process is stopped when the budget is spent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "scripts" / "examples"
DEFAULT_OUT = REPO / "sample_traces" / "gpu"
MEASURED = "measured.json"
FORMAT = "tracekit-gpu-truth"
FORMAT_VERSION = 1
#: steps before the timed ones, and the timed ones (the issue asks for at least 30)
WARMUP_STEPS, TIMED_STEPS = 10, 30
#: the capture of every run: stacks and shapes, steps 3-5 recorded
CAPTURE_OPTIONS = ("--with-stack", "--record-shapes", "--wait", "2", "--warmup", "1", "--active", "3")
CAPTURE_STEPS = 8
#: seconds for the whole ``run`` on a lent machine, and for ``device`` (the CUDA check included)
RUN_BUDGET_S, DEVICE_BUDGET_S = 420.0, 470.0
#: the longest one process may take
PROCESS_LIMIT_S = 240.0
#: the largest piece of the packed result (the device tool returns files up to 16 MiB)
PACK_PIECE_BYTES = 15 * 2**20


@dataclass(frozen=True)
class Run:
    """One configuration of one example loop."""

    script: str
    #: arguments on a GPU; on the CPU (None: this run needs CUDA)
    gpu: tuple[str, ...] = ()
    cpu: tuple[str, ...] | None = None
    #: estimated seconds on an H200 for its timing and its capture together
    cost_s: float = 14.0
    capture: tuple[str, ...] = CAPTURE_OPTIONS
    capture_steps: int = CAPTURE_STEPS

    def args(self, cuda: bool) -> tuple[str, ...] | None:
        return self.gpu if cuda else self.cpu


@dataclass(frozen=True)
class Pair:
    """A cause and its fix: ``before`` and the run after each change of ``after`` (one for a
    pair, several for a chain), with the finding kinds that price each change (the first kind
    the analysis reports is the one compared)."""

    change: str
    before: str
    after: tuple[str, ...]
    kinds: tuple[tuple[str, ...], ...]
    needs_cuda: bool
    #: compare the time per sample (the batch-size pair) rather than per step
    per_sample: bool = False
    notes: str = ""

    @property
    def runs(self) -> tuple[str, ...]:
        return (self.before, *self.after)


_SMALL_LOADER = ("--batch-size", "32", "--hidden", "256", "--layers", "2", "--sample-us", "400")
_SMALL_ITEM = ("--host-ms", "3", "--log-ms", "0", "--hidden", "256", "--batch-size", "64")
_SMALL_TRANSFERS = ("--batch-size", "128", "--hidden", "256")
_SMALL_MLP = ("--hidden", "256", "--layers", "4")
_TINY = ("--layers", "4", "--width", "20")

RUNS: dict[str, Run] = {
    "loader-w0": Run("preprocess_loader.py", (), _SMALL_LOADER, cost_s=16),
    "loader-w4": Run("preprocess_loader.py", ("--num-workers", "4"), (*_SMALL_LOADER, "--num-workers", "4"), cost_s=18),
    "loader-w4-amp": Run("preprocess_loader.py", ("--num-workers", "4", "--amp"), None, cost_s=18),
    "copy-pageable": Run("pageable_copy.py", (), None, cost_s=15),
    "copy-pinned": Run("pageable_copy.py", ("--pin",), None, cost_s=15),
    "item-every1": Run("item_every_step.py", ("--every", "1", "--host-ms", "3", "--log-ms", "0", "--hidden", "4096",
                                              "--batch-size", "4096"), ("--every", "1", *_SMALL_ITEM), cost_s=12),
    "item-every50": Run("item_every_step.py", ("--every", "50", "--host-ms", "3", "--log-ms", "0", "--hidden", "4096",
                                               "--batch-size", "4096"), ("--every", "50", *_SMALL_ITEM), cost_s=12),
    "transfers-loop": Run("cpu_transfers.py", (), _SMALL_TRANSFERS, cost_s=12),
    "transfers-once": Run("cpu_transfers.py", ("--one-transfer",), (*_SMALL_TRANSFERS, "--one-transfer"), cost_s=12),
    "mlp-fp32": Run("mlp_train.py", (), None, cost_s=15),
    "mlp-bf16": Run("mlp_train.py", ("--precision", "bf16"), None, cost_s=12),
    "mlp-tf32": Run("mlp_train.py", ("--tf32",), None, cost_s=12),
    "mlp-no-caching": Run("mlp_train.py", ("--no-caching",), None, cost_s=16),
    "small-b8": Run("mlp_train.py", (*_SMALL_MLP, "--batch-size", "8"), (*_SMALL_MLP, "--batch-size", "8"), cost_s=11),
    "small-b256": Run("mlp_train.py", (*_SMALL_MLP, "--batch-size", "256"), (*_SMALL_MLP, "--batch-size", "256"), cost_s=11),
    "tiny-eager": Run("tiny_kernels.py", _TINY, None, cost_s=14),
    # compiled twice (its timing and its capture; the second hits Inductor's cache); CUDA graphs are
    # recorded in the first steps after compiling, so the capture waits longer
    "tiny-compiled": Run("tiny_kernels.py", (*_TINY, "--compile"), None, cost_s=80,
                         capture=("--with-stack", "--record-shapes", "--wait", "4", "--warmup", "1", "--active", "3"),
                         capture_steps=10),
}

_AMP = ("fp32_gemm", "no_tensor_cores")
PAIRS: dict[str, Pair] = {
    "dataloader_workers": Pair("DataLoader num_workers 0 -> 4 (CPU-side preprocessing per sample)",
                               "loader-w0", ("loader-w4",), (("data_loading",),), needs_cuda=False),
    "item_every_50": Pair("loss.item() every step -> every 50 steps (the same host work every step)",
                          "item-every1", ("item-every50",), (("host_device_sync",),), needs_cuda=False),
    "one_transfer": Pair("element-wise preds[i].cpu() in a loop -> one preds.cpu()",
                         "transfers-loop", ("transfers-once",), (("host_device_sync",),), needs_cuda=False,
                         notes="the fixed loop still waits for the GPU once per step"),
    "batch_256": Pair("batch 8 -> 256 on a small MLP (time per sample)", "small-b8", ("small-b256",),
                      (("small_batch", "launch_bound", "small_gemm"),), needs_cuda=False, per_sample=True,
                      notes="the finding prices the launch overhead gone at the same batch; the truth is the larger batch's time per sample"),
    "pinned_memory": Pair("pageable host batches -> pinned buffers + .to(non_blocking=True), 256 MiB per batch",
                          "copy-pageable", ("copy-pinned",), (("pageable_memcpy",),), needs_cuda=True),
    "bf16_autocast": Pair("fp32 -> bf16 autocast on a GEMM-heavy MLP", "mlp-fp32", ("mlp-bf16",), (_AMP,), needs_cuda=True),
    "tf32": Pair("TF32 off -> on for fp32 matrix multiplies", "mlp-fp32", ("mlp-tf32",), (_AMP,), needs_cuda=True),
    "caching_allocator": Pair("PYTORCH_NO_CUDA_MEMORY_CACHING=1 -> the caching allocator", "mlp-no-caching", ("mlp-fp32",),
                              (("allocator",),), needs_cuda=True),
    "cuda_graphs": Pair('eager -> torch.compile(mode="reduce-overhead") (CUDA graphs) on a tiny-kernel model',
                        "tiny-eager", ("tiny-compiled",), (("launch_bound", "small_batch"),), needs_cuda=True),
    "loader_then_amp": Pair("a data-bound fp32 loop fixed one change at a time: num_workers 0 -> 4, then bf16 autocast",
                            "loader-w0", ("loader-w4", "loader-w4-amp"), (("data_loading",), _AMP), needs_cuda=True,
                            notes="checks the fix plan's cumulative predictions"),
}


# ---------------------------------------------------------------------- the plan


@dataclass
class Campaign:
    """Which pairs and runs this machine does, and where the results go."""

    cuda: bool
    out: Path
    pairs: dict[str, Pair]
    budget_s: float
    warmup: int = WARMUP_STEPS
    timed: int = TIMED_STEPS
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def runs(self) -> list[str]:
        """The runs of the pairs that are done, each once, in the order the pairs need them."""
        names: list[str] = []
        for name, pair in self.pairs.items():
            if name not in self.skipped:
                names.extend(r for r in pair.runs if r not in names)
        return names

    def timing_argv(self, name: str, timing_file: Path) -> list[str]:
        run = RUNS[name]
        args = run.args(self.cuda)
        assert args is not None
        return [sys.executable, str(EXAMPLES / run.script), *args, "--steps", str(self.warmup + self.timed),
                "--timing-warmup", str(self.warmup), "--timing", str(timing_file)]

    def capture_argv(self, name: str) -> list[str]:
        run = RUNS[name]
        args = run.args(self.cuda)
        assert args is not None
        return [sys.executable, "-m", "tracekit", "capture", "-q", "--overwrite", "-o", str(self.out / name), *run.capture,
                "--", sys.executable, str(EXAMPLES / run.script), *args, "--steps", str(run.capture_steps)]


def plan_campaign(*, cuda: bool, out: Path, only: Sequence[str] | None, budget_s: float, warmup: int = WARMUP_STEPS,
                  timed: int = TIMED_STEPS) -> Campaign:
    chosen = {n: PAIRS[n] for n in (only or PAIRS)}
    camp = Campaign(cuda=cuda, out=out, pairs=chosen, budget_s=budget_s, warmup=warmup, timed=timed)
    for name, pair in chosen.items():
        if pair.needs_cuda and not cuda:
            camp.skipped[name] = "needs a CUDA GPU (this machine has none)"
    return camp


def shown(argv: Sequence[str]) -> list[str]:
    """A command as the repository would run it: ``python`` and paths relative to the checkout."""
    out = []
    for i, part in enumerate(argv):
        if part == sys.executable:
            out.append("python")
            continue
        p = Path(part)
        if p.is_absolute():
            try:
                part = str(p.relative_to(REPO))
            except ValueError:
                part = p.name if i and argv[i - 1] == "--timing" else part
        out.append(part)
    return out


# ---------------------------------------------------------------------- running it


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_CAPTURE"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run_process(argv: Sequence[str], log: Path, timeout: float) -> tuple[int | None, float, str]:
    """(exit code or None on timeout, seconds, the last lines of its output); output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        fh.write("$ " + shlex.join(shown(argv)) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(list(argv), cwd=REPO, env=child_env(), stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=max(timeout, 1.0), check=False)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    seconds = time.monotonic() - start
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    return code, seconds, " | ".join(tail)


def _sanitise_capture(folder: Path, argv: Sequence[str]) -> None:
    """Keep the capture free of this machine's paths (as ``scripts/capture_samples.py`` does)."""
    meta_path = folder / "metadata.json"
    if not meta_path.exists():
        return
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["command"] = shown(argv[argv.index("--") + 1:])
    meta["cwd"] = "."
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def measure_run(camp: Campaign, name: str, deadline: float) -> dict[str, Any]:
    """Time and capture one run; its entry of ``measured.json``."""
    run = RUNS[name]
    logs = camp.out / "logs"
    timing_file = camp.out / "logs" / f"{name}.timing.json"
    timing_argv = camp.timing_argv(name, timing_file)
    capture_argv = camp.capture_argv(name)
    entry: dict[str, Any] = {
        "script": f"scripts/examples/{run.script}", "args": list(run.args(camp.cuda) or ()),
        "timing_command": shown(timing_argv), "capture_command": shown(capture_argv), "capture": name,
        "estimated_s": run.cost_s,
    }
    code, seconds, tail = run_process(timing_argv, logs / f"{name}.timing.log", min(PROCESS_LIMIT_S, deadline - time.monotonic()))
    entry["timing_exit_code"], entry["timing_s"] = code, round(seconds, 1)
    if code != 0 or not timing_file.exists():
        entry["status"] = f"timing failed ({'timed out' if code is None else f'exit code {code}'}): {tail}"
        return entry
    timing = json.loads(timing_file.read_text(encoding="utf-8"))
    entry.update({k: timing.get(k) for k in ("device", "clock", "warmup_steps", "steps_timed", "median_step_ms",
                                              "mean_step_ms", "wall_ms_per_step", "batch_size", "step_ms")})
    code, seconds, tail = run_process(capture_argv, logs / f"{name}.capture.log", min(PROCESS_LIMIT_S, deadline - time.monotonic()))
    entry["capture_exit_code"], entry["capture_s"] = code, round(seconds, 1)
    if code != 0 or not (camp.out / name / "metadata.json").exists():
        entry["status"] = f"capture failed ({'timed out' if code is None else f'exit code {code}'}): {tail}"
        return entry
    _sanitise_capture(camp.out / name, capture_argv)
    entry["capture_bytes"] = sum(p.stat().st_size for p in (camp.out / name).rglob("*") if p.is_file())
    entry["status"] = "ok"
    return entry


def machine_facts(cuda: bool) -> dict[str, Any]:
    """Python, torch, CUDA and the GPU, read in a child process (this one never touches CUDA)."""
    code = ("import json, torch; c = torch.cuda.is_available(); "
            "p = torch.cuda.get_device_properties(0) if c else None; "
            "print(json.dumps({'torch_version': torch.__version__, 'cuda_version': torch.version.cuda, "
            "'gpu': p.name if p else None, 'gpu_memory_bytes': p.total_memory if p else None, "
            "'capability': f'{p.major}.{p.minor}' if p else None, 'multiprocessors': p.multi_processor_count if p else None}))")
    facts: dict[str, Any] = {"python": platform.python_version(), "host": platform.node(), "cpus": os.cpu_count()}
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=child_env())
        facts.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, ValueError, IndexError) as exc:
        facts["torch_error"] = str(exc)[:300]
    if cuda:
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30, check=True)
            facts["driver_version"] = smi.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            facts["driver_version"] = None
    return facts


def has_cuda() -> bool:
    """Whether torch sees a CUDA GPU here (asked in a child process: this one stays CUDA-free)."""
    try:
        proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                              text=True, timeout=120, check=False, env=child_env())
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.stdout.strip().endswith("True")


def write_measured(camp: Campaign, doc: dict[str, Any]) -> None:
    path = camp.out / MEASURED
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def pair_status(camp: Campaign, name: str, runs: dict[str, Any]) -> str:
    if name in camp.skipped:
        return "skipped: " + camp.skipped[name]
    bad = [r for r in camp.pairs[name].runs if runs.get(r, {}).get("status") != "ok"]
    if not bad:
        return "measured"
    return "incomplete: " + "; ".join(f"{r}: {runs.get(r, {}).get('status', 'not run')}" for r in bad)


def run_campaign(camp: Campaign, *, command: Sequence[str], say: Any = print) -> dict[str, Any]:
    """Measure every run of the campaign; returns the ``measured.json`` document."""
    started = time.monotonic()
    deadline = started + camp.budget_s
    camp.out.mkdir(parents=True, exist_ok=True)
    for name, why in camp.skipped.items():
        say(f"gpu_truth: {name}: skipped, {why}")
    doc: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "made": {"command": shown(command), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "budget_s": camp.budget_s, "device": "cuda" if camp.cuda else "cpu"},
        "machine": machine_facts(camp.cuda),
        "timing": {"warmup_steps": camp.warmup, "timed_steps": camp.timed, "capture_options": list(CAPTURE_OPTIONS),
                   "statistic": "median of the timed steps (CUDA events on a GPU)"},
        "runs": {}, "pairs": {},
    }
    runs: dict[str, Any] = doc["runs"]
    for name in camp.runs:
        left = deadline - time.monotonic()
        if left < RUNS[name].cost_s:
            runs[name] = {"status": f"skipped: the budget has {left:.0f} s left, this run needs about {RUNS[name].cost_s:.0f} s"}
            say(f"gpu_truth: {name}: {runs[name]['status']}")
            continue
        say(f"gpu_truth: {name}: timing {camp.timed} steps, then capturing ({left:.0f} s of budget left)")
        runs[name] = measure_run(camp, name, deadline)
        r = runs[name]
        took = (r.get("timing_s") or 0) + (r.get("capture_s") or 0)
        median = f"{r['median_step_ms']:.3f} ms per step" if r.get("median_step_ms") is not None else "no timing"
        say(f"gpu_truth: {name}: {r['status']} ({median}, {took:.0f} s)")
        doc["pairs"] = _pairs_doc(camp, runs)
        doc["made"]["elapsed_s"] = round(time.monotonic() - started, 1)
        write_measured(camp, doc)
    doc["pairs"] = _pairs_doc(camp, runs)
    doc["made"]["elapsed_s"] = round(time.monotonic() - started, 1)
    write_measured(camp, doc)
    for name, pair in doc["pairs"].items():
        say(f"gpu_truth: pair {name}: {pair['status']}")
    return doc


def _pairs_doc(camp: Campaign, runs: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {"change": p.change, "before": p.before, "after": list(p.after), "kinds": [list(k) for k in p.kinds],
               "per_sample": p.per_sample, "needs_cuda": p.needs_cuda, "notes": p.notes,
               "status": pair_status(camp, name, runs)}
        for name, p in camp.pairs.items()
    }


def print_plan(camp: Campaign, say: Any = print) -> None:
    """What ``run`` would do (``--dry-run``): every command, the estimate against the budget."""
    for name, why in camp.skipped.items():
        say(f"skip {name}: {why}")
    total = 0.0
    for name in camp.runs:
        total += RUNS[name].cost_s
        say(f"run {name} (about {RUNS[name].cost_s:.0f} s):")
        say("  " + shlex.join(shown(camp.timing_argv(name, camp.out / "logs" / f"{name}.timing.json"))))
        say("  " + shlex.join(shown(camp.capture_argv(name))))
    say(f"{len(camp.runs)} runs, about {total:.0f} s on an H200 against a budget of {camp.budget_s:.0f} s; results in {camp.out}")


# ---------------------------------------------------------------------- packing (the device tool returns files)


def pack(folder: Path, dest: Path, name: str = "gpu-truth.tar.gz") -> list[Path]:
    """``folder`` as a gzipped tar in ``dest``, cut into pieces of at most :data:`PACK_PIECE_BYTES`
    (``NAME.part0``, ``NAME.part1``, ...: join them with ``cat`` before unpacking)."""
    dest.mkdir(parents=True, exist_ok=True)
    whole = dest / name
    with tarfile.open(whole, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(folder)))
    if whole.stat().st_size <= PACK_PIECE_BYTES:
        return [whole]
    pieces = []
    with whole.open("rb") as fh:
        for i, chunk in enumerate(iter(lambda: fh.read(PACK_PIECE_BYTES), b"")):
            piece = dest / f"{name}.part{i}"
            piece.write_bytes(chunk)
            pieces.append(piece)
    whole.unlink()
    return pieces


# ---------------------------------------------------------------------- command line


def _out(arg: Path | None, cuda: bool) -> Path:
    if arg is not None:
        return arg.resolve()
    if cuda:
        return DEFAULT_OUT
    return Path(tempfile.gettempdir()) / "tracekit-gpu-truth-cpu"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    run_p = sub.add_parser("run", help="time and capture the pairs")
    run_p.add_argument("--only", nargs="+", choices=sorted(PAIRS), metavar="PAIR", help="these pairs only")
    run_p.add_argument("--out", type=Path, help="results folder [sample_traces/gpu on CUDA, a temporary folder otherwise]")
    run_p.add_argument("--budget-s", type=float, default=RUN_BUDGET_S, help="stop starting runs after this many seconds")
    run_p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    run_p.add_argument("--assume-cuda", action="store_true", help="with --dry-run: plan as on a CUDA machine")
    run_p.add_argument("--timed-steps", type=int, default=TIMED_STEPS, help=argparse.SUPPRESS)  # tests: fewer steps
    run_p.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS, help=argparse.SUPPRESS)
    check_p = sub.add_parser("check-cuda", help="verify what tracekit capture records on CUDA (scripts/gpu_truth_check.py)")
    check_p.add_argument("--out", type=Path, help="folder for its captures [a temporary folder]")
    dev_p = sub.add_parser("device", help="on a lent GPU machine: check-cuda, run, then pack everything into --pack")
    dev_p.add_argument("--pack", type=Path, required=True, help="folder for the packed results (the device tool's $OUT)")
    dev_p.add_argument("--out", type=Path, help="results folder [sample_traces/gpu]")
    dev_p.add_argument("--budget-s", type=float, default=DEVICE_BUDGET_S)
    sub.add_parser("pairs", help="list the pairs")
    args = parser.parse_args(argv)
    command = ["python", "scripts/gpu_truth.py", *(sys.argv[1:] if argv is None else argv)]

    if args.mode == "pairs":
        for name, pair in PAIRS.items():
            print(f"{name}: {pair.change} [{'CUDA' if pair.needs_cuda else 'CPU or CUDA'}]")
        return 0
    if args.mode == "check-cuda":
        import gpu_truth_check

        return int(gpu_truth_check.main(args.out))
    if args.mode == "run":
        cuda = True if args.assume_cuda else has_cuda()
        if args.timed_steps < TIMED_STEPS or args.warmup_steps < 1:
            print(f"gpu_truth: {args.timed_steps} timed steps: fewer than {TIMED_STEPS}, not a measurement to commit")
        camp = plan_campaign(cuda=cuda, out=_out(args.out, cuda), only=args.only, budget_s=args.budget_s,
                             warmup=max(args.warmup_steps, 1), timed=max(args.timed_steps, 1))
        if not cuda:
            print("gpu_truth: no CUDA GPU here: the pairs that need one are skipped; the others run with CPU-sized arguments")
        if args.dry_run:
            print_plan(camp)
            return 0
        doc = run_campaign(camp, command=command)
        return 0 if all(p["status"] == "measured" or p["status"].startswith("skipped: needs") for p in doc["pairs"].values()) else 1
    return device_mode(args.pack, args.out, args.budget_s, command)


def device_mode(pack_dir: Path, out_arg: Path | None, budget_s: float, command: Sequence[str]) -> int:
    """What a lent GPU machine runs: the CUDA check, the campaign in the time left, the pack."""
    import gpu_truth_check

    started = time.monotonic()
    cuda = has_cuda()
    if not cuda:
        print("gpu_truth: no CUDA GPU here: device mode is for a lent GPU machine (use `run` on the CPU)")
        return 2
    out = _out(out_arg, cuda)
    out.mkdir(parents=True, exist_ok=True)
    check_code = gpu_truth_check.main(out / "cuda-check")
    left = budget_s - (time.monotonic() - started)
    camp = plan_campaign(cuda=True, out=out, only=None, budget_s=max(left, 0.0))
    doc = run_campaign(camp, command=command)
    doc["made"]["cuda_check_exit_code"] = check_code
    write_measured(camp, doc)
    pieces = pack(out, pack_dir)
    print(f"gpu_truth: packed {out} into {', '.join(p.name for p in pieces)} in {pack_dir}")
    return 0 if check_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

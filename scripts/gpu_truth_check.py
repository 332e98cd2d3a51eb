#!/usr/bin/env python3
"""Does ``tracekit capture`` record what it should on CUDA?  One verdict per item.

Two small training scripts are captured (``--with-stack --record-shapes --memory``):

* ``check_train.py`` trains on the GPU with a DataLoader, a fused AdamW, bf16 autocast and a
  ``loss.item()`` every step (a sync), then exits with status 3;
* ``check_crash.py`` raises after four steps.

and the captures are checked for: the exit codes (tracekit's, ``metadata.json``'s, ``crashed``),
the recorded window and the window saved by a crash, the ``tracekit.*`` ranges (record_function
in the trace; the NVTX emitter the process used), CUDA kernels and copies in the trace, CUDA
sync events (where this torch can record them), device memory (the ``program`` section and the
trace's memory events), the GPU facts (``gpus``, ``cuda_version``, the trace's device
properties) and what the program built (the DataLoader's line, the fused optimizer, autocast).

Without CUDA the CUDA items are skipped and the rest still run on the CPU.  Only the standard
library is used here (a lent GPU machine has torch but not every tracekit dependency): traces
are read as gzipped JSON.  Writes ``OUT/cuda_check.json``; the exit status is 1 when an item
fails.

    python scripts/gpu_truth.py check-cuda [--out DIR]
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_truth import REPO, has_cuda

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

TRAIN = '''
import sys, torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
fused = device.type == "cuda"
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
data = TensorDataset(torch.randn(8 * 64, 256), torch.randint(0, 10, (8 * 64,)))
loader = DataLoader(data, batch_size=64, pin_memory=fused)  # CHECK-LOADER
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"loss {loss.item():.4f}")  # a sync every step
sys.exit(3)
'''

CRASH = '''
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(64, 64).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(32, 64, device=device)).square().mean().backward()
    opt.step()
    if step == 3:
        raise RuntimeError("planted failure at step 3")
'''


@dataclass
class Verdict:
    item: str
    result: str
    detail: str

    def line(self) -> str:
        return f"{self.result} {self.item}: {self.detail}"


def capture(out: Path, script: Path, options: list[str]) -> tuple[int, str]:
    """``tracekit capture`` of ``script``; (tracekit's exit code, its stderr's last lines)."""
    argv = [sys.executable, "-m", "tracekit", "capture", "-q", "--overwrite", "-o", str(out), *options,
            "--", sys.executable, "-W", "ignore", str(script)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    return proc.returncode, " | ".join(proc.stderr.strip().splitlines()[-3:])


def trace_events(folder: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first rank's trace (its top-level object) and its events."""
    ranks = meta.get("ranks") or []
    name = ranks[0].get("trace") if ranks else None
    if not name:
        return {}, []
    with gzip.open(folder / name, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    return doc, [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def _check(item: str, ok: bool, detail: str) -> Verdict:
    return Verdict(item, PASS if ok else FAIL, detail)


def check_training(out: Path, cuda: bool) -> list[Verdict]:
    """The items read from the capture of ``check_train.py``."""
    script = out / "check_train.py"
    script.write_text(textwrap.dedent(TRAIN), encoding="utf-8")
    folder = out / "train"
    code, tail = capture(folder, script, ["--with-stack", "--record-shapes", "--memory", "--wait", "1", "--warmup", "1", "--active", "3"])
    if not (folder / "metadata.json").exists():
        return [Verdict("capture", FAIL, f"no metadata.json (tracekit exit code {code}: {tail})")]
    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    doc, events = trace_events(folder, meta)
    names = {str(e.get("name")) for e in events}
    cats = [str(e.get("cat", "")).lower() for e in events]
    program = ((meta.get("program") or {}).get("ranks") or [{}])[0]
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    verdicts = [
        _check("exit code", code == 3 and meta.get("exit_code") == 3 and meta.get("crashed") is True,
               f"tracekit {code}, metadata {meta.get('exit_code')}, crashed {meta.get('crashed')} (the script exits with 3)"),
        _check("recorded window", len(steps) == 3, f"ProfilerStep ranges {steps}"),
    ]
    wanted = {"tracekit.data_loading", "tracekit.forward", "tracekit.backward", "tracekit.optimizer"}
    verdicts.append(_check("ranges", wanted <= names, f"record_function ranges found: {sorted(wanted & names)}"))
    emitter = meta.get("nvtx")
    if cuda:
        verdicts.append(_check("NVTX", emitter in ("nvtx", "torch.cuda.nvtx"),
                               f"emitter {emitter!r} (package nvtx {meta.get('nvtx_version')}); NVTX itself is seen only by an "
                               "NVTX tool such as nsys"))
        kernels, copies = cats.count("kernel"), cats.count("gpu_memcpy")
        verdicts.append(_check("CUDA activity", kernels > 0 and copies > 0, f"{kernels} kernels, {copies} copies in the trace"))
        syncs = cats.count("cuda_sync")
        if meta.get("cuda_sync_events") is True:
            verdicts.append(_check("CUDA sync events", syncs > 0, f"{syncs} cuda_sync events (enable_cuda_sync_events on)"))
        else:
            verdicts.append(Verdict("CUDA sync events", SKIP, f"this torch cannot record them (cuda_sync_events {meta.get('cuda_sync_events')!r})"))
        memory = program.get("memory") or {}
        mem_events = sum(1 for n in names if n == "[memory]")
        verdicts.append(_check(
            "memory", (memory.get("total_bytes") or 0) > 0 and (memory.get("peak_allocated_bytes") or 0) > 0 and mem_events > 0,
            f"total {memory.get('total_bytes')} B, peak allocated {memory.get('peak_allocated_bytes')} B, "
            f"peak reserved {memory.get('peak_reserved_bytes')} B; {mem_events} [memory] events"))
        props = doc.get("deviceProperties") or []
        gpus = meta.get("gpus") or []
        verdicts.append(_check(
            "GPU facts", bool(gpus) and bool(meta.get("cuda_version")) and bool(props) and memory.get("name") in gpus,
            f"gpus {gpus}, cuda {meta.get('cuda_version')}, {len(props)} device(s) in the trace, program memory on {memory.get('name')!r}"))
    else:
        for item in ("NVTX", "CUDA activity", "CUDA sync events", "memory", "GPU facts"):
            verdicts.append(Verdict(item, SKIP, "no CUDA device here"))
    loaders = program.get("dataloaders") or [{}]
    site = loaders[0].get("site") or {}
    optimizers = program.get("optimizers") or [{}]
    autocast = program.get("autocast") or [{}]
    expected_device = "cuda" if cuda else "cpu"
    verdicts.append(_check(
        "program facts",
        site.get("line") == line_of(TRAIN, "# CHECK-LOADER") and site.get("file", "").endswith("check_train.py")
        and optimizers[0].get("fused") is cuda and autocast[0].get("device_type") == expected_device
        and autocast[0].get("dtype") == "bfloat16" and (loaders[0].get("fetches") or 0) == 8,
        f"DataLoader at {site.get('file')}:{site.get('line')} ({loaders[0].get('fetches')} batches), optimizer "
        f"{optimizers[0].get('class')} fused={optimizers[0].get('fused')}, autocast {autocast[0].get('device_type')} "
        f"{autocast[0].get('dtype')}"))
    return verdicts


def check_crash(out: Path) -> list[Verdict]:
    script = out / "check_crash.py"
    script.write_text(textwrap.dedent(CRASH), encoding="utf-8")
    folder = out / "crash"
    code, tail = capture(folder, script, ["--wait", "0", "--warmup", "1", "--active", "8"])
    if not (folder / "metadata.json").exists():
        return [Verdict("crash", FAIL, f"no metadata.json (tracekit exit code {code}: {tail})")]
    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    ranks = meta.get("ranks") or [{}]
    profiled = (ranks[0].get("profiled") or [{}])[0]
    trace = ranks[0].get("trace")
    return [_check(
        "crash", code == 1 and meta.get("exit_code") == 1 and "planted failure" in str(ranks[0].get("error"))
        and bool(trace) and (folder / str(trace)).exists() and profiled.get("complete") is False,
        f"tracekit {code}, error {ranks[0].get('error')!r}, window {profiled.get('first_step')}-{profiled.get('last_step')} "
        f"saved as {trace}")]


def main(out: Path | None = None, say: Callable[[str], None] = print) -> int:
    out = (out or Path(tempfile.mkdtemp(prefix="tracekit-cuda-check-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cuda = has_cuda()
    say(f"gpu_truth check-cuda: {'a CUDA device' if cuda else 'no CUDA device: CUDA items skipped'}; captures in {out}")
    verdicts = check_training(out, cuda) + check_crash(out)
    for v in verdicts:
        say(v.line())
    failed = [v for v in verdicts if v.result == FAIL]
    (out / "cuda_check.json").write_text(json.dumps({"cuda": cuda, "verdicts": [v.__dict__ for v in verdicts]}, indent=1) + "\n",
                                         encoding="utf-8")
    say(f"gpu_truth check-cuda: {len(verdicts) - len(failed)} of {len(verdicts)} items pass or skip" +
        (f"; failed: {', '.join(v.item for v in failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else None))

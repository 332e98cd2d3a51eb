#!/usr/bin/env python3
"""Overhead of ``tracekit capture``: step time without capture, with the instrumentation only
(``--backend none``: NVTX + record_function ranges, hooks), and with the torch profiler recording.

The workload is a small training loop on the CPU with many modules per forward (the worst
case for the global module hooks: a short step and 52 module calls in it).  Each mode runs
in a fresh process; runs of the three modes are interleaved and repeated, and each run reports
the median of its step times, so machine noise hits every mode alike.  The script also times
``tracekit.range()`` / ``tracekit.step()`` without a capture.

Usage: python scripts/bench_capture.py [--repeats 5] [--steps 300]
(progress lines first, then the Markdown table under the machine line)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchmachine import load_average, machine_line

REPO = Path(__file__).resolve().parents[1]


WORKLOAD = textwrap.dedent(
    """
    import json, statistics, sys, time
    import torch
    from torch import nn

    steps, warm, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    blocks = [nn.Sequential(nn.Linear(128, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 128)) for _ in range(10)]
    model = nn.Sequential(*blocks, nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(32, 128), torch.randint(0, 10, (32,))) for _ in range(16)]
    loader = torch.utils.data.DataLoader(data, batch_size=None, shuffle=False)
    times, cpu = [], []
    it = iter(loader)
    for step in range(steps + warm):
        t = time.perf_counter()
        c = time.thread_time()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= warm:
            cpu.append(time.thread_time() - c)
            times.append(time.perf_counter() - t)
    with open(out, "w") as fh:
        json.dump({"wall_ms": statistics.median(times) * 1e3, "cpu_ms": statistics.median(cpu) * 1e3}, fh)
    """
)


PAIRED = textwrap.dedent(
    """
    # One process, capture active (backend none): blocks of steps with tracekit's hooks
    # installed alternate with blocks where they are removed, so both see the same machine.
    import json, os, statistics, sys, time
    from tracekit.capture.config import CaptureConfig
    os.environ["TRACEKIT_CAPTURE"] = CaptureConfig(out=sys.argv[3], backend="none").to_json()
    from tracekit.capture import importhook, runtime, torch_hooks
    importhook.arm()
    import torch
    from torch import nn

    blocks_n, per_block = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    blocks = [nn.Sequential(nn.Linear(128, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 128)) for _ in range(10)]
    model = nn.Sequential(*blocks, nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(32, 128), torch.randint(0, 10, (32,))) for _ in range(16)]
    loader = torch.utils.data.DataLoader(data, batch_size=None)

    def run(n):
        out = []
        it = iter(loader)
        for _ in range(n):
            c = time.thread_time()
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            out.append(time.thread_time() - c)
        return out

    run(3 * per_block)  # warm-up; also ends discovery of the top-level modules
    hooked, plain = [], []
    for _ in range(blocks_n):
        hooked += run(per_block)
        torch_hooks.uninstall()
        plain += run(per_block)
        torch_hooks.install(torch, runtime.current)
        run(2)  # untimed: a fresh installation finds the top-level modules during one step
    h, p = statistics.median(hooked), statistics.median(plain)
    print(json.dumps({"hooked_ms": h * 1e3, "plain_ms": p * 1e3, "steps": runtime.current().steps_seen}))
    """
)


def paired_cost(repeats: int, workdir: Path) -> dict[str, float]:
    """Instrumentation cost per step measured inside one process (median over ``repeats`` processes)."""
    script = workdir / "paired.py"
    script.write_text(PAIRED)
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_CAPTURE"}
    rows = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, str(script), "30", "25", str(workdir / "paired-out")], env=env,
                             check=True, capture_output=True, text=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ratio = statistics.median(r["hooked_ms"] / r["plain_ms"] for r in rows) - 1
    delta_us = statistics.median((r["hooked_ms"] - r["plain_ms"]) * 1e3 for r in rows)
    return {"ratio": ratio, "delta_us": delta_us, "plain_ms": statistics.median(r["plain_ms"] for r in rows)}


def run_mode(mode: str, steps: int, warm: int, workdir: Path) -> dict[str, float]:
    script = workdir / "workload.py"
    result = workdir / f"{mode}.json"
    cmd = [sys.executable, str(script), str(steps), str(warm), str(result)]
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_CAPTURE"}
    if mode == "plain":
        argv = cmd
    elif mode == "ranges":
        argv = [sys.executable, "-m", "tracekit", "capture", "-q", "--overwrite", "--backend", "none", "-o",
                str(workdir / "cap"), "--", *cmd]
    else:  # profiler recording every timed step
        argv = [sys.executable, "-m", "tracekit", "capture", "-q", "--overwrite", "--backend", "torch",
                "--wait", "0", "--warmup", str(warm), "--active", str(steps), "-o", str(workdir / "cap"), "--", *cmd]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = json.loads(result.read_text())
    return {"wall": float(data["wall_ms"]), "cpu": float(data["cpu_ms"])}


def marks_cost(n: int = 1_000_000) -> dict[str, float]:
    """ns per ``with tracekit.range(...)`` / ``with tracekit.step()`` block with no capture."""
    code = textwrap.dedent(
        f"""
        import json, time, tracekit
        def timed(fn):
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            return best / {n} * 1e9
        def empty():
            for _ in range({n}):
                pass
        def ranges():
            for _ in range({n}):
                with tracekit.range("r"):
                    pass
        def steps():
            for _ in range({n}):
                with tracekit.step():
                    pass
        base = timed(empty)
        print(json.dumps({{"range_ns": timed(ranges) - base, "step_ns": timed(steps) - base}}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_CAPTURE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warm", type=int, default=20)
    args = parser.parse_args()

    modes = ("plain", "ranges", "profiler")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "workload.py").write_text(WORKLOAD)
        for r in range(args.repeats):
            for mode in modes if r % 2 == 0 else tuple(reversed(modes)):
                got = run_mode(mode, args.steps, args.warm, work)
                results[mode].append(got)
                print(f"run {r + 1}/{args.repeats} {mode:8s} wall {got['wall']:.3f} ms/step, cpu {got['cpu']:.3f} ms/step", flush=True)

    def median(mode: str, kind: str) -> float:
        return statistics.median(x[kind] for x in results[mode])

    def overhead(mode: str, kind: str) -> float:
        # per-repeat paired ratios are less noisy than ratios of medians
        pairs = zip(results[mode], results["plain"], strict=True)
        return statistics.median(a[kind] / b[kind] for a, b in pairs) - 1

    with tempfile.TemporaryDirectory() as tmp:
        paired = paired_cost(max(3, args.repeats // 2), Path(tmp))
    marks = marks_cost()
    print(f"paired in-process: hooks add {paired['delta_us']:.1f} µs per step ({paired['ratio'] * 100:+.1f}% of "
          f"{paired['plain_ms']:.3f} ms CPU)")
    for m in modes:
        print(f"{m:8s} wall {median(m, 'wall'):.3f} ms/step ({overhead(m, 'wall') * 100:+.1f}%), "
              f"cpu {median(m, 'cpu'):.3f} ms/step ({overhead(m, 'cpu') * 100:+.1f}%)")
    print(f"tracekit.range() without capture: {marks['range_ns']:.0f} ns; tracekit.step(): {marks['step_ns']:.0f} ns")

    body = "\n".join(
        [
            machine_line(sys.executable, ("torch",), [("after the runs", load_average())]),
            "",
            "Step time of a small CPU training loop (10 blocks of Linear/LayerNorm/GELU/Linear, 52 module calls",
            "per forward, batch 32, a DataLoader fetch and an SGD step; one intra-op thread) in three modes.",
            f"Each run is a fresh process that reports the median of {args.steps} step times after {args.warm}",
            f"warm-up steps; the three modes are interleaved and repeated {args.repeats} times, and the overhead",
            "is the median of the per-repeat ratios to the plain run.",
            "",
            "| mode | what runs | CPU time per step (ms) | overhead | wall time per step (ms) | overhead |",
            "|---|---|---:|---:|---:|---:|",
            f"| plain | `python workload.py` | {median('plain', 'cpu'):.3f} | – | {median('plain', 'wall'):.3f} | – |",
            f"| instrumentation only | `tracekit capture --backend none` (hooks, NVTX ranges; no profiler) | "
            f"{median('ranges', 'cpu'):.3f} | {overhead('ranges', 'cpu') * 100:+.1f}% | {median('ranges', 'wall'):.3f} | "
            f"{overhead('ranges', 'wall') * 100:+.1f}% |",
            f"| profiler recording | `tracekit capture` recording every timed step | {median('profiler', 'cpu'):.3f} | "
            f"{overhead('profiler', 'cpu') * 100:+.1f}% | {median('profiler', 'wall'):.3f} | {overhead('profiler', 'wall') * 100:+.1f}% |",
            "",
            "CPU time is the training thread's own (`time.thread_time`), which other jobs on the machine barely",
            "disturb; wall time includes their interference and is noisier.  Measured inside one process too",
            "(blocks of 25 steps with tracekit's hooks installed alternating with blocks where they are removed,",
            "30 blocks each, medians of per-step CPU time):",
            "",
            f"**Instrumentation cost, paired in one process: {paired['delta_us']:.1f} µs per step, "
            f"{paired['ratio'] * 100:+.1f}% of a {paired['plain_ms']:.3f} ms step** (target: under 2%).",
            "",
            f"Explicit marks without a capture: `with tracekit.range(...)` costs {marks['range_ns']:.0f} ns and",
            f"`with tracekit.step()` {marks['step_ns']:.0f} ns more than an empty loop iteration.",
        ]
    )
    print()
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

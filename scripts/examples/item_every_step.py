#!/usr/bin/env python3
"""A training loop that reads the loss with ``.item()`` every step.

On a GPU, ``loss.item()`` copies the loss to the host and blocks until the GPU has finished
every kernel queued so far; the host then runs the Python that follows (logging) while the
GPU has nothing to do, every single step.  ``--every N`` is the fix: accumulate the loss on the
device and read it every N steps.

    tracekit capture -- python scripts/examples/item_every_step.py            # syncs every step
    tracekit capture -- python scripts/examples/item_every_step.py --every 50 # fixed

On the CPU ``.item()`` costs nothing (there is no device to wait for), so the cause only
shows on a GPU; the script runs anywhere.

``--host-ms`` adds host work to every step whether or not the loss is read (a metrics logger
that reads the loss only when asked), and ``--log-ms`` is the logging that waits for the
value: ``--every 1 --host-ms 3 --log-ms 0`` against ``--every 50 --host-ms 3 --log-ms 0`` changes
nothing but the sync (``scripts/gpu_truth.py`` times that pair).
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import StepClock, add_timing_arguments, pick_device
from torch import nn


def log_metrics(step: int, value: float, history: list[float], log_ms: float) -> None:
    """Host work that waits for the loss value (a stand-in for logging to a tracker)."""
    history.append(value)
    time.sleep(log_ms / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=1, help="read the loss every N steps (the fix: N > 1)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--host-ms", type=float, default=0.0, help="host work every step, loss read or not (ms)")
    parser.add_argument("--log-ms", type=float, default=2.0, help="logging after each read of the loss (ms)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    add_timing_arguments(parser)
    args = parser.parse_args()

    device = pick_device(torch, args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, 256, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    history: list[float] = []
    running = torch.zeros((), device=device)
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        if (step + 1) % args.every == 0:
            log_metrics(step, running.item() / args.every, history, args.log_ms)  # .item(): waits for the GPU
            running.zero_()
        if args.host_ms:
            time.sleep(args.host_ms / 1000)
        clock.step()
    clock.finish(batch_size=args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s, loss read every {args.every} step(s), device={device.type}")


if __name__ == "__main__":
    main()

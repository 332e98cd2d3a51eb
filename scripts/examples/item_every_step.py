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
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def log_metrics(step: int, value: float, history: list[float]) -> None:
    """Host work that waits for the loss value (a stand-in for logging to a tracker)."""
    history.append(value)
    time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=1, help="read the loss every N steps (the fix: N > 1)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    args = parser.parse_args()

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, 256, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    history: list[float] = []
    running = torch.zeros((), device=device)

    start = time.perf_counter()
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        if (step + 1) % args.every == 0:
            log_metrics(step, running.item() / args.every, history)  # .item(): waits for the GPU
            running.zero_()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s, loss read every {args.every} step(s), device={device.type}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Batches copied to the GPU from pageable (unpinned) host memory.

A copy from pageable memory goes through a staging buffer and blocks the host until it is
done, so it neither overlaps compute nor lets the host queue the next kernels.  The fix is
pinned memory (``--pin``: ``DataLoader(pin_memory=True)`` or ``tensor.pin_memory()``) with
``.to(device, non_blocking=True)``.

    tracekit capture -- python scripts/examples/pageable_copy.py         # pageable copies
    tracekit capture -- python scripts/examples/pageable_copy.py --pin   # fixed

Needs a CUDA GPU (there is no host-to-device copy on the CPU); exits with status 2 without one.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from _timing import StepClock, add_timing_arguments
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--pin", action="store_true", help="the fix: pinned buffers and non_blocking copies")
    parser.add_argument("--mib", type=int, default=256, help="size of each batch in MiB")
    add_timing_arguments(parser)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("pageable_copy.py needs a CUDA GPU: pageable host-to-device copies do not exist on the CPU", file=sys.stderr)
        sys.exit(2)

    device = torch.device("cuda")
    torch.manual_seed(0)
    features = 4096
    rows = args.mib * 2**20 // (4 * features)
    batches = [torch.randn(rows, features) for _ in range(2)]
    if args.pin:
        batches = [b.pin_memory() for b in batches]
    model = nn.Sequential(nn.Linear(features, 1024), nn.ReLU(), nn.Linear(1024, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for step in range(args.steps):
        x = batches[step % 2].to(device, non_blocking=args.pin)
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        clock.step()
    clock.finish(batch_size=rows, batch_mib=args.mib)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({args.mib} MiB per batch, pinned={args.pin})")


if __name__ == "__main__":
    main()

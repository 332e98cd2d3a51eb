#!/usr/bin/env python3
"""A training loop that reads its predictions back element by element: ``preds[i].cpu()`` in a
Python loop, one tiny device-to-host copy (and one wait for the GPU) per element, every step.

    tracekit capture -- python scripts/examples/cpu_transfers.py                  # one sync per element
    tracekit capture -- python scripts/examples/cpu_transfers.py --one-transfer   # fixed: one copy

``--one-transfer`` copies the predictions once (``preds.cpu()``) and loops over them on the
host.  Both still wait for the GPU once per step; the element-wise loop adds a round trip per
element.  Runs on the CPU (where the copies cost little) or on a GPU when one is present.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--one-transfer", action="store_true", help="the fix: one .cpu() of the whole tensor")
    parser.add_argument("--elements", type=int, default=128, help="predictions read back per step (at most the batch)")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    from _timing import add_timing_arguments

    add_timing_arguments(parser)
    args = parser.parse_args()
    run(args)


def run(args: argparse.Namespace) -> None:
    import torch
    from _timing import StepClock, pick_device
    from torch import nn

    device = pick_device(torch, args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch_size, 512, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    n = min(args.elements, args.batch_size)
    targets = y[:n].tolist()
    hits = 0
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for _ in range(args.steps):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        preds = logits.detach().argmax(1)[:n]
        # the fix: one copy and one wait; the cause: a copy and a wait per element
        values = preds.cpu().tolist() if args.one_transfer else [int(preds[i].cpu()) for i in range(n)]
        hits += sum(v == t for v, t in zip(values, targets, strict=True))
        clock.step()
    clock.finish(batch_size=args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s, {hits} hits, one_transfer={args.one_transfer}, device={device.type}")


if __name__ == "__main__":
    main()

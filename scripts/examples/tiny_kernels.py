#!/usr/bin/env python3
"""A model made of many tiny operations: each kernel finishes before the host has launched
the next one, so the GPU mostly waits for Python and the launch path (launch-bound).

    tracekit capture -- python scripts/examples/tiny_kernels.py             # 600 tiny ops per step
    tracekit capture -- python scripts/examples/tiny_kernels.py --fused     # one batched op per layer

``--fused`` does the same arithmetic on one stacked tensor per layer (fewer, larger kernels);
``torch.compile`` and CUDA graphs are the general fixes: ``--compile`` runs the model under
``torch.compile(mode="reduce-overhead")``, which replays its kernels as CUDA graphs.  On the
CPU the script runs, but there is no launch overhead to see.
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import StepClock, add_timing_arguments, pick_device
from torch import nn


class ManySmall(nn.Module):
    """``width`` independent small linear maps per layer, applied one by one (or stacked)."""

    def __init__(self, layers: int, width: int, size: int, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.weight = nn.Parameter(torch.randn(layers, width, size, size) / size**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (width, batch, size)
        for layer in self.weight:
            if self.fused:
                x = torch.tanh(torch.bmm(x, layer))
            else:
                x = torch.stack([torch.tanh(x[i] @ layer[i]) for i in range(layer.shape[0])])
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=50, help="small operations per layer")
    parser.add_argument("--fused", action="store_true", help="the fix: one batched operation per layer")
    parser.add_argument("--compile", action="store_true", help='the fix: torch.compile(mode="reduce-overhead"), CUDA graphs')
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    add_timing_arguments(parser)
    args = parser.parse_args()

    device = pick_device(torch, args.device)
    torch.manual_seed(0)
    model = ManySmall(args.layers, args.width, 16, args.fused).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.width, 8, 16, device=device)
    step_model = torch.compile(model, mode="reduce-overhead") if args.compile else model
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step_model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        clock.step()
    clock.finish(batch_size=8)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s (fused={args.fused}, compiled={args.compile}, device={device.type})")


if __name__ == "__main__":
    main()

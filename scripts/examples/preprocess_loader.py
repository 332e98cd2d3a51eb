#!/usr/bin/env python3
"""A training loop whose DataLoader does real CPU work per sample (decode, augment, normalise),
so with the default ``num_workers=0`` the training process prepares every batch itself while
the GPU waits.

    tracekit capture -- python scripts/examples/preprocess_loader.py                      # data-bound
    tracekit capture -- python scripts/examples/preprocess_loader.py --num-workers 4      # the loader fixed
    tracekit capture -- python scripts/examples/preprocess_loader.py --num-workers 4 --amp  # then AMP

Each sample is a random 8-bit image turned into floats, flipped, normalised and then
``--sample-us`` microseconds of further CPU work (a busy loop standing in for decoding and
augmentation, which keeps the cost steady across machines).  The model is a wide fp32 MLP
(GEMM-heavy), so once the loader keeps up the step is bound by fp32 matrix multiplies and
``--amp`` (bf16 autocast) is the next fix.  Runs on the CPU, or on a GPU when one is present.
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import StepClock, add_timing_arguments, pick_device
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random images, each prepared on the CPU when it is asked for."""

    def __init__(self, size: int, side: int, sample_us: float) -> None:
        self.size, self.side, self.work_s = size, side, sample_us / 1e6
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        image = torch.randint(0, 256, (3, self.side, self.side), dtype=torch.uint8, generator=g)
        x = image.float().div_(255)
        if index % 2:
            x = x.flip(-1)
        x = (x - self.mean) / self.std
        until = time.perf_counter() + self.work_s
        while time.perf_counter() < until:  # the rest of decoding and augmentation
            pass
        return x.flatten(), torch.randint(0, 10, (), generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--image", type=int, default=32, help="image side (3 x N x N pixels)")
    parser.add_argument("--sample-us", type=float, default=60.0, help="extra CPU work per sample, microseconds")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (the fix: > 0)")
    parser.add_argument("--amp", action="store_true", help="bf16 autocast for the forward pass (the next fix)")
    parser.add_argument("--hidden", type=int, default=8192, help="MLP width")
    parser.add_argument("--layers", type=int, default=3, help="hidden layers")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    add_timing_arguments(parser)
    args = parser.parse_args()

    device = pick_device(torch, args.device)
    torch.manual_seed(0)
    features = 3 * args.image * args.image
    layers: list[nn.Module] = [nn.Linear(features, args.hidden), nn.ReLU()]
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = Images(args.steps * args.batch_size, args.image, args.sample_us)
    workers = {"prefetch_factor": 4, "persistent_workers": True} if args.num_workers > 0 else {}
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers, **workers)
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        clock.step()
    clock.finish(batch_size=args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({elapsed / args.steps * 1000:.1f} ms per step), "
          f"num_workers={args.num_workers}, amp={args.amp}, device={device.type}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A training loop starved by its DataLoader: every sample takes a few milliseconds to "read"
(a sleep standing in for disk or decoding), and with the default ``num_workers=0`` the
training process loads each batch itself while the model waits.

    tracekit capture -- python scripts/examples/slow_dataloader.py                  # stalls
    tracekit capture -- python scripts/examples/slow_dataloader.py --num-workers 4  # fixed

With ``--num-workers 4`` worker processes read batches ahead of time in parallel (up to
``prefetch_factor=4`` batches each), so the loop no longer waits.  Runs on the CPU, or on a GPU when one is present (``--device``).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random samples that each take ``sample_ms`` to produce."""

    def __init__(self, size: int, features: int, sample_ms: float) -> None:
        self.size, self.features, self.delay = size, features, sample_ms / 1000

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay)  # reading and decoding a file
        g = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=g), torch.randint(0, 10, (), generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sample-ms", type=float, default=16.0, help="time to produce one sample")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (the fix: > 0)")
    parser.add_argument("--hidden", type=int, default=3072, help="model width (compute per step)")
    parser.add_argument("--layers", type=int, default=3, help="hidden layers (compute per step)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    args = parser.parse_args()

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    features = 64
    layers: list[nn.Module] = [nn.Linear(features, args.hidden), nn.ReLU()]
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = SlowDataset(args.steps * args.batch_size, features, args.sample_ms)
    workers = {"prefetch_factor": 4, "persistent_workers": True} if args.num_workers > 0 else {}
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers,
                        pin_memory=device.type == "cuda", **workers)

    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({elapsed / args.steps * 1000:.1f} ms per step), "
          f"num_workers={args.num_workers}, device={device.type}")


if __name__ == "__main__":
    main()

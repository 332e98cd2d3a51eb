#!/usr/bin/env python3
"""Data-parallel training with torch.distributed: gloo on the CPU, NCCL on GPUs.

    tracekit capture -- torchrun --nproc-per-node 2 scripts/examples/ddp.py

Each rank trains on its own shard of random data; DistributedDataParallel all-reduces the
gradients during backward.  ``tracekit capture`` writes one trace per rank.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=2048)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    n = args.steps * args.batch_size * world
    data = TensorDataset(torch.randn(n, 128), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, shuffle=False))
    model = nn.Sequential(nn.Linear(128, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"{args.steps} steps on {world} ranks ({'nccl' if use_cuda else 'gloo'}) in {elapsed:.2f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

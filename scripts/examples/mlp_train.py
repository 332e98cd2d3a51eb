#!/usr/bin/env python3
"""An MLP training loop with one knob per fix of how the GPU computes: precision (fp32 or bf16
autocast), TF32 for fp32 matrix multiplies, the batch size, and the CUDA caching allocator.

    tracekit capture -- python scripts/examples/mlp_train.py                     # fp32 GEMMs, no TF32
    tracekit capture -- python scripts/examples/mlp_train.py --precision bf16    # AMP
    tracekit capture -- python scripts/examples/mlp_train.py --tf32              # TF32
    tracekit capture -- python scripts/examples/mlp_train.py --no-caching        # cudaMalloc/cudaFree every tensor
    tracekit capture -- python scripts/examples/mlp_train.py --hidden 256 --layers 4 --batch-size 8    # launch-bound

With the defaults the model is GEMM-heavy (six 4096-wide layers, 2048 rows per batch), so fp32
without TF32 leaves the tensor cores idle.  ``--no-caching`` sets
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` before torch is imported: every tensor is then allocated
with cudaMalloc and freed with cudaFree, which waits for the device.  A small ``--hidden`` with
``--batch-size 8`` is launch-bound; 256 rows per batch use the same launches for 32 times the
samples.  Runs on the CPU (precision and batch size mean something there too) or on a GPU.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: torch.autocast (the AMP fix)")
    parser.add_argument("--tf32", action="store_true", help="the TF32 fix: fp32 matrix multiplies on tensor cores")
    parser.add_argument("--no-caching", action="store_true", help="turn the CUDA caching allocator off (the cause)")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    from _timing import add_timing_arguments

    add_timing_arguments(parser)
    args = parser.parse_args()
    if args.no_caching:  # read by the allocator when CUDA starts: set before torch is imported
        os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    run(args)


def run(args: argparse.Namespace) -> None:
    import torch
    from _timing import StepClock, pick_device
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
    device = pick_device(torch, args.device)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.hidden, args.hidden), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(args.batch_size, args.hidden, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    amp = args.precision == "bf16"
    clock = StepClock(torch, device, args.timing, args.timing_warmup)

    start = time.perf_counter()
    for _ in range(args.steps):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        clock.step()
    clock.finish(batch_size=args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({elapsed / args.steps * 1000:.2f} ms per step), precision={args.precision}, "
          f"tf32={args.tf32}, caching={not args.no_caching}, batch={args.batch_size}, device={device.type}")


if __name__ == "__main__":
    main()

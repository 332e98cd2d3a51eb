#!/usr/bin/env python3
"""Capture the examples in scripts/examples/ into sample_traces/captures/ (CPU or GPU).

Each sample is a capture folder written by ``tracekit capture`` (``metadata.json`` and one
trace per rank) plus ``<name>.expected.json``: the cause the example plants and what
``tracekit analyze`` must say about the capture.  The expected findings come from the table
below (what each example was written to show), never from the analysis; after capturing,
the script analyses each folder and reports any mismatch (a capture taken while the machine
was busy can be unrepresentative: run it again).  For an example that trains from a
DataLoader, the expectation also names the loader the capture's ``program`` section must
record: the line of the example that constructs it and its ``num_workers``.

Usage: python scripts/capture_samples.py [--only NAME ...] [--out sample_traces/captures]
On a machine with an NVIDIA GPU the examples run on it and the samples are named ``*.gpu``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "scripts" / "examples"

#: name → (example arguments, capture options, expectation on the CPU, expectation on a GPU)
SAMPLES: dict[str, dict[str, Any]] = {
    "slow_dataloader": {
        "args": ["slow_dataloader.py"],
        "capture": ["--wait", "4"],
        "cpu": {"first_finding": "data_loading", "absent_findings": [], "ranks": 1},
        "gpu": {"first_finding": "data_loading", "absent_findings": [], "ranks": 1},
        "loader": {"num_workers": 0},
        "planted": "single-process DataLoader (num_workers=0) whose __getitem__ takes 16 ms per sample",
    },
    "slow_dataloader_fixed": {
        "args": ["slow_dataloader.py", "--num-workers", "4"],
        "capture": ["--wait", "4"],
        "cpu": {"first_finding": None, "absent_findings": ["data_loading"], "ranks": 1},
        "gpu": {"first_finding": None, "absent_findings": ["data_loading"], "ranks": 1},
        "loader": {"num_workers": 4},
        "planted": "the same loader with four worker processes loading ahead of the training loop",
    },
    "item_every_step": {
        "args": ["item_every_step.py"],
        "capture": ["--wait", "2"],
        "cpu": {"first_finding": None, "absent_findings": ["host_device_sync"], "ranks": 1},
        "gpu": {"first_finding": "host_device_sync", "absent_findings": [], "ranks": 1},
        "planted": "loss.item() and 2 ms of logging after every step (a sync only on a GPU)",
    },
    "tiny_kernels": {
        "args": ["tiny_kernels.py", "--width", "20"],
        "capture": ["--wait", "2", "--active", "2"],
        "cpu": {"first_finding": None, "absent_findings": ["launch_bound"], "ranks": 1},
        "gpu": {"first_finding": "launch_bound", "absent_findings": [], "ranks": 1},
        "planted": "120 tiny matrix multiplies per forward (launch-bound only on a GPU)",
    },
    "pageable_copy": {
        "args": ["pageable_copy.py"],
        "capture": ["--wait", "2"],
        "cpu": None,  # needs a GPU
        "gpu": {"first_finding": "pageable_memcpy", "absent_findings": [], "ranks": 1},
        "planted": "256 MiB batches copied from pageable host memory every step",
    },
    "ddp_gloo": {
        "launcher": ["-m", "torch.distributed.run", "--nproc-per-node", "2"],
        "args": ["ddp.py", "--steps", "7"],
        "capture": ["--wait", "1", "--active", "4"],
        "cpu": {"first_finding": None, "absent_findings": [], "ranks": 2},
        "gpu": None,  # two GPUs needed for NCCL; the CPU sample covers the two-rank layout
        "loader": {"num_workers": 0},
        "planted": "two DistributedDataParallel ranks (gloo): one trace per rank with distributedInfo",
    },
}


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def analyse(folder: Path) -> list[str]:
    """Finding kinds of ``tracekit analyze FOLDER`` (first rank's findings, in order)."""
    proc = subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(folder), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, check=True)
    return [f["kind"] for f in json.loads(proc.stdout)["findings"]]


def check(expected: dict[str, Any], kinds: list[str]) -> list[str]:
    """What is wrong with ``kinds`` given ``expected`` (empty: it matches)."""
    problems = []
    first = expected.get("first_finding")
    if first is not None and kinds[:1] != [first]:
        problems.append(f"expected {first} first, got {kinds}")
    for kind in expected.get("absent_findings", []):
        if kind in kinds:
            problems.append(f"{kind} should not be reported, got {kinds}")
    return problems


def loader_line(example: Path) -> int:
    """The line of ``example`` that constructs its DataLoader (``name = DataLoader(``)."""
    lines = example.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if re.match(r"\s*\w+ = DataLoader\(", line))


def check_program(expected: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What is wrong with the capture's ``program`` section given ``expected`` (empty: it matches)."""
    want = expected.get("training_loader")
    if want is None:
        return []
    from tracekit.reading.program import read_program

    facts = read_program(meta.get("program")).get(0)
    loader = facts.training_loader() if facts is not None else None
    if loader is None:
        return ["metadata.json records no DataLoader for rank 0"]
    problems = []
    if str(loader.site) != want["site"]:
        problems.append(f"the DataLoader was constructed at {want['site']}, metadata.json says {loader.site}")
    if loader.num_workers != want["num_workers"]:
        problems.append(f"expected num_workers={want['num_workers']}, metadata.json says {loader.num_workers}")
    return problems


def capture(name: str, spec: dict[str, Any], out_root: Path, gpu: bool) -> bool:
    expectation = spec["gpu" if gpu else "cpu"]
    if expectation is None:
        print(f"{name}: skipped (not meaningful on {'a GPU' if gpu else 'the CPU'})")
        return True
    stem = f"{name}.gpu" if gpu else name
    folder = out_root / stem
    command = [sys.executable, *spec.get("launcher", []), str(EXAMPLES / spec["args"][0]), *spec["args"][1:]]
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "capture", "-q", "--overwrite", "-o", str(folder), *spec["capture"], "--", *command],
        cwd=REPO, check=False,
    )
    if proc.returncode != 0:
        print(f"{name}: the capture failed (exit code {proc.returncode})")
        return False
    meta_path = folder / "metadata.json"
    meta = json.loads(meta_path.read_text())
    # keep the sample free of this machine's paths
    meta["command"] = ["python", *spec.get("launcher", []), f"scripts/examples/{spec['args'][0]}", *spec["args"][1:]]
    meta["cwd"] = "."
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    if "loader" in spec:
        example = f"scripts/examples/{spec['args'][0]}"
        expectation = {**expectation, "training_loader": {"site": f"{example}:{loader_line(REPO / example)}", **spec["loader"]}}
    kinds = analyse(folder)
    doc = {
        "sample": stem,
        "example": f"scripts/examples/{spec['args'][0]}",
        "command": ["tracekit", "capture", *spec["capture"], "--", *meta["command"]],
        "device": "gpu" if gpu else "cpu",
        "gpus": meta.get("gpus", []),
        "torch_version": meta.get("torch_version"),
        "planted": spec["planted"],
        "expected": expectation,
        "definitions": {
            "first_finding": "kind of the first finding of `tracekit analyze <folder>` (null: no requirement)",
            "absent_findings": "kinds that must not be reported",
            "ranks": "ranks in metadata.json, each with its own trace",
            "training_loader": "the DataLoader metadata.json's program section records for rank 0 (the one that gave the most "
            "batches): where the example constructs it (file:line) and its num_workers",
        },
    }
    (out_root / f"{stem}.expected.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    problems = check(expectation, kinds) + check_program(expectation, meta)
    if len(meta.get("ranks", [])) != expectation["ranks"]:
        problems.append(f"expected {expectation['ranks']} rank(s), metadata lists {len(meta.get('ranks', []))}")
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"{stem}: findings {kinds}, {size / 1024:.0f} KiB" + ("" if not problems else f"  MISMATCH: {'; '.join(problems)}"))
    return not problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "sample_traces" / "captures")
    parser.add_argument("--only", nargs="*", choices=sorted(SAMPLES), help="capture only these samples")
    args = parser.parse_args()
    gpu = _has_gpu()
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    for name in args.only or list(SAMPLES):
        ok = capture(name, SAMPLES[name], args.out, gpu) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

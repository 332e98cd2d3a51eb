"""Several ranks of a data-parallel job sharing collectives: the truth the job replay is held to.

Each rank is a :class:`~.sim.Loop` run by the single-rank simulator's primitives (host thread,
launch queue, one CUDA stream, DataLoader, syncs).  The backward pass is cut into
``buckets`` gradient buckets; after each bucket's layers the rank issues an all-reduce
(``record_param_comms`` on the host, an NCCL kernel on the same stream: communication is not
overlapped with compute).  The collective couples the ranks the way NCCL does: its kernel
starts on a rank when that rank's stream reaches it, and it ends on every rank at the same
instant, ``latency + bytes / bandwidth`` after the *last* rank's kernel started.

The ranks advance together: each rank's step is a generator that pauses at every collective
with the instant its kernel starts; the job resumes them all with the collective's end.

The truth of a job-level fix is the job re-simulated with the fix applied (a rank's loop
fixed, the slow rank replaced, communication free, buckets merged), never "step minus wait".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import statistics
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fixes import FIXES
from .kineto import BASE_NS, kineto_events
from .loop import LAUNCH_LATENCY_NS, STREAM_GAP_NS, Loop
from .sim import GpuEv, HostEv, Run, _Sim

#: the side stream of overlapped all-reduces
COMM_STREAM = 13
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass(frozen=True)
class JobSpec:
    """A data-parallel job: one loop per rank and how its gradients are all-reduced."""

    name: str
    loops: tuple[Loop, ...]
    #: all-reduces per step (gradient buckets), issued evenly through the backward pass
    buckets: int = 4
    #: gradient bytes per step (split evenly over the buckets)
    grad_bytes: int = 256 << 20
    #: link bandwidth (bytes/ns = GB/s) and fixed cost of one collective
    link_bw: float = 50.0
    latency_ns: int = 40_000
    #: per-rank clock offset written into the traces (ranks on different hosts), ns
    clock_offsets: tuple[int, ...] = ()
    #: every compute kernel's duration is scaled by a factor drawn uniformly from
    #: [1 - jitter, 1 + jitter] (seeded per rank: re-simulating a fix draws the same factors)
    jitter: float = 0.0
    #: all-reduces on a side stream (DDP's default): a bucket's all-reduce waits for its
    #: gradients on the compute stream, runs alongside the rest of the backward pass, and the
    #: optimizer waits for the last one
    overlap: bool = False

    @property
    def world_size(self) -> int:
        return len(self.loops)

    def collective_ns(self) -> int:
        return self.latency_ns + int(self.grad_bytes / self.buckets / self.link_bw)


@dataclass
class JobRun:
    spec: JobSpec
    runs: tuple[Run, ...]
    #: (step, bucket) → the collective's end
    ends: dict[tuple[int, int], int]

    @property
    def steady_step_ns(self) -> float:
        """The job's step: the median over ranks of each rank's steady-state step time."""
        return float(statistics.median(r.steady_step_ns for r in self.runs))


class _RankSim(_Sim):
    def __init__(self, loop: Loop, rank: int, spec: JobSpec) -> None:
        super().__init__(loop)
        self.rank = rank
        self.spec = spec
        self.seq = 0
        self.rng_jitter = random.Random(1_000 + rank)
        self.comm_free = 0

    def kernel_op(self, name: str, kernel: str, dur: int, **kw: Any) -> None:
        j = self.spec.jitter
        factor = 1.0 + self.rng_jitter.uniform(-j, j) if j else 1.0
        super().kernel_op(name, kernel, int(dur * factor), **kw)

    def allreduce(self, nbytes: int) -> Generator[int, int, None]:
        """Issue one all-reduce: yields when its kernel starts on this rank, resumes with its end."""
        loop = self.loop
        self.corr += 1
        corr = self.corr
        self.seq += 1
        comm_args = {
            "Collective name": "allreduce",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Group size": self.spec.world_size,
            "Process Group Ranks": str(list(range(self.spec.world_size))),
            "In msg nelems": nbytes // 4,
            "Out msg nelems": nbytes // 4,
            "dtype": "Float",
            "Sequence number": self.seq,
        }
        op = HostEv("cpu_op", "record_param_comms", self.t, self.t, args=dict(comm_args))
        self.host.append(op)
        self.t += loop.dispatch_ns // 2
        call_start = self.t
        issue = max(call_start + loop.launch_ns, self._queue_wait())
        if self.spec.overlap:
            # the side stream waits for the bucket's gradients (an event on the compute stream)
            start = max(issue + LAUNCH_LATENCY_NS, self.comm_free + STREAM_GAP_NS, self.gpu_free + STREAM_GAP_NS)
        else:
            start = max(issue + LAUNCH_LATENCY_NS, self.gpu_free + STREAM_GAP_NS)
        self.starts.append(start)
        self.api("cudaLaunchKernel", issue - call_start, correlation=corr)
        self.t += loop.dispatch_ns - loop.dispatch_ns // 2
        op.end = self.t
        self.t += loop.python_ns
        end = yield start
        if self.spec.overlap:
            self.comm_free = end
        else:
            self.gpu_free = end
        self.step_last_gpu = max(self.step_last_gpu, end)
        # PyTorch copies the record_param_comms args onto the NCCL kernel (as in the real traces)
        args: dict[str, object] = {k: v for k, v in comm_args.items() if k != "Sequence number"}
        if self.spec.overlap:
            args["stream"] = COMM_STREAM
        self.gpu.append(GpuEv("kernel", NCCL_KERNEL, start, end, corr, args=args))

    def job_step(self, k: int) -> Generator[int, int, None]:
        loop = self.loop
        ev = HostEv("user_annotation", f"ProfilerStep#{k + 1}", self.t, self.t)
        self.host.append(ev)
        self.forward(k)
        per_bucket = max(loop.layers // self.spec.buckets, 1)
        issued = 0
        nbytes = self.spec.grad_bytes // self.spec.buckets
        for i in range(loop.layers):
            self.layer(backward=True)
            last = i == loop.layers - 1
            if ((i + 1) % per_bucket == 0 and issued < self.spec.buckets - 1) or last:
                n = self.spec.buckets - issued if last else 1
                for _ in range(n):
                    yield from self.allreduce(nbytes)
                    issued += 1

        # the optimizer waits for the last all-reduce (the compute stream waits on its event)
        self.gpu_free = max(self.gpu_free, self.comm_free)
        self.step_tail()
        ev.end = self.t


def simulate_job(spec: JobSpec) -> JobRun:
    """Run every rank of ``spec`` for its loops' ``steps`` steps, collectives shared."""
    for loop in spec.loops:
        # a rank's backward issues its all-reduces from the one host thread, eagerly
        unsupported = [f for f in ("backward_thread", "cuda_graphs") if getattr(loop, f)]
        unsupported += [f for f in ("train", "step_markers") if not getattr(loop, f)]
        if unsupported:
            raise ValueError(f"{spec.name}: a rank's loop {loop.name} sets {', '.join(unsupported)}, which the job simulator does not model")
    sims = [_RankSim(loop, r, spec) for r, loop in enumerate(spec.loops)]
    steps = spec.loops[0].steps
    starts: list[list[int]] = [[] for _ in sims]
    done: list[list[int]] = [[] for _ in sims]
    ends: dict[tuple[int, int], int] = {}
    cost = spec.collective_ns()
    for k in range(steps):
        gens = []
        for r, s in enumerate(sims):
            starts[r].append(s.t)
            s.step_last_gpu = 0
            gens.append(s.job_step(k))
        ready = [next(g) for g in gens]
        b = 0
        while True:
            end = max(ready) + cost
            ends[(k, b)] = end
            b += 1
            nxt: list[int] = []
            for g in gens:
                with contextlib.suppress(StopIteration):
                    nxt.append(g.send(end))
            if not nxt:
                break
            if len(nxt) != len(gens):
                raise AssertionError("ranks issued different numbers of collectives")
            ready = nxt
        for r, s in enumerate(sims):
            done[r].append(s.step_last_gpu)
    runs = tuple(
        Run(loop=s.loop, host=s.host, gpu=s.gpu, syncs=s.syncs, step_starts=starts[r], gpu_done=done[r], host_end=s.t)
        for r, s in enumerate(sims)
    )
    return JobRun(spec=spec, runs=runs, ends=ends)


def write_job(run: JobRun, folder: Path) -> Path:
    """One Kineto trace per rank (``rank{r}.pt.trace.json``) with ``distributedInfo``; each
    rank's clock shifted by its :attr:`JobSpec.clock_offsets` entry."""
    folder.mkdir(parents=True, exist_ok=True)
    offsets = run.spec.clock_offsets or (0,) * len(run.runs)
    for r, (rr, off) in enumerate(zip(run.runs, offsets, strict=True)):
        shifted = _shift(rr, off)
        doc = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": run.spec.world_size},
            "deviceProperties": [
                {
                    "id": 0,
                    "name": "NVIDIA A100-SXM4-80GB",
                    "totalGlobalMem": 85_899_345_920,
                    "computeMajor": 8,
                    "computeMinor": 0,
                    "numSms": 108,
                    "maxThreadsPerBlock": 1024,
                    "warpSize": 32,
                }
            ],
            "cuda_runtime_version": 12040,
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS,
            "traceName": f"rank{r}",
            "traceEvents": _streams(kineto_events(shifted)),
        }
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def one_step(run: JobRun, k: int) -> JobRun:
    """The job as a ``schedule(wait=..., active=1)`` capture records it: step ``k`` only.

    Each rank keeps the host rows that start inside its step ``k`` (from the step's start to the
    next step's, or to the end), the GPU rows and sync rows those launched, and the collectives'
    ends of that step; the simulated times are untouched, so the step's truth is the full
    simulation's (:func:`step_truth_ns`)."""
    runs = []
    for rr in run.runs:
        start = rr.step_starts[k]
        stop = rr.step_starts[k + 1] if k + 1 < len(rr.step_starts) else rr.host_end
        host = [h for h in rr.host if start <= h.start < stop]
        launched = {h.correlation for h in host if h.correlation is not None}
        runs.append(
            dataclasses.replace(
                rr,
                host=host,
                gpu=[g for g in rr.gpu if g.correlation in launched],
                syncs=[s for s in rr.syncs if s.correlation in launched],
                step_starts=[start],
                gpu_done=[rr.gpu_done[k]],
                host_end=stop,
            )
        )
    ends = {key: end for key, end in run.ends.items() if key[0] == k}
    return JobRun(spec=run.spec, runs=tuple(runs), ends=ends)


def step_truth_ns(run: JobRun, k: int) -> float:
    """The job's step ``k`` as simulated: the median over ranks of each rank's step ``k`` (from its
    start to the next step's start, or to when its GPU finished the step's work if later)."""
    return float(statistics.median(r.step_ns[k] for r in run.runs))


def _streams(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPU rows whose args name another stream go on that stream's track."""
    for e in events:
        stream = e.get("args", {}).get("stream") if isinstance(e.get("args"), dict) else None
        if stream is not None and e.get("ph") == "X" and e.get("tid") != stream and e.get("pid") == e["args"].get("device"):
            e["tid"] = stream
    return events


def _shift(run: Run, off: int) -> Run:
    if not off:
        return run
    return dataclasses.replace(
        run,
        host=[dataclasses.replace(h, start=h.start + off, end=h.end + off) for h in run.host],
        gpu=[dataclasses.replace(g, start=g.start + off, end=g.end + off) for g in run.gpu],
        syncs=[dataclasses.replace(s, start=s.start + off, end=s.end + off) for s in run.syncs],
        step_starts=[t + off for t in run.step_starts],
        gpu_done=[t + off for t in run.gpu_done],
        host_end=run.host_end + off,
    )


# --------------------------------------------------------------------------------------------
# job-level fixes and their truth


def fix_rank(spec: JobSpec, rank: int, kind: str) -> JobSpec:
    """``kind``'s fix (:data:`.sim.FIXES`) applied on one rank only."""
    loops = list(spec.loops)
    loops[rank] = FIXES[kind](loops[rank])
    return dataclasses.replace(spec, loops=tuple(loops))


def straggler_at_median(spec: JobSpec, rank: int, like: int) -> JobSpec:
    """The slow rank runs the loop of a typical rank."""
    loops = list(spec.loops)
    loops[rank] = dataclasses.replace(spec.loops[like], name=spec.loops[rank].name)
    return dataclasses.replace(spec, loops=tuple(loops))


def free_communication(spec: JobSpec) -> JobSpec:
    """Perfect overlap: communication costs the step nothing (waits for late ranks remain)."""
    return dataclasses.replace(spec, latency_ns=0, link_bw=float("inf"))


def half_buckets(spec: JobSpec) -> JobSpec:
    """Half as many all-reduces per step, the same bytes."""
    return dataclasses.replace(spec, buckets=max(spec.buckets // 2, 1))


def _base(**kw: object) -> Loop:
    args: dict[str, object] = {
        "name": "rank",
        "steps": 8,
        "layers": 8,
        "num_workers": 4,
        "load_ns": 8_000_000,
        "pinned": True,
        "non_blocking": True,
        "gemm_ns": 1_200_000,
        "elementwise_ns": 250_000,
        "step_sync": "item",
    }
    args.update(kw)
    return Loop(**args)  # type: ignore[arg-type]


#: name → a four-rank job with something planted
JOBS: dict[str, JobSpec] = {
    # rank 3 builds its batches on the main thread, slowly: everyone waits for it at the first bucket
    "slow_loader": JobSpec(
        "slow_loader",
        (
            _base(),
            _base(),
            _base(),
            _base(num_workers=0, load_ns=9_000_000, pinned=False, non_blocking=False, batch_bytes=4 << 20),
        ),
        clock_offsets=(0, 2_500_000, -1_700_000, 900_000),
    ),
    # rank 1's GPU is 40% slower at its GEMMs (thermal throttling, a different SKU)
    "slow_gpu": JobSpec("slow_gpu", (_base(), _base(gemm_ns=1_700_000), _base(), _base())),
    # balanced ranks, large unoverlapped all-reduces in many small buckets
    "unoverlapped": JobSpec(
        "unoverlapped", (_base(),) * 4, buckets=8, grad_bytes=512 << 20, link_bw=40.0, latency_ns=150_000
    ),
    # all of it at once, kernels jittering by up to 15% (every step differs)
    "mixed": JobSpec(
        "mixed",
        (
            _base(),
            _base(gemm_ns=1_500_000),
            _base(),
            _base(num_workers=0, load_ns=7_000_000, pinned=False, non_blocking=False, batch_bytes=4 << 20),
        ),
        buckets=6,
        grad_bytes=384 << 20,
        clock_offsets=(0, 40_000_000, 0, -3_000_000),
        jitter=0.15,
    ),
}

# the same jobs with DDP's default: all-reduces on a side stream, overlapping the backward pass
JOBS["slow_loader_overlapped"] = dataclasses.replace(JOBS["slow_loader"], name="slow_loader_overlapped", overlap=True)
JOBS["mixed_overlapped"] = dataclasses.replace(JOBS["mixed"], name="mixed_overlapped", overlap=True)

"""What the job model answers, as frozen results (:class:`JobModel`, :class:`JobWhatIf`), and the
assumption behind each kind of job what-if (:data:`JOB_FIX_MODELS`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import polars as pl

#: the fixed cost of one collective (launch, protocol handshake, ring latency), saved once
#: per merged pair by the fewer/larger-buckets what-if; capped by the smaller collective's time
COLLECTIVE_LATENCY_NS = 30_000


#: what each kind of job what-if assumes (the report states it)
JOB_FIX_MODELS: dict[str, str] = {
    "straggler_at_median": "the slowest rank's work between collectives takes the median rank's time",
    "cause_on_rank": "the cause's idle time on that rank's GPU between collectives is gone",
    "cause_everywhere": "the cause's idle time is gone on every rank",
    "perfect_overlap": "collectives take no time of their own (waits for late ranks remain)",
    "half_collectives": (
        f"adjacent collectives of one operation in a step are merged: the same bytes, one fixed cost "
        f"({COLLECTIVE_LATENCY_NS / 1000:g} µs) saved per pair"
    ),
}


@dataclass(frozen=True)
class JobWhatIf:
    """One job-level question and the model's answer."""

    kind: str
    label: str
    question: str
    #: saving of the job's step (ms, never negative) and the job step it predicts
    saving_ms: float
    predicted_step_ms: float
    rank: int | None = None
    cause: str | None = None


@dataclass(frozen=True)
class JobModel:
    """The job replay's answers (see the module docstring)."""

    ranks: tuple[int, ...]
    world_size: int | None
    #: ranks of ``range(world_size)`` with no trace
    missing_ranks: tuple[int, ...]
    #: collectives matched on at least two ranks, and kernel instances left out
    matched_collectives: int
    unmatched_kernels: int
    #: rank, clock_offset_ms (what was subtracted to align it), collectives (matched on the rank)
    clocks: pl.DataFrame
    #: median spread of the aligned end of one collective over its ranks (µs); None: no match
    clock_residual_us: float | None
    #: the job step from the recorded collective ends and from the unchanged replay (ms)
    step_ms: float | None
    replayed_step_ms: float | None
    #: rank, cause, ms_per_step, share: the cross-rank critical path summed per step
    #: (cause ``communication``: the collectives' own time)
    path: pl.DataFrame
    #: rank, wait_ms_per_step, waits_for (the rank it waited for most), waits_for_ms_per_step
    waits: pl.DataFrame
    #: largest saving first
    what_ifs: tuple[JobWhatIf, ...]
    #: steps the job step and path are measured over
    steps: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: how collectives were matched across ranks (:data:`.multirank.MATCHING`); None: no match
    matching: str | None = None
    #: the replayed collectives per rank on the aligned clock (what rank lanes draw): rank, j (the
    #: collective, in end order), step, op, work_start_ns (the rank's previous collective's end),
    #: start_ns, end_ns, critical (the rank arrived last and the cross-rank path runs through it)
    lanes: pl.DataFrame | None = None
    #: the job step is one profiled step, from each rank's step start to its end through the
    #: step's collectives (False: the median time between the last collectives of consecutive steps)
    one_step: bool = False

    @property
    def error(self) -> float | None:
        if self.step_ms is None or self.replayed_step_ms is None or self.step_ms <= 0:
            return None
        return abs(self.replayed_step_ms - self.step_ms) / self.step_ms

    @property
    def bottleneck(self) -> tuple[int | None, str] | None:
        """The (rank, cause) the critical path spends most time in, communication aside
        unless nothing else is on it."""
        if self.path.height == 0:
            return None
        work = self.path.filter(pl.col("cause") != "communication")
        top = (work if work.height else self.path).row(0, named=True)
        return (None if top["rank"] is None else int(top["rank"]), str(top["cause"]))

    def what_if(self, label: str) -> JobWhatIf | None:
        return next((w for w in self.what_ifs if w.label == label), None)


def empty_model(
    ranks: tuple[int, ...], world_size: int | None, missing: tuple[int, ...], unmatched: int, notes: list[str]
) -> JobModel:
    return JobModel(
        ranks=ranks,
        world_size=world_size,
        missing_ranks=missing,
        matched_collectives=0,
        unmatched_kernels=unmatched,
        clocks=pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int32}).with_columns(
            pl.lit(None, dtype=pl.Float64).alias("clock_offset_ms"), pl.lit(0, dtype=pl.Int64).alias("collectives")
        ),
        clock_residual_us=None,
        step_ms=None,
        replayed_step_ms=None,
        path=pl.DataFrame(
            schema={"rank": pl.Int32, "cause": pl.String, "ms_per_step": pl.Float64, "share": pl.Float64}
        ),
        waits=pl.DataFrame(
            schema={
                "rank": pl.Int32,
                "wait_ms_per_step": pl.Float64,
                "waits_for": pl.Int32,
                "waits_for_ms_per_step": pl.Float64,
            }
        ),
        what_ifs=(),
        steps=0,
        notes=tuple(notes),
    )


def with_clocks(empty: JobModel, clocks: pl.DataFrame, residual: float, matched: int, notes: list[str]) -> JobModel:
    return dataclasses.replace(
        empty, clocks=clocks, clock_residual_us=residual, matched_collectives=matched, notes=tuple(notes)
    )

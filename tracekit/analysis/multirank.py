"""Across ranks: stragglers, load imbalance and communication that is not overlapped.

Each rank of a distributed job is first diagnosed on its own (:func:`tracekit.analysis.diagnose`).
:func:`rank_profiles` condenses a diagnosis into a small :class:`RankProfile` — per-step
accounting on the rank's primary GPU plus every communication kernel of that GPU, matched
to its step — and :func:`analyze_ranks` compares the profiles of a job's ranks:

* **Steps are aligned by step number** (``ProfilerStep#N``; the position for index-based step
  sources).  Only complete steps present on every rank are compared.
* **Collectives are matched** across ranks by ``(step, operation, n-th of that operation in
  the step)``: NCCL requires every rank to issue a communicator's collectives in the same
  order.  Operations come from the kernel name (NCCL/RCCL, newer ``ncclDevKernel_*`` names
  and collectives not named "nccl", such as vLLM's ``cross_device_reduce``).
* **Clocks.** Ranks on different hosts have offset clocks.  A collective ends on all its
  ranks at (nearly) the same instant, so each rank's offset is the median difference between
  its collective end times and the median end of the same collectives over all ranks; start
  times are corrected by it before they are compared.
* **Stragglers** are the ranks that arrive late: a rank's *lateness* is how long after the
  earliest rank it starts each matched collective (summed per step, averaged over steps),
  and the other ranks *wait* inside their collective kernel for it.  Without matched
  collectives, lateness is measured on step starts.  A rank straggles when its lateness is
  at least :data:`STRAGGLER_MIN_SHARE` of the step (and :data:`STRAGGLER_MIN_NS`) and at
  least :data:`STRAGGLER_RELATIVE` of the largest lateness in the job.  When each rank has one
  step, a little lateness is as likely the step's own noise (kernel times vary) as a slow
  rank: a rank straggles there only when it is late by a finding's share of the step
  (:data:`~.findings.MIN_SHARE`).
* **Load imbalance** is the spread of compute (GPU busy time without communication) across
  ranks: ``max / mean - 1``; the time it costs per step is ``max - mean``.
* **Exposed communication** is the time only communication kernels run (from the per-rank
  timeline); the part of it spent waiting for stragglers is reported separately.

Everything here is a polars join or group-by over small frames (steps × ranks, collectives);
Python loops only over ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ..schema import EventKind
from . import patterns
from .findings import MIN_SHARE, Finding
from .intervals import covered_in, union

if TYPE_CHECKING:
    from .results import Diagnosis

#: a rank straggles when it arrives at least this share of the median step late...
STRAGGLER_MIN_SHARE = 0.02
#: ...and at least this late in absolute terms...
STRAGGLER_MIN_NS = 100_000
#: ...and at least this share of the latest rank's lateness
STRAGGLER_RELATIVE = 0.5

PROFILE_STEPS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "complete": pl.Boolean(),
    "device": pl.Int32(),
    "gpu_busy_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "communication_ns": pl.Int64(),
    "exposed_communication_ns": pl.Int64(),
}

#: what identifies one collective across ranks once :func:`match_collectives` has set ``group``,
#: ``matched_by`` and ``seq`` (the same collective has the same key on every rank of its group)
MATCH_KEY = ("step", "op", "group", "matched_by", "seq")

COLLECTIVES_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "op": pl.String(),
    #: order among the rank's collectives of this step and operation
    "seq": pl.Int64(),
    #: process group as the trace names it ("" when it does not say)
    "group": pl.String(),
    #: the group's own sequence number of the collective when the trace records it
    "group_seq": pl.Int64(),
    #: order among the rank's collectives of this step, operation and group
    "group_order": pl.Int64(),
    "name": pl.String(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
}

RANK_SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "source": pl.String(),
    "step_source": pl.String(),
    "steps": pl.Int64(),
    "step_ms_median": pl.Float64(),
    "gpu_utilization": pl.Float64(),
    "gpu_busy_ms": pl.Float64(),
    "compute_ms": pl.Float64(),
    "communication_ms": pl.Float64(),
    "exposed_communication_ms": pl.Float64(),
    "wait_ms": pl.Float64(),
    "late_ms": pl.Float64(),
    "step_start_late_ms": pl.Float64(),
    "clock_offset_ms": pl.Float64(),
    "straggler": pl.Boolean(),
}

PER_STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "dur_ns": pl.Int64(),
    "gpu_busy_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "exposed_communication_ns": pl.Int64(),
    "start_late_ns": pl.Int64(),
    "late_ns": pl.Int64(),
    "wait_ns": pl.Int64(),
}

#: canonical collective operations, first match wins (names lower-cased, letters only)
_OPS = (
    ("reducescatter", r"reducescatter"),
    ("allgather", r"allgather"),
    ("alltoall", r"alltoall"),
    ("allreduce", r"allreduce|crossdevicereduce|oneshot|twoshot|multimem"),
    ("broadcast", r"broadcast|bcast"),
    ("sendrecv", r"sendrecv|send|recv"),
    ("reduce", r"reduce"),
    ("barrier", r"barrier"),
)

@dataclass(frozen=True)
class RankProfile:
    """What the multi-rank comparison needs from one rank's diagnosis (small, picklable)."""

    rank: int
    #: the file the rank came from
    source: str
    #: PROFILE_STEPS_SCHEMA: one row per step window of the rank, primary device accounting
    steps: pl.DataFrame
    #: COLLECTIVES_SCHEMA: communication kernels on the primary device, matched to steps
    collectives: pl.DataFrame
    step_source: str | None = None


@dataclass(frozen=True)
class MultiRank:
    """The comparison of a job's ranks."""

    ranks: tuple[int, ...]
    #: complete step numbers present on every rank
    aligned_steps: tuple[int, ...]
    #: RANK_SUMMARY_SCHEMA, one row per rank (per-step values are means over the compared steps)
    per_rank: pl.DataFrame
    #: PER_STEP_SCHEMA, one row per rank and aligned step
    per_step: pl.DataFrame
    stragglers: tuple[int, ...]
    #: how lateness was measured: ``collective_start``, ``step_start`` or None
    straggler_basis: str | None
    #: what stragglers cost per step: the longest wait of a rank inside its collectives (or, without
    #: collectives, the latest rank's step-start lateness), ms
    straggle_ms_per_step: float | None
    #: compute spread: max / mean - 1 over ranks
    imbalance: float | None
    #: max - mean compute per step, ms
    imbalance_ms_per_step: float | None
    #: max - min compute per step, ms
    compute_spread_ms: float | None
    #: mean over ranks of exposed communication per step, ms
    exposed_communication_ms: float | None
    #: of which waiting inside collectives for late ranks, ms
    wait_ms: float | None
    step_ms_median: float | None
    matched_collectives: int
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- profiles


def collective_op(name: pl.Expr, collective: pl.Expr | None = None) -> pl.Expr:
    """The canonical operation (``allreduce``, ``allgather``...) of a communication kernel."""
    text = name.fill_null("")
    if collective is not None:
        text = collective.fill_null("") + " " + text
    letters = text.str.to_lowercase().str.replace_all(r"[^a-z ]", "")
    expr: pl.Expr = pl.lit("other")
    for op, pattern in reversed(_OPS):
        expr = pl.when(letters.str.contains(pattern)).then(pl.lit(op)).otherwise(expr)
    return expr


def communication_kernels(events: pl.DataFrame) -> pl.DataFrame:
    """GPU kernels that are communication (NCCL/RCCL and collectives not named "nccl")."""
    return events.filter(
        (pl.col("kind") == EventKind.KERNEL.value)
        & pl.col("device").is_not_null()
        & (pl.col("dur_ns") > 0)
        & pl.col("name").str.contains(patterns.COMM_KERNEL)
    )


def rank_profiles(events: pl.DataFrame, d: Diagnosis, source: str) -> list[RankProfile]:
    """One :class:`RankProfile` per rank of a diagnosed trace (``events`` from the same tables)."""
    steps = d.steps
    if steps.height == 0:
        return []
    primary = pl.DataFrame(
        {"rank": list(d.timeline.primary_device), "device": list(d.timeline.primary_device.values())},
        schema={"rank": pl.Int32, "device": pl.Int32},
    )
    per_step = d.timeline.per_step.join(primary, on=["rank", "device"], how="semi").select(
        "rank", "step", "device", "compute_ns", "exposed_communication_ns"
    )
    frame = steps.select("rank", "step", "start_ns", "end_ns", "dur_ns", "complete", "gpu_busy_ns").join(
        per_step, on=["rank", "step"], how="left"
    )
    comm = communication_kernels(events).join(primary, on=["rank", "device"], how="semi")
    u = union(comm, ["rank"])
    frame = frame.with_columns(covered_in(frame, u, ["rank"]).alias("communication_ns"))
    frame = frame.select(list(PROFILE_STEPS_SCHEMA)).cast(PROFILE_STEPS_SCHEMA).sort("rank", "step")  # type: ignore[arg-type]

    collectives = _collectives(comm, frame)
    out = []
    for rank in sorted(int(r) for r in frame["rank"].unique().to_list()):
        out.append(
            RankProfile(
                rank=rank,
                source=source,
                steps=frame.filter(pl.col("rank") == rank),
                collectives=collectives.filter(pl.col("rank") == rank),
                step_source=d.step_sources.get(rank),
            )
        )
    return out


def _collectives(comm: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    if comm.height == 0:
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    windows = steps.select("rank", pl.col("step"), pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we")).sort("_ws")
    group = pl.col("process_group").fill_null("") if "process_group" in comm.columns else pl.lit("")
    recorded = pl.col("collective_seq") if "collective_seq" in comm.columns else pl.lit(None, dtype=pl.Int64)
    k = comm.select(
        "rank", "name", "collective", "device", "stream", "start_ns", "end_ns", "dur_ns",
        group.cast(pl.String).alias("group"), recorded.cast(pl.Int64).alias("_recorded"),
    ).sort("start_ns")
    k = k.join_asof(windows, left_on="start_ns", right_on="_ws", by="rank", strategy="backward", check_sortedness=False)
    k = k.filter(pl.col("step").is_not_null() & (pl.col("start_ns") < pl.col("_we")))
    k = k.with_columns(collective_op(pl.col("name"), pl.col("collective")).alias("op")).sort("rank", "step", "start_ns", "stream")
    k = k.with_columns(
        pl.int_range(pl.len()).over("rank", "step", "op").cast(pl.Int64).alias("seq"),
        pl.int_range(pl.len()).over("rank", "step", "op", "group").cast(pl.Int64).alias("group_order"),
        pl.col("_recorded").alias("group_seq"),
    )
    return k.select(list(COLLECTIVES_SCHEMA)).cast(COLLECTIVES_SCHEMA)  # type: ignore[arg-type]


#: how a collective was matched across ranks (the ``matched_by`` values)
MATCHING = {
    "sequence": "process group and recorded sequence number",
    "group_order": "order within its process group (the trace records groups, not sequence numbers)",
    "order": "order within its operation and step (the traces do not record process groups)",
}


def as_collectives(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` as :data:`COLLECTIVES_SCHEMA` rows; tables built without the group columns
    (hand-built, older callers) get "no group recorded" and their order as the group order."""
    missing = []
    if "group" not in frame.columns:
        missing.append(pl.lit("", dtype=pl.String).alias("group"))
    if "group_seq" not in frame.columns:
        missing.append(pl.lit(None, dtype=pl.Int64).alias("group_seq"))
    if "group_order" not in frame.columns:
        missing.append(pl.col("seq").alias("group_order"))
    if missing:
        frame = frame.with_columns(missing)
    return frame.select(list(COLLECTIVES_SCHEMA)).cast(COLLECTIVES_SCHEMA)  # type: ignore[arg-type]


def match_collectives(coll: pl.DataFrame) -> pl.DataFrame:
    """``coll`` (:data:`COLLECTIVES_SCHEMA`) with ``group``, ``matched_by`` and ``seq`` set so
    that :data:`MATCH_KEY` identifies one collective on every rank.

    The strongest basis every rank's trace supports is used: the group's recorded sequence
    number when every rank with collectives records one (newer PyTorch: ``Seq``), else the
    order within the process group when every rank names groups (Kineto
    ``record_param_comms`` args), else the order within the step and operation (Nsight
    kernels, host ranges).  A row without what its basis needs falls back to the next one.
    """
    if coll.height == 0:
        return coll.with_columns(pl.lit(None, dtype=pl.String).alias("matched_by"))
    per_rank = coll.group_by("rank").agg(
        pl.col("group_seq").is_not_null().any().alias("_s"), (pl.col("group") != "").any().alias("_g")
    )
    with_seq = bool(per_rank["_s"].all())
    with_group = bool(per_rank["_g"].all())
    named = pl.col("group") != ""
    basis = (
        pl.when(pl.lit(with_seq) & pl.col("group_seq").is_not_null()).then(pl.lit("sequence"))
        .when(pl.lit(with_group) & named).then(pl.lit("group_order"))
        .otherwise(pl.lit("order"))
    )
    return coll.with_columns(basis.alias("matched_by")).with_columns(
        pl.when(pl.col("matched_by") == "order").then(pl.lit("")).otherwise(pl.col("group")).alias("group"),
        pl.when(pl.col("matched_by") == "sequence")
        .then(pl.col("group_seq"))
        .when(pl.col("matched_by") == "group_order")
        .then(pl.col("group_order"))
        .otherwise(pl.col("seq"))
        .alias("seq"),
    )


def matching_summary(matched: pl.DataFrame) -> str | None:
    """Which basis matched the collectives (``matched``: rows of :func:`match_collectives`
    present on two ranks or more): one phrase, with counts when several were used."""
    if matched.height == 0:
        return None
    counts = matched.unique(list(MATCH_KEY)).group_by("matched_by").len().sort(["len", "matched_by"], descending=[True, False])
    parts = [(str(b), int(n)) for b, n in counts.iter_rows()]
    if len(parts) == 1:
        return MATCHING.get(parts[0][0], parts[0][0])
    return "; ".join(f"{n} by {MATCHING.get(b, b)}" for b, n in parts)


# --------------------------------------------------------------------------- comparison


def analyze_ranks(profiles: Sequence[RankProfile], *, world_size: int | None = None) -> MultiRank:
    """Compare the ranks of one job (profiles of distinct ranks; see the module docstring)."""
    by_rank: dict[int, RankProfile] = {}
    for p in profiles:
        by_rank.setdefault(p.rank, p)
    ranks = tuple(sorted(by_rank))
    notes: list[str] = []
    if len(by_rank) < len(profiles):
        notes.append("several traces claim the same rank; the first of each was compared.")
    steps = _concat([by_rank[r].steps for r in ranks], PROFILE_STEPS_SCHEMA)
    coll = _concat([as_collectives(by_rank[r].collectives) for r in ranks], COLLECTIVES_SCHEMA)
    if world_size and len(ranks) < world_size:
        notes.append(f"{len(ranks)} of {world_size} ranks are present: stragglers and imbalance are among those only.")

    complete = steps.filter(pl.col("complete"))
    counts = complete.group_by("step").agg(pl.col("rank").n_unique().alias("_n"))
    aligned = sorted(int(s) for s in counts.filter(pl.col("_n") == len(ranks))["step"].to_list())
    if len(ranks) > 1 and not aligned and complete.height:
        notes.append("no complete step number is present on every rank: steps could not be aligned across ranks.")
    # steps the comparison uses: the aligned ones, or each rank's own complete steps when none align
    used = complete.filter(pl.col("step").is_in(aligned)) if aligned else complete
    step_ms_median = _ms(used["dur_ns"].median()) if used.height else None

    # --- collectives present on at least two ranks, clock offsets from their end times
    matched = pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    offsets = pl.DataFrame({"rank": list(ranks), "offset_ns": [0] * len(ranks)}, schema={"rank": pl.Int32, "offset_ns": pl.Int64})
    key = list(MATCH_KEY)
    if len(ranks) > 1 and coll.height:
        coll = match_collectives(coll)
        c = coll.filter(pl.col("step").is_in(aligned)) if aligned else coll
        present = c.group_by(key).agg(pl.col("rank").n_unique().alias("_n"))
        matched = c.join(present.filter(pl.col("_n") >= 2).select(key), on=key, how="semi")
    n_matched = matched.select(key).unique().height if matched.height else 0
    if n_matched:
        with_mid = matched.with_columns(pl.col("end_ns").median().over(key).alias("_mid"))
        est = with_mid.group_by("rank").agg((pl.col("end_ns") - pl.col("_mid")).median().round(0).cast(pl.Int64).alias("offset_ns"))
        offsets = offsets.drop("offset_ns").join(est, on="rank", how="left").with_columns(pl.col("offset_ns").fill_null(0))
    elif len(ranks) > 1:
        notes.append("no communication kernels matched across ranks: clocks are assumed synchronised and lateness is measured on step starts.")

    # --- lateness and waiting per matched collective, summed per (rank, step)
    per_coll = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "late_ns": pl.Int64, "wait_ns": pl.Int64})
    if n_matched:
        m = matched.join(offsets, on="rank").with_columns((pl.col("start_ns") - pl.col("offset_ns")).alias("_s"))
        m = m.with_columns(
            (pl.col("_s") - pl.col("_s").min().over(key)).alias("late_ns"),
            pl.min_horizontal(pl.col("_s").max().over(key) - pl.col("_s"), pl.col("dur_ns")).alias("wait_ns"),
        )
        per_coll = m.group_by("rank", "step").agg(pl.col("late_ns").sum(), pl.col("wait_ns").sum())

    # --- per (rank, step) table over the compared steps
    if n_matched:
        per_step = used.join(offsets, on="rank", how="left").with_columns((pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("_s"))
    else:
        per_step = used.with_columns(pl.col("start_ns").alias("_s"))
    if aligned and len(ranks) > 1:
        per_step = per_step.with_columns((pl.col("_s") - pl.col("_s").min().over("step")).alias("start_late_ns"))
    else:
        per_step = per_step.with_columns(pl.lit(None, dtype=pl.Int64).alias("start_late_ns"))
    if per_coll.height:
        per_step = per_step.join(per_coll, on=["rank", "step"], how="left").with_columns(
            pl.col("late_ns").fill_null(0), pl.col("wait_ns").fill_null(0)
        )
    else:
        per_step = per_step.with_columns(pl.lit(0, dtype=pl.Int64).alias("late_ns"), pl.lit(0, dtype=pl.Int64).alias("wait_ns"))

    # --- per rank; one statistic (analysis/steady.py): each per-step quantity is its share of
    # the rank's step time times the rank's median step, so they describe the stated step
    def in_median_step(col: str) -> pl.Expr:
        value = pl.col(col).sum() / pl.col("dur_ns").sum() * pl.col("dur_ns").median() / 1e6
        return pl.when(pl.col(col).is_not_null().any()).then(value).otherwise(None).alias(col.replace("_ns", "_ms"))

    summary = per_step.group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("steps"),
        (pl.col("dur_ns").median() / 1e6).alias("step_ms_median"),
        (pl.col("gpu_busy_ns").sum() / pl.col("dur_ns").sum()).alias("gpu_utilization"),
        in_median_step("gpu_busy_ns").alias("gpu_busy_ms"),
        in_median_step("compute_ns"),
        in_median_step("communication_ns"),
        in_median_step("exposed_communication_ns"),
        in_median_step("wait_ns"),
        in_median_step("late_ns"),
        (pl.col("start_late_ns").median() / 1e6).alias("step_start_late_ms"),
    )
    per_step = per_step.select(list(PER_STEP_SCHEMA)).cast(PER_STEP_SCHEMA).sort("rank", "step")  # type: ignore[arg-type]
    meta = pl.DataFrame(
        {
            "rank": list(ranks),
            "source": [by_rank[r].source for r in ranks],
            "step_source": [by_rank[r].step_source for r in ranks],
            "clock_offset_ms": [None] * len(ranks),
        },
        schema={"rank": pl.Int32, "source": pl.String, "step_source": pl.String, "clock_offset_ms": pl.Float64},
    )
    if n_matched:
        meta = meta.drop("clock_offset_ms").join(
            offsets.select("rank", (pl.col("offset_ns") / 1e6).alias("clock_offset_ms")), on="rank", how="left"
        )
    else:
        meta = meta.with_columns(pl.lit(0.0).alias("clock_offset_ms"))
    per_rank = meta.join(summary, on="rank", how="left").with_columns(pl.col("steps").fill_null(0))

    # --- stragglers
    basis: str | None = None
    metric = None
    if len(ranks) > 1 and n_matched:
        basis, metric = "collective_start", "late_ms"
    elif len(ranks) > 1 and aligned:
        basis, metric = "step_start", "step_start_late_ms"
    stragglers: tuple[int, ...] = ()
    straggle_ms: float | None = None
    if metric is not None:
        values = per_rank.select("rank", pl.col(metric).fill_null(0.0).alias("_m"))
        top = float(values["_m"].max() or 0.0)  # type: ignore[arg-type]
        one_step = int(per_rank["steps"].max() or 0) == 1  # type: ignore[arg-type]
        least = MIN_SHARE if one_step else STRAGGLER_MIN_SHARE
        floor = max(least * (step_ms_median or 0.0), STRAGGLER_MIN_NS / 1e6)
        if one_step:
            notes.append(
                f"one step per rank: a rank is called a straggler only when it is late by {100 * MIN_SHARE:.0f}% of the step "
                "or more (less is as likely the step's own variation); whether a rank is late in every step takes several."
            )
        # what the stragglers cost: the longest wait of a rank inside its collectives per step
        # (without collectives: how far behind the earliest rank the latest one starts its steps)
        straggle_ms = float(per_rank["wait_ms"].max() or 0.0) if basis == "collective_start" else top  # type: ignore[arg-type]
        if top >= floor:
            cut = max(floor, STRAGGLER_RELATIVE * top)
            stragglers = tuple(int(r) for r in values.filter(pl.col("_m") >= cut).sort("rank")["rank"].to_list())
    per_rank = per_rank.with_columns(pl.col("rank").is_in(list(stragglers)).alias("straggler"))
    per_rank = per_rank.select(list(RANK_SUMMARY_SCHEMA)).cast(RANK_SUMMARY_SCHEMA).sort("rank")  # type: ignore[arg-type]

    # --- imbalance and exposed communication
    imbalance = imbalance_ms = spread_ms = None
    compute = per_rank["compute_ms"].drop_nulls()
    if len(ranks) > 1 and compute.len() > 1:
        mean = float(compute.mean())  # type: ignore[arg-type]
        hi, lo = float(compute.max()), float(compute.min())  # type: ignore[arg-type]
        imbalance = hi / mean - 1.0 if mean > 0 else None
        imbalance_ms = hi - mean
        spread_ms = hi - lo
    exposed_s = per_rank["exposed_communication_ms"].drop_nulls()
    exposed = float(exposed_s.mean()) if exposed_s.len() else None  # type: ignore[arg-type]
    wait_s = per_rank["wait_ms"].drop_nulls()
    wait = float(wait_s.mean()) if wait_s.len() else None  # type: ignore[arg-type]

    result = MultiRank(
        ranks=ranks,
        aligned_steps=tuple(aligned),
        per_rank=per_rank,
        per_step=per_step,
        stragglers=stragglers,
        straggler_basis=basis,
        straggle_ms_per_step=straggle_ms,
        imbalance=imbalance,
        imbalance_ms_per_step=imbalance_ms,
        compute_spread_ms=spread_ms,
        exposed_communication_ms=exposed,
        wait_ms=wait,
        step_ms_median=step_ms_median,
        matched_collectives=n_matched,
        notes=tuple(notes),
    )
    return dataclasses.replace(result, findings=tuple(_findings(result)))


def _findings(m: MultiRank) -> list[Finding]:
    step = m.step_ms_median
    if not step or len(m.ranks) < 2:
        return []
    found: list[Finding] = []
    n_steps = len(m.aligned_steps)
    if m.stragglers and m.straggle_ms_per_step:
        share = m.straggle_ms_per_step / step
        if share >= MIN_SHARE:
            metric = "late_ms" if m.straggler_basis == "collective_start" else "step_start_late_ms"
            late = m.per_rank.filter(pl.col("straggler")).select("rank", metric).rows()
            col = "late_ns" if m.straggler_basis == "collective_start" else "start_late_ns"
            worst = (
                m.per_step.filter(pl.col("rank").is_in(list(m.stragglers))).group_by("step").agg(pl.col(col).max())
                .sort([col, "step"], descending=[True, False]).head(3)["step"].to_list()
            )
            found.append(
                Finding.of(
                    "straggler",
                    job=True,
                    ms_per_step=m.straggle_ms_per_step,
                    share_of_step=share,
                    evidence={
                        "straggler_ranks": list(m.stragglers),
                        "basis": m.straggler_basis,
                        "late_ms_per_step": {str(r): _round(v) for r, v in late},
                        "matched_collectives": m.matched_collectives,
                    },
                    steps_affected=n_steps,
                    worst_steps=tuple(int(s) for s in worst),
                )
            )
    if m.imbalance_ms_per_step is not None and m.imbalance is not None:
        share = m.imbalance_ms_per_step / step
        if share >= MIN_SHARE:
            by = m.per_rank.filter(pl.col("compute_ms").is_not_null()).sort(["compute_ms", "rank"], descending=[True, False])
            found.append(
                Finding.of(
                    "load_imbalance",
                    job=True,
                    ms_per_step=m.imbalance_ms_per_step,
                    share_of_step=share,
                    evidence={
                        "imbalance": _round(m.imbalance),
                        "busiest_rank": int(by["rank"][0]),
                        "least_busy_rank": int(by["rank"][-1]),
                        "compute_spread_ms": _round(m.compute_spread_ms),
                        "compute_ms_per_step": {str(r): _round(v) for r, v in by.select("rank", "compute_ms").head(8).rows()},
                    },
                    steps_affected=n_steps,
                )
            )
    if m.exposed_communication_ms is not None:
        transfer = max(m.exposed_communication_ms - (m.wait_ms or 0.0), 0.0)
        share = transfer / step
        if share >= MIN_SHARE:
            found.append(
                Finding.of(
                    "exposed_communication",
                    job=True,
                    ms_per_step=transfer,
                    share_of_step=share,
                    evidence={
                        "exposed_ms_per_step": _round(m.exposed_communication_ms),
                        "waiting_for_stragglers_ms": _round(m.wait_ms),
                        "by_rank": {str(r): _round(v) for r, v in m.per_rank.select("rank", "exposed_communication_ms").rows()},
                    },
                    steps_affected=n_steps,
                )
            )
    return sorted(found, key=lambda f: -round(f.ms_per_step, 6))


def _concat(frames: list[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    frames = [f.select(list(schema)).cast(schema) for f in frames if f.height]  # type: ignore[arg-type]
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _ms(value: object) -> float | None:
    return None if value is None else float(value) / 1e6  # type: ignore[arg-type]


def _round(value: float | None, nd: int = 4) -> float | None:
    return None if value is None else round(float(value), nd)


__all__ = ["MultiRank", "RankProfile", "analyze_ranks", "collective_op", "communication_kernels", "rank_profiles"]

"""A distributed job as one system: the cross-rank critical path and job-level what-ifs.

Each rank is diagnosed on its own first; :mod:`.multirank` then matches the ranks'
communication kernels (the n-th collective of an operation in a step is the same collective
on every rank: NCCL requires every rank of a communicator to issue its collectives in the
same order).  This module joins the ranks into one model through those collectives:

* **Collective edges.**  A collective ends on every rank of its group at the same instant,
  its own transfer time ``c`` after the *last* rank of the group entered it.  ``c`` is the
  shortest duration the collective's kernel had on any rank (the last rank to arrive does
  not wait inside it).
* **Work between collectives.**  On rank ``r``, ``w`` is the time from the end of its previous
  collective to the start of this one, read on the rank's own clock (no alignment needed).
  What fills it comes from the rank's own timeline: the idle gaps of its primary GPU inside
  that window, by cause (:mod:`.timeline`), and GPU busy time (compute) for the rest.
* **Replay.**  ``E(j) = max over the group of (E(prev_r(j)) + w_r(j)) + c(j)``, in the order the
  collectives ended.  Replaying unchanged reproduces the recorded ends (up to clock noise),
  and :attr:`JobModel.error` says how closely.  The job's step is the median time between the
  last collectives of consecutive steps.
* **Clocks.**  Ranks on different hosts have offset clocks.  Each rank's offset is the
  median difference between its collective ends and the median end of the same collectives
  over the ranks; the residual (the spread of aligned ends) says how well that worked.

What the model answers (every answer is the model replayed with an edit):

* the cross-rank critical path of a step: walking back from the step's last collective,
  at each collective the rank that arrived last and what its GPU did (or waited for) in
  between, plus the collectives' own transfer time;
* per rank, the time spent waiting inside collectives for the others, and for whom;
* what-ifs: the slowest rank at the median rank's speed, one cause fixed on one rank (or
  on all), perfect compute/communication overlap (``c = 0``), half as many collectives
  at the same bytes (adjacent collectives of one operation merged, one latency saved).

* **Side streams.**  When much of the communication overlaps compute (DDP's all-reduces on
  NCCL's stream), a collective waits for the compute launched before it (its bucket), not the
  other way round; compute waits only for the previous step's last collective (the
  optimizer).  ``w`` then counts from that gate to the collective's ready time, and the
  stream's previous collective is a second predecessor.

Limits (also in docs/critical-path.md): ranks absent from the folder are invisible (a sampled
subset of a larger job only constrains the present ranks); collectives that match on no other
rank are left out; cross-stream waits other than the optimizer's are not modelled.

Python loops only over collectives (and ranks inside them), never over events.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from ..schema import EventKind
from .causes import LiveSequence, rank_fixable
from .findings import Finding
from .job_chain import ChainResult, CollectiveChain
from .job_model import COLLECTIVE_LATENCY_NS, JOB_FIX_MODELS, JobModel, JobWhatIf, empty_model, with_clocks
from .multirank import (
    COLLECTIVES_SCHEMA,
    MATCH_KEY,
    RankProfile,
    _collectives,
    as_collectives,
    communication_kernels,
    match_collectives,
    matching_summary,
)

if TYPE_CHECKING:
    from .results import Diagnosis


#: the ends of one collective on its ranks agree within this after clock alignment...
END_TOLERANCE_NS = 500_000


#: ...or within this share of its shortest duration (long collectives on drifting clocks)
END_TOLERANCE_SHARE = 0.05


#: operations paired by order that may pair the wrong instances (checked on their ends)
POINT_TO_POINT = ("sendrecv", "other")


#: job what-ifs are given only when the unchanged replay reproduces the recorded job step this closely
JOB_TRUST_ERROR = 0.05


#: from this share of communication overlapping compute, the chain of blocking collectives no
#: longer describes the job (a side-stream all-reduce does not hold compute back)
OVERLAP_LIMIT = 0.2


#: replayed collectives at most (the last ones of the trace): keeps the Python sweep bounded
MAX_COLLECTIVES = 20_000


#: ...and at most this many (rank, collective) pairs (many ranks: fewer collectives)
MAX_MEMBERSHIPS = 400_000


#: a cause is priced on a rank when it fills at least this share of the job step there
MIN_CAUSE_SHARE = 0.01


#: at most this many rank × cause what-ifs (the largest)
MAX_CAUSE_WHAT_IFS = 12


#: causes a rank-level fix can remove from the work between collectives (the idle causes with a
#: single-trace finding; communication is the job model's own)
FIXABLE = LiveSequence(rank_fixable)
#: their gap columns
_GAP_COLS = LiveSequence(lambda: [f"{c}_ns" for c in rank_fixable()])


def model_job(
    collectives: pl.DataFrame,
    gaps: pl.DataFrame,
    *,
    ranks: Sequence[int],
    world_size: int | None = None,
    windows: pl.DataFrame | None = None,
    overlapped_share: float | None = None,
    ready: pl.DataFrame | None = None,
    steps: pl.DataFrame | None = None,
) -> JobModel:
    """Build and replay the job model.

    Args:
        collectives: :data:`.multirank.COLLECTIVES_SCHEMA` rows of every rank (each rank's
            communication kernels on its primary GPU, numbered per step and operation).
        gaps: the ranks' idle gaps (:attr:`.timeline.Timeline.gaps` of each rank's primary
            device): rank, start_ns, end_ns and ``<cause>_ns`` columns.
        ranks: the ranks present.
        world_size: the job's world size when known (missing ranks are reported).
        windows: rank, start_ns, end_ns of each rank's recording (non-overlap is reported).
        overlapped_share: the share of communication time that overlapped compute (from the
            ranks' timelines); from :data:`OVERLAP_LIMIT` on, collectives are modelled on a
            side stream when ``ready`` is given, else the what-ifs are withheld.
        ready: rank, start_ns, end_ns (a collective kernel) and ready_ns: when the compute that
            produced its inputs had finished on that rank (:func:`ready_times`).
        steps: rank, step, start_ns, end_ns of each rank's complete steps: when the matched
            collectives span a single step, the job step runs from each rank's step start to its
            end through them (:func:`_one_step_bounds`).
    """
    ranks = tuple(sorted(int(r) for r in ranks))
    notes: list[str] = []
    missing = tuple(r for r in range(world_size) if r not in ranks) if world_size else ()
    if missing:
        shown = ", ".join(str(r) for r in missing[:12]) + (" ..." if len(missing) > 12 else "")
        notes.append(
            f"{len(ranks)} of {world_size} ranks have a trace (missing: {shown}): the job model covers those only; "
            "a missing rank that arrives late at a collective shows as communication time of the present ranks."
        )
    matched, unmatched = _matched(collectives, ranks, windows, notes)
    if matched is None:
        return empty_model(ranks, world_size, missing, unmatched, notes)
    aligned = _aligned(matched, ranks, windows, notes)
    if aligned is None:
        return empty_model(ranks, world_size, missing, unmatched, notes)
    m, clocks, residual, n_keys, matched = aligned
    m, order = _ordered(m, ranks, notes)
    m, bounds = _one_step_bounds(m, order, steps)
    side = bool(overlapped_share is not None and overlapped_share >= OVERLAP_LIMIT and ready is not None and ready.height)
    m = _work_between(m, gaps, ready if side else None)
    replayed = _replayed(m, order, side, None if bounds is None else _tails(m, bounds, gaps))
    if replayed is not None and bounds is not None:
        notes.append(ONE_STEP_NOTE)
    if replayed is None:
        notes.append("the matched collectives span a single step: the job step cannot be measured from them.")
        return dataclasses.replace(
            with_clocks(empty_model(ranks, world_size, missing, unmatched, notes), clocks, residual, n_keys, notes),
            matching=matching_summary(matched),
        )
    path, on_path = _cross_rank_path(replayed)
    trusted = _trusted(replayed, overlapped_share, side, notes)
    what_ifs = _what_ifs(replayed, ranks) if trusted else []
    return JobModel(
        ranks=ranks,
        world_size=world_size,
        missing_ranks=missing,
        matched_collectives=n_keys,
        unmatched_kernels=unmatched,
        clocks=clocks,
        clock_residual_us=residual,
        step_ms=replayed.step_ms,
        replayed_step_ms=replayed.replayed_ns / 1e6,
        path=path,
        waits=_waits(replayed, ranks),
        what_ifs=tuple(sorted(what_ifs, key=lambda a: (-round(a.saving_ms, 6), a.label))),
        steps=replayed.n_periods,
        notes=tuple(notes),
        matching=matching_summary(matched),
        lanes=_lanes(m, on_path),
        one_step=replayed.tails is not None,
    )


def _matched(
    collectives: pl.DataFrame, ranks: tuple[int, ...], windows: pl.DataFrame | None, notes: list[str]
) -> tuple[pl.DataFrame | None, int]:
    """(the collectives matched on at least two ranks, the kernels left out); None when the
    ranks share no collective (the notes say why)."""
    coll = match_collectives(as_collectives(collectives))
    key = list(MATCH_KEY)
    counts = coll.group_by(key).agg(pl.col("rank").n_unique().alias("_n"))
    matched = coll.join(counts.filter(pl.col("_n") >= 2).select(key), on=key, how="semi").unique(
        ["rank", *key], keep="first"
    )
    unmatched = coll.height - matched.height
    n_keys = matched.select(key).unique().height if matched.height else 0
    if unmatched and n_keys:
        notes.append(f"{unmatched} communication kernel(s) matched no other rank and are left out of the job model.")
    if len(ranks) < 2:
        return None, unmatched
    if n_keys == 0:
        if coll.height == 0:
            notes.append(
                "no rank's trace records communication (no collective kernels, no host collective ranges): "
                "the ranks ran independently, so the job waits on nothing but its slowest rank."
            )
        else:
            notes.append("no collective matched across ranks: the ranks are not coupled in the job model.")
        _window_notes(windows, set(), notes, only_disjoint=coll.height == 0)
        return None, unmatched
    return matched, unmatched


def _aligned(
    matched: pl.DataFrame, ranks: tuple[int, ...], windows: pl.DataFrame | None, notes: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, float, int, pl.DataFrame] | None:
    """The clocks: each rank's offset from the median end of its collectives.  A collective
    matched by order whose ends disagree after alignment is not one collective (point-to-point
    transfers paired differently, another process group): it is dropped and the clocks
    estimated again from the rest.  Returns (the matched rows with aligned starts ``_as`` and
    ends ``_ae``, the clocks table, the residual in µs, the collectives kept, the matched rows
    kept), or None when none is left."""
    key = list(MATCH_KEY)
    offsets = _offsets(matched, key)
    spread = _spread(matched, offsets, key)
    # (group collectives matched by order are kept: their ends may differ by a ring step)
    shared = spread.filter(
        ~pl.col("op").is_in(POINT_TO_POINT)
        | (pl.col("_spread") <= pl.max_horizontal(pl.lit(END_TOLERANCE_NS), pl.col("_min_dur") * END_TOLERANCE_SHARE))
    )
    n_keys = spread.height
    if shared.height < spread.height:
        notes.append(
            f"{spread.height - shared.height} of {spread.height} point-to-point transfers matched by order do not end together "
            "on their ranks (the ranks paired them differently): they are left out of "
            "the job model and count as work of their rank."
        )
        matched = matched.join(shared.select(key), on=key, how="semi")
        n_keys = shared.height
        if n_keys == 0:
            return None
        offsets = _offsets(matched, key)
        spread = _spread(matched, offsets, key)
    residual = float(spread["_spread"].median()) / 1e3  # type: ignore[arg-type]
    m = matched.join(offsets.select("rank", "offset_ns"), on="rank").with_columns(
        (pl.col("end_ns") - pl.col("offset_ns")).alias("_ae"), (pl.col("start_ns") - pl.col("offset_ns")).alias("_as")
    )
    clocks = (
        pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int32})
        .join(offsets, on="rank", how="left")
        .select(
            "rank",
            (pl.col("offset_ns") / 1e6).alias("clock_offset_ms"),
            pl.col("collectives").fill_null(0).cast(pl.Int64),
        )
    )
    _window_notes(windows, set(offsets["rank"].to_list()), notes)
    return m, clocks, residual, n_keys, matched


def _ordered(m: pl.DataFrame, ranks: tuple[int, ...], notes: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collectives numbered ``j`` by their aligned end (the last :data:`MAX_COLLECTIVES` kept),
    each rank's row with its previous collective ``prev`` and its work ``w`` since that one ended."""
    key = list(MATCH_KEY)
    order = m.group_by(key).agg(pl.col("_ae").median().alias("_e")).sort("_e", *key).with_row_index("j")
    keep = max(2, min(MAX_COLLECTIVES, MAX_MEMBERSHIPS // max(len(ranks), 1)))
    if order.height > keep:
        notes.append(f"the job model replays the last {keep} of {order.height} matched collectives.")
        order = order.tail(keep).with_columns(pl.col("j") - pl.col("j").min())
    m = m.join(order, on=key).sort("rank", "j")
    m = m.with_columns(
        pl.col("end_ns").shift(1).over("rank").alias("_prev_end"), pl.col("j").shift(1).over("rank").alias("prev")
    )
    return m.with_columns((pl.col("start_ns") - pl.col("_prev_end")).clip(lower_bound=0).alias("w")), order


#: what the job model of a one-step capture says it cannot show
ONE_STEP_NOTE = (
    "one profiled step: the job step runs from each rank's step start to its end through the step's collectives "
    "(clocks aligned on their ends); one step cannot show how the step varies, whether it is typical of the steady "
    "state, or a rank that is slow only in some steps: profile several steps (schedule(active=N)) for those."
)


def _one_step_bounds(m: pl.DataFrame, order: pl.DataFrame, steps: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """When the matched collectives span a single step that every member rank has as a complete
    step window: each rank's work before its first collective counts from its step start
    (``_prev_end`` and ``w``), and ``_origin`` is that start on the aligned clock.  Returns the
    rows and the ranks' step bounds (rank, start and end on its own clock), or the rows unchanged
    and None otherwise."""
    if steps is None or steps.height == 0 or order["step"].n_unique() != 1:
        return m, None
    step = int(order["step"][0])
    bounds = (
        steps.filter(pl.col("step") == step)
        .select(pl.col("rank").cast(pl.Int32), pl.col("start_ns").alias("_step_start"), pl.col("end_ns").alias("_step_end"))
        .unique("rank", keep="first")
    )
    if m.join(bounds, on="rank", how="anti").height:
        return m, None
    m = m.join(bounds, on="rank", how="left").with_columns(
        pl.col("_prev_end").fill_null(pl.col("_step_start")),
        (pl.col("_step_start") - pl.col("offset_ns")).alias("_origin"),
    )
    return m.with_columns((pl.col("start_ns") - pl.col("_prev_end")).clip(lower_bound=0).alias("w")), bounds


def _tails(m: pl.DataFrame, bounds: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """Each rank's work after its last collective to its step end (one step): rank, the last
    collective ``j``, ``tail`` (ns), the aligned step start ``_origin`` and the tail's idle time
    by cause."""
    last = m.sort("j").group_by("rank", maintain_order=True).last().select("rank", "j", "end_ns", "_origin")
    t = last.join(bounds, on="rank").with_columns((pl.col("_step_end") - pl.col("end_ns")).clip(lower_bound=0).alias("tail"))
    return t.with_columns(_window_causes(t, gaps, "end_ns", "_step_end")).select("rank", "j", "tail", "_origin", *_GAP_COLS)


def _work_between(m: pl.DataFrame, gaps: pl.DataFrame, ready: pl.DataFrame | None) -> pl.DataFrame:
    """What each rank does between collectives, by cause (its GPU's idle gaps), and what a
    collective waits for.  On a side stream (``ready`` given: communication overlapping compute)
    a collective waits for the compute that produced its inputs, which waits only for the last
    collective of the previous step (the optimizer, ``gate``); otherwise each collective holds
    its rank's compute back (``gate`` is the previous collective)."""
    if ready is None:
        m = m.with_columns(pl.col("prev").alias("gate"), pl.lit(0, dtype=pl.Int64).alias("x"))
        return m.with_columns(_gap_causes(m, gaps))
    m = m.join(
        ready.select(pl.col("rank").cast(pl.Int32), "start_ns", "end_ns", "ready_ns"),
        on=["rank", "start_ns", "end_ns"],
        how="left",
    ).with_columns(pl.col("ready_ns").fill_null(pl.col("start_ns")).clip(upper_bound=pl.col("start_ns")))
    step_last = m.group_by("rank", "step").agg(
        pl.col("j").max().alias("_gate"), pl.col("end_ns").sort_by("j").last().alias("_gate_end")
    )
    step_last = (
        step_last.sort("rank", "step")
        .with_columns(
            pl.col("_gate").shift(1).over("rank").alias("gate"),
            pl.col("_gate_end").shift(1).over("rank").alias("_gate_end"),
        )
        .select("rank", "step", "gate", "_gate_end")
    )
    m = m.join(step_last, on=["rank", "step"], how="left")
    if "_origin" in m.columns:
        # one step: the compute before a collective starts at the rank's step start
        m = m.with_columns(pl.col("_gate_end").fill_null(pl.col("_step_start")))
    m = m.with_columns(
        (pl.col("ready_ns") - pl.col("_gate_end")).clip(lower_bound=0).alias("w"),
        (pl.col("start_ns") - pl.max_horizontal(pl.col("ready_ns"), pl.col("_prev_end").fill_null(pl.col("ready_ns"))))
        .clip(lower_bound=0)
        .alias("x"),
    )
    return m.with_columns(_window_causes(m, gaps, "_gate_end", "ready_ns"))


@dataclass(frozen=True)
class _Replayed:
    """The job chain replayed unchanged, with what the path, the waits and the what-ifs read."""

    m: pl.DataFrame
    chain: CollectiveChain
    base: ChainResult
    #: each collective's members (rank rows) and own transfer time
    members: list[list[dict[str, Any]]]
    c: list[int]
    steps_of: list[int]
    ops_of: list[str]
    #: step → its last collective
    last_of: dict[int, int]
    #: collectives in the steps the job step is measured over, and how many steps those are
    in_period: frozenset[int]
    n_periods: int
    #: the recorded and the replayed job step (ns), and the recorded one in ms
    step_ns: float
    replayed_ns: float
    step_ms: float
    #: one step (None: several): per rank, its last collective, the work after it (``tail``),
    #: its aligned step start and the tail's idle time by cause
    tails: list[dict[str, Any]] | None = None

    def job_step_ns(self, ends: list[int], fix: tuple[str, frozenset[int]] | None = None) -> float:
        """The job step of a replay's collective ends: the median time between the last
        collectives of consecutive steps, or (one step) the median over ranks of the time from
        the rank's step start to its end (its last collective's end and its tail, ``fix``'s
        cause removed from the tail on its ranks)."""
        if self.tails is None:
            return _median_period(ends, self.last_of)
        return float(statistics.median(_rank_end(t, ends, fix) - int(t["_origin"]) for t in self.tails))


def _replayed(m: pl.DataFrame, order: pl.DataFrame, side: bool, tails: pl.DataFrame | None = None) -> _Replayed | None:
    """The chain of collectives replayed unchanged; None when they span a single step (unless
    ``tails`` gives the ranks' step bounds there, :func:`_tails`)."""
    j_count = order.height
    e_rec = [int(v) - int(order["_e"][0]) for v in order["_e"].to_list()]
    steps_of = order["step"].to_list()
    c = m.group_by("j").agg(pl.col("dur_ns").min()).sort("j")["dur_ns"].to_list()
    origin = pl.col("_origin") if "_origin" in m.columns else pl.lit(None, dtype=pl.Int64).alias("_origin")
    rows = m.select("j", "rank", "prev", "gate", "w", "x", "_as", origin, *_GAP_COLS).rows(named=True)
    members: list[list[dict[str, Any]]] = [[] for _ in range(j_count)]
    t0 = int(order["_e"][0])
    for row in rows:
        row["_as"] = int(row["_as"]) - t0
        row["_origin"] = None if row["_origin"] is None else int(row["_origin"]) - t0
        members[int(row["j"])].append(row)
    chain = CollectiveChain(members, c, side=side)
    base = chain.run()
    last_of = _last_per_step(steps_of)
    period_steps = sorted(last_of)[1:] if tails is None else sorted(last_of)
    if not period_steps:
        return None
    in_steps = set(period_steps)
    r = _Replayed(
        m=m, chain=chain, base=base, members=members, c=c, steps_of=steps_of, ops_of=order["op"].to_list(), last_of=last_of,
        in_period=frozenset(j for j in range(j_count) if steps_of[j] in in_steps), n_periods=len(period_steps),
        step_ns=0.0, replayed_ns=0.0, step_ms=0.0,
        tails=None if tails is None else [{**t, "_origin": int(t["_origin"]) - t0} for t in tails.rows(named=True)],
    )
    step_ns = r.job_step_ns(e_rec)
    return dataclasses.replace(r, step_ns=step_ns, replayed_ns=r.job_step_ns(base.ends), step_ms=step_ns / 1e6)


def _rank_end(tail: Mapping[str, Any], ends: list[int], fix: tuple[str, frozenset[int]] | None) -> int:
    """A rank's step end on the aligned clock (one step): its last collective's end and its tail,
    less ``fix``'s cause there when the fix applies to the rank."""
    work = int(tail["tail"])
    if fix is not None and int(tail["rank"]) in fix[1]:
        work = max(0, work - int(tail[f"{fix[0]}_ns"] or 0))
    return ends[int(tail["j"])] + work


def _cross_rank_path(r: _Replayed) -> tuple[pl.DataFrame, list[tuple[int, int]]]:
    """The critical path back from the last collective, through the rank that arrived last at
    each: (rank, cause, ms_per_step, share), and the (collective, rank) pairs it walked."""
    base, members, c = r.base, r.members, r.c
    path_rows: list[tuple[int | None, str, int]] = []
    on_path: list[tuple[int, int]] = []
    j: int | None = len(c) - 1
    if r.tails is not None:
        # one step: back from the rank that ends the step last, through its work after its last collective
        last = max(r.tails, key=lambda t: (_rank_end(t, base.ends, None), -int(t["rank"])))
        path_rows.extend(_split_work(int(last["rank"]), int(last["tail"]), last))
        j = int(last["j"])
    while j is not None and j >= 0:
        if base.crit[j] is not None:
            on_path.append((j, int(base.crit[j])))  # type: ignore[arg-type]
        if j in r.in_period:
            path_rows.append((None, "communication", c[j]))
        crit = base.crit[j]
        hit = next((row for row in members[j] if row["rank"] == crit), None) if crit is not None else None
        if hit is None or crit is None:
            break
        if j in r.in_period:
            path_rows.extend(_split_work(int(crit), int(hit["w"] if hit["w"] is not None else 0), hit))
        if base.via_gate[j] and hit["gate"] is None and hit.get("_origin") is not None:
            prev = None  # one step: the rank's work since its step start decided this collective
        else:
            prev = hit["prev"] if hit["gate"] is None or not base.via_gate[j] else hit["gate"]
        j = None if prev is None else int(prev)
    path = (
        pl.DataFrame(path_rows, schema={"rank": pl.Int32, "cause": pl.String, "ns": pl.Int64}, orient="row")
        .group_by("rank", "cause")
        .agg((pl.col("ns").sum() / r.n_periods / 1e6).alias("ms_per_step"))
        .with_columns((pl.col("ms_per_step") / r.step_ms).alias("share"))
        .sort(["ms_per_step", "rank", "cause"], descending=[True, False, False], nulls_last=True)
    )
    return path, on_path


def _split_work(rank: int, w: int, row: Mapping[str, Any]) -> list[tuple[int | None, str, int]]:
    """A stretch of a rank's work on the path: its idle time by cause (at most ``w`` in all),
    the rest compute."""
    out: list[tuple[int | None, str, int]] = []
    idle = 0
    for col in _GAP_COLS:
        v = min(int(row[col] or 0), w - idle)
        if v > 0:
            out.append((rank, col[:-3], v))
            idle += v
    if w - idle > 0:
        out.append((rank, "compute", w - idle))
    return out


def _lanes(m: pl.DataFrame, on_path: list[tuple[int, int]]) -> pl.DataFrame:
    """Per rank and collective, on the aligned clock: what the rank lanes draw."""
    crit_frame = pl.DataFrame(on_path, schema={"j": pl.UInt32, "rank": pl.Int32}, orient="row").with_columns(
        pl.lit(True).alias("critical")
    )
    return (
        m.select(
            "rank", "j", "step", "op",
            (pl.col("_prev_end") - pl.col("offset_ns")).alias("work_start_ns"),
            pl.col("_as").alias("start_ns"), pl.col("_ae").alias("end_ns"),
        )
        .join(crit_frame, on=["j", "rank"], how="left")
        .with_columns(pl.col("critical").fill_null(False), pl.col("j").cast(pl.Int64))
        .sort("j", "rank")
    )


def _waits(r: _Replayed, ranks: tuple[int, ...]) -> pl.DataFrame:
    """Inside each collective, each rank's wait for the rank that arrived last."""
    base = r.base
    wait_rows = [(rank, base.crit[j], wt) for j, per in enumerate(base.waits) if j in r.in_period for rank, wt in per.items()]
    wf = pl.DataFrame(wait_rows, schema={"rank": pl.Int32, "for": pl.Int32, "ns": pl.Int64}, orient="row")
    per_for = (
        wf.filter(pl.col("rank") != pl.col("for"))
        .group_by("rank", "for")
        .agg(pl.col("ns").sum())
        .sort(["rank", "ns", "for"], descending=[False, True, False])
    )
    top_for = per_for.group_by("rank", maintain_order=True).first()
    return (
        pl.DataFrame({"rank": list(ranks)}, schema={"rank": pl.Int32})
        .join(wf.group_by("rank").agg(pl.col("ns").sum().alias("_w")), on="rank", how="left")
        .join(top_for, on="rank", how="left")
        .select(
            "rank",
            (pl.col("_w").fill_null(0) / r.n_periods / 1e6).alias("wait_ms_per_step"),
            pl.col("for").alias("waits_for"),
            (pl.col("ns") / r.n_periods / 1e6).alias("waits_for_ms_per_step"),
        )
    )


def _trusted(r: _Replayed, overlapped_share: float | None, side: bool, notes: list[str]) -> bool:
    """Whether the what-ifs are asked: the unchanged replay reproduces the recorded job step,
    and communication overlapping compute is modelled on its side stream."""
    step_ns, replayed_ns = r.step_ns, r.replayed_ns
    trusted = step_ns > 0 and abs(replayed_ns - step_ns) / step_ns <= JOB_TRUST_ERROR
    if trusted and overlapped_share is not None and overlapped_share >= OVERLAP_LIMIT and not side:
        notes.append(
            f"{100 * overlapped_share:.0f}% of the communication overlaps compute (collectives on a side stream): the job "
            "model chains collectives as if each rank waited for them, which holds for blocking communication only, "
            "so the job what-ifs are withheld; the path and the waits are the recorded ones."
        )
        return False
    if not trusted:
        notes.append(
            f"the job replay reproduces the recorded job step only within {100 * abs(replayed_ns - step_ns) / max(step_ns, 1):.1f}% "
            f"(over {r.n_periods} step(s)): the job what-ifs are withheld; the path and the waits are the recorded ones."
        )
    return trusted


def _what_ifs(r: _Replayed, ranks: tuple[int, ...]) -> list[JobWhatIf]:
    """Every job what-if, each the chain replayed with its edit."""
    answers: list[JobWhatIf] = []

    def ask(kind: str, label: str, question: str, run: ChainResult, rank: int | None = None, cause: str | None = None) -> None:
        fix = None if cause is None else (cause, frozenset(ranks if rank is None else {rank}))
        saving = max(0.0, (r.replayed_ns - r.job_step_ns(run.ends, fix)) / 1e6)
        saving = min(saving, r.step_ms)
        answers.append(JobWhatIf(kind, label, question, saving, r.step_ms - saving, rank, cause))

    m, chain, periods = r.m, r.chain, list(r.in_period)
    # a rank's own work between collectives (one step: from its step start too)
    counted = pl.col("prev").is_not_null() | (pl.col("_origin").is_not_null() if "_origin" in m.columns else pl.lit(False))
    own = m.filter(pl.col("j").is_in(periods) & counted).group_by("rank").agg(pl.col("w").sum())
    if own.height >= 2:
        slow = int(own.sort(["w", "rank"], descending=[True, False])["rank"][0])
        ask(
            "straggler_at_median", "straggler_at_median", f"rank {slow} (the slowest) at the median rank's speed",
            chain.run(median_rank=slow), rank=slow,
        )
    per_cause = m.filter(pl.col("j").is_in(periods)).select("rank", *_GAP_COLS)
    if r.tails is not None:
        tail_causes = pl.DataFrame(r.tails).select(pl.col("rank").cast(pl.Int32), *[pl.col(c).cast(pl.Int64) for c in _GAP_COLS])
        per_cause = pl.concat([per_cause.cast({c: pl.Int64 for c in _GAP_COLS}), tail_causes], how="vertical_relaxed")
    per_cause = per_cause.group_by("rank").agg(pl.col(list(_GAP_COLS)).sum())
    candidates: list[tuple[int, int, str]] = []
    for row in per_cause.rows(named=True):
        for col in _GAP_COLS:
            ns = int(row[col] or 0)
            if ns / r.n_periods >= MIN_CAUSE_SHARE * r.step_ns:
                candidates.append((ns, int(row["rank"]), col[:-3]))
    candidates.sort(key=lambda t: (-t[0], t[1], t[2]))
    by_cause: dict[str, list[int]] = {}
    for _ns, rank, cause in candidates[:MAX_CAUSE_WHAT_IFS]:
        by_cause.setdefault(cause, []).append(rank)
        ask(
            "cause_on_rank", f"{cause}@rank{rank}", f"{cause.replace('_', ' ')} fixed on rank {rank} only",
            chain.run(fix=(cause, frozenset({rank}))), rank=rank, cause=cause,
        )
    for cause, rs in by_cause.items():
        if len(rs) > 1:
            ask(
                "cause_everywhere", f"{cause}@all", f"{cause.replace('_', ' ')} fixed on every rank",
                chain.run(fix=(cause, frozenset(ranks))), cause=cause,
            )
    ask("perfect_overlap", "perfect_overlap", "communication perfectly overlapped with compute", chain.run(free_comm=True))
    pairs = _pairs(r.steps_of, r.ops_of)
    if pairs:
        ask(
            "half_collectives", "half_collectives", "half as many collectives (larger buckets), same bytes",
            chain.run(merge=pairs),
        )
    return answers


#: job finding kind → the job what-if that prices its fix
FINDING_WHAT_IF = {
    "straggler": "straggler_at_median",
    "load_imbalance": "straggler_at_median",
    "exposed_communication": "perfect_overlap",
}


def rank_job_findings(findings: Sequence[Finding], model: JobModel | None) -> tuple[Finding, ...]:
    """The cross-rank findings with the job step the model predicts once each is fixed
    (:data:`FINDING_WHAT_IF`), ranked by the saving of the job step (findings the model cannot
    price keep their order, after the priced ones)."""
    if model is None or not model.what_ifs:
        return tuple(findings)
    ranked = []
    for i, f in enumerate(findings):
        w = model.what_if(FINDING_WHAT_IF.get(f.kind, ""))
        if w is not None:
            f = dataclasses.replace(f, predicted_step_ms=w.predicted_step_ms)
        ranked.append((w is None, -round(w.saving_ms if w else 0.0, 6), i, f))
    return tuple(r[-1] for r in sorted(ranked, key=lambda r: r[:-1]))


def _offsets(matched: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    with_mid = matched.with_columns(pl.col("end_ns").median().over(key).alias("_mid"))
    return with_mid.group_by("rank").agg(
        (pl.col("end_ns") - pl.col("_mid")).median().round(0).cast(pl.Int64).alias("offset_ns"),
        pl.len().alias("collectives"),
    )


def _spread(matched: pl.DataFrame, offsets: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Per collective: the spread of its aligned ends over its ranks, and its shortest duration."""
    aligned = matched.join(offsets.select("rank", "offset_ns"), on="rank").with_columns(
        (pl.col("end_ns") - pl.col("offset_ns")).alias("_ae")
    )
    return aligned.group_by(key).agg(
        (pl.col("_ae").max() - pl.col("_ae").min()).alias("_spread"), pl.col("dur_ns").min().alias("_min_dur")
    )


def _pairs(steps: list[int], ops: list[str]) -> dict[int, int]:
    """Adjacent collectives of one operation in one step, paired (first → second)."""
    out: dict[int, int] = {}
    j = 0
    while j + 1 < len(steps):
        if steps[j] == steps[j + 1] and ops[j] == ops[j + 1]:
            out[j] = j + 1
            j += 2
        else:
            j += 1
    return out


def _last_per_step(steps: list[int]) -> dict[int, int]:
    last: dict[int, int] = {}
    for j, s in enumerate(steps):
        last[s] = j
    return last


def _median_period(ends: list[int], last_of: Mapping[int, int]) -> float:
    order = sorted(last_of)
    periods = [ends[last_of[b]] - ends[last_of[a]] for a, b in itertools.pairwise(order)]
    return float(statistics.median(periods))


def _gap_causes(m: pl.DataFrame, gaps: pl.DataFrame) -> list[pl.Series]:
    """``<cause>_ns`` per (rank, collective): the rank's idle gaps whose start lies in the window
    between its previous collective's end and this collective's start (gaps never straddle a
    kernel of the same GPU, so each falls in one window)."""
    cols = [c for c in _GAP_COLS if c in gaps.columns]
    if gaps.height == 0 or not cols:
        return [pl.Series(c, [0] * m.height, dtype=pl.Int64) for c in _GAP_COLS]
    g = gaps.select(pl.col("rank").cast(pl.Int32), pl.col("start_ns").alias("_gs"), "end_ns", *cols).sort("_gs")
    win = (
        m.select(pl.col("rank").cast(pl.Int32), "j", pl.col("_prev_end").alias("_ws"), pl.col("start_ns").alias("_we"))
        .drop_nulls("_ws")
        .sort("_ws")
    )
    hit = g.join_asof(
        win, left_on="_gs", right_on="_ws", by="rank", strategy="backward", check_sortedness=False
    ).filter(pl.col("j").is_not_null() & (pl.col("_gs") < pl.col("_we")))
    sums = hit.group_by("rank", "j").agg(pl.col(cols).sum())
    joined = m.select("rank", "j").join(sums, on=["rank", "j"], how="left")
    return [
        joined[c].fill_null(0).cast(pl.Int64) if c in joined.columns else pl.Series(c, [0] * m.height, dtype=pl.Int64)
        for c in _GAP_COLS
    ]


def _window_causes(m: pl.DataFrame, gaps: pl.DataFrame, lo: str, hi: str) -> list[pl.Series]:
    """``<cause>_ns`` per row: the rank's idle gaps that start in ``[lo, hi)`` (cumulative sums,
    so windows may nest)."""
    cols = [c for c in _GAP_COLS if c in gaps.columns]
    zero = [pl.Series(c, [0] * m.height, dtype=pl.Int64) for c in _GAP_COLS]
    if gaps.height == 0 or not cols:
        return zero
    g = gaps.select(
        pl.col("rank").cast(pl.Int32), pl.col("start_ns").alias("_t"), *[pl.col(c).fill_null(0) for c in cols]
    )
    cum = g.sort("rank", "_t").with_columns([pl.col(c).cum_sum().over("rank").alias(c) for c in cols])
    # a gap counts at a boundary when it starts strictly before it
    shifted = cum.with_columns(pl.col("_t") + 1).sort("_t")

    def at(col: str) -> pl.DataFrame:
        probe = (
            m.select(pl.col("rank").cast(pl.Int32), pl.col(col).fill_null(-(1 << 62)).alias("_t"))
            .with_row_index("_i")
            .sort("_t")
        )
        hit = probe.join_asof(shifted, on="_t", by="rank", strategy="backward", check_sortedness=False).sort("_i")
        return hit.select([pl.col(c).fill_null(0) for c in cols])

    a, b = at(lo), at(hi)
    out = {c: (b[c] - a[c]).clip(lower_bound=0) for c in cols}
    return [
        out[c].alias(c).cast(pl.Int64) if c in out else pl.Series(c, [0] * m.height, dtype=pl.Int64) for c in _GAP_COLS
    ]


def ready_times(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """rank, start_ns, end_ns and ready_ns of every communication kernel: the latest end of the
    compute kernels of its device launched before it (a collective on a side stream waits for
    the work queued ahead of it on the compute stream: its bucket's gradients)."""
    kernels = events.filter(
        (pl.col("kind") == EventKind.KERNEL.value) & pl.col("device").is_not_null() & (pl.col("dur_ns") > 0)
    )
    launch = (
        links.select(pl.col("gpu_event_id").alias("event_id"), pl.col("launch_event_id"))
        .join(
            events.select(pl.col("event_id").alias("launch_event_id"), pl.col("start_ns").alias("_launch")),
            on="launch_event_id",
        )
        .select("event_id", "_launch")
        .unique("event_id", keep="first")
    )
    comm = communication_kernels(events).select(
        "event_id", "rank", "device", "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")
    )
    compute = (
        kernels.join(comm.select("event_id"), on="event_id", how="anti")
        .join(launch, on="event_id")
        .select("rank", "device", "_launch", (pl.col("start_ns") + pl.col("dur_ns")).alias("_end"))
        .sort("rank", "device", "_launch")
        .with_columns(pl.col("_end").cum_max().over("rank", "device"))
        .sort("_launch")
    )
    probe = comm.join(launch, on="event_id", how="inner").sort("_launch")
    got = probe.join_asof(
        compute,
        on="_launch",
        by=["rank", "device"],
        strategy="backward",
        check_sortedness=False,
        allow_exact_matches=False,
    )
    return got.select("rank", "start_ns", "end_ns", pl.col("_end").alias("ready_ns")).drop_nulls("ready_ns")


def _window_notes(
    windows: pl.DataFrame | None, coupled: set[int], notes: list[str], *, only_disjoint: bool = False
) -> None:
    """Say which ranks share no collective with the others, and whether their recordings overlap."""
    if windows is None or windows.height < 2:
        return
    rows = windows.sort("rank").rows(named=True)
    for row in rows:
        r = int(row["rank"])
        if r in coupled:
            continue
        others = [o for o in rows if int(o["rank"]) != r]
        overlaps = any(o["start_ns"] < row["end_ns"] and row["start_ns"] < o["end_ns"] for o in others)
        if overlaps and only_disjoint:
            continue
        why = (
            "its recording overlaps the others' in time, so its collectives differ (another process group or another job?)"
            if overlaps
            else "its recording does not overlap the others' in time (captured at another moment, or its clock is far off)"
        )
        notes.append(
            f"rank {r} shares no matched collective with the other ranks: {why}; it is left out of the job model."
        )


def from_profiles(
    profiles: Sequence[RankProfile],
    diagnoses: Mapping[int, Diagnosis],
    *,
    world_size: int | None = None,
    windows: pl.DataFrame | None = None,
    events: Mapping[int, pl.DataFrame] | None = None,
    links: Mapping[int, pl.DataFrame] | None = None,
) -> JobModel:
    """:func:`model_job` from what the job diagnosis already has: the ranks' profiles (their
    collectives) and diagnoses (the idle gaps of each rank's primary GPU).  A rank without
    communication kernels (gloo, MPI: collectives run on the host) contributes its host-side
    collective ranges (``gloo:all_reduce``...) from ``events`` instead."""
    frames = [p.collectives for p in profiles if p.collectives.height]
    with_kernels = {int(r) for f in frames for r in f["rank"].unique().to_list()}
    for rank, ev in (events or {}).items():
        if rank in with_kernels or rank not in diagnoses:
            continue
        host = host_collectives(ev, diagnoses[rank].steps)
        if host.height:
            frames.append(host)
    collectives = (
        pl.concat([as_collectives(c) for c in frames])
        if frames
        else pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    )
    parts = []
    for d in diagnoses.values():
        primary = pl.DataFrame(
            {"rank": list(d.timeline.primary_device), "device": list(d.timeline.primary_device.values())},
            schema={"rank": pl.Int32, "device": pl.Int32},
        )
        g = d.timeline.gaps
        if g.height:
            cols = [c for c in _GAP_COLS if c in g.columns]
            parts.append(g.join(primary, on=["rank", "device"], how="semi").select("rank", "start_ns", "end_ns", *cols))
    gaps = (
        pl.concat(parts, how="diagonal_relaxed")
        if parts
        else pl.DataFrame(schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    )
    share = overlapped_share(profiles)
    ready = None
    if share is not None and share >= OVERLAP_LIMIT and events and links:
        parts = [ready_times(events[r], links[r]) for r in diagnoses if r in events and r in links]
        ready = pl.concat(parts, how="vertical_relaxed") if parts else None
    return model_job(
        collectives,
        gaps,
        ranks=sorted(diagnoses),
        world_size=world_size,
        windows=windows,
        overlapped_share=share,
        ready=ready,
        steps=_complete_steps(profiles),
    )


def _complete_steps(profiles: Sequence[RankProfile]) -> pl.DataFrame | None:
    """rank, step, start_ns, end_ns of every rank's complete steps (what a one-step job is measured over)."""
    frames = [p.steps.filter(pl.col("complete")).select("rank", "step", "start_ns", "end_ns") for p in profiles if p.steps.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def overlapped_share(profiles: Sequence[RankProfile]) -> float | None:
    """The share of the ranks' communication time (complete steps) during which compute ran too."""
    frames = [p.steps.filter(pl.col("complete")) for p in profiles if p.steps.height]
    if not frames:
        return None
    steps = pl.concat(frames, how="vertical_relaxed")
    comm = float(steps["communication_ns"].fill_null(0).sum())
    if comm <= 0:
        return None
    exposed = float(steps["exposed_communication_ns"].fill_null(0).sum())
    return max(0.0, (comm - exposed) / comm)


#: host ranges of a process group's collective work (``gloo:all_reduce``, ``nccl:all_reduce``...)
HOST_COLLECTIVE = r"^(?:gloo|nccl|mpi|ucc|xccl):[a-z_]+"


def host_collectives(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """A rank's host-side collective ranges as :data:`.multirank.COLLECTIVES_SCHEMA` rows
    (numbered per step and operation like communication kernels)."""
    rows = events.filter(
        pl.col("kind").is_in([EventKind.ANNOTATION.value, EventKind.CPU_OP.value])
        & pl.col("name").str.contains(HOST_COLLECTIVE)
        & (pl.col("dur_ns") > 0)
    )
    if rows.height == 0 or steps.height == 0:
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    frame = rows.select(
        "rank",
        "name",
        pl.col("collective") if "collective" in rows.columns else pl.lit(None, dtype=pl.String).alias("collective"),
        pl.lit(None, dtype=pl.Int32).alias("device"),
        pl.lit(None, dtype=pl.Int64).alias("stream"),
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        "dur_ns",
    )
    return _collectives(frame, steps.select("rank", "step", "start_ns", "end_ns"))


def lanes_step(lanes: pl.DataFrame) -> int | None:
    """The step the rank lanes draw: of the steps every lane rank takes part in, the one whose
    collectives span the median time (the first and last steps are kept only when no other)."""
    if lanes.height == 0:
        return None
    n_ranks = lanes["rank"].n_unique()
    spans = (
        lanes.group_by("step")
        .agg(pl.col("rank").n_unique().alias("_n"), (pl.col("end_ns").max() - pl.col("work_start_ns").min()).alias("_span"))
        .filter((pl.col("_n") == n_ranks) & pl.col("_span").is_not_null())
        .sort("step")
    )
    if spans.height > 2:
        spans = spans.slice(1, spans.height - 2)
    if spans.height == 0:
        return None
    median = spans["_span"].median()
    best = spans.with_columns((pl.col("_span") - median).abs().alias("_d")).sort("_d", "step")
    return int(best["step"][0])

__all__ = [
    "COLLECTIVE_LATENCY_NS",
    "JOB_FIX_MODELS",
    "JobModel",
    "JobWhatIf",
    "from_profiles",
    "host_collectives",
    "lanes_step",
    "model_job",
]

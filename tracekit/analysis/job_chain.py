"""The collectives of a job as a max-plus recurrence: each collective ends its own transfer time
after the last rank of its group arrived, each rank arriving after its previous collective plus
its work in between; replayed unchanged or with an edit (a rank at the median speed, a cause
fixed, communication free, adjacent collectives merged)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .job_model import COLLECTIVE_LATENCY_NS


@dataclass
class ChainResult:
    ends: list[int]
    #: per collective: the rank that arrived last
    crit: list[int | None]
    #: per collective: rank → wait inside it
    waits: list[dict[int, int]]
    #: per collective: whether the last rank's own work (not its stream's previous collective) decided it
    via_gate: list[bool]


class CollectiveChain:
    """The collectives of a job as a max-plus recurrence (one pass in collective order).

    A member row's ``_origin`` (one profiled step) is where its rank's work starts when it has no
    earlier collective: the rank's step start on the aligned clock."""

    def __init__(self, members: list[list[dict[str, Any]]], c: list[int], *, side: bool = False) -> None:
        self.members = members
        self.c = c
        #: collectives on a side stream: ``w`` counts from the gate (the previous step's last
        #: collective), and the stream's FIFO order is a second predecessor
        self.side = side

    def run(
        self,
        *,
        median_rank: int | None = None,
        fix: tuple[str, frozenset[int]] | None = None,
        free_comm: bool = False,
        merge: Mapping[int, int] | None = None,
    ) -> ChainResult:
        n = len(self.c)
        ends = [0] * n
        crit: list[int | None] = [None] * n
        waits: list[dict[int, int]] = [{} for _ in range(n)]
        via_gate = [True] * n
        merge = merge or {}
        merged_into = set(merge.values())
        carry: dict[int, int] = {}  # rank → work carried over from a merged-away collective
        alias: dict[int, int] = {}  # merged-away collective → the one that replaced it
        extra_c = [0] * n
        for j in range(n):
            rows = self.members[j]
            works: dict[int, int] = {}
            for row in rows:
                r = int(row["rank"])
                w = int(row["w"]) if row["w"] is not None else None
                if w is not None and fix is not None and r in fix[1]:
                    w = max(0, w - int(row[f"{fix[0]}_ns"] or 0))
                if w is not None:
                    works[r] = w
            if median_rank is not None and median_rank in works and len(works) > 1:
                works[median_rank] = int(statistics.median(works.values()))
            own_c = 0 if free_comm else self.c[j]
            if j in merge:
                # merged into the next collective: the ranks carry on without waiting here
                for row in rows:
                    r = int(row["rank"])
                    if not self.side:
                        carry[r] = carry.get(r, 0) + works.get(r, 0)
                target = merge[j]
                extra_c[target] += own_c
                alias[j] = target
                continue
            arrivals: dict[int, int] = {}
            by_gate: dict[int, bool] = {}
            for row in rows:
                r = int(row["rank"])
                prev, gate = row["prev"], row["gate"]
                origin = row.get("_origin")
                if r not in works or (origin is None and (prev is None or gate is None)):
                    arrivals[r] = int(row["_as"])
                    continue
                p = -1 if prev is None else _prev_kept(self.members, int(prev), r, alias) if int(prev) in alias else int(prev)
                g = -1 if gate is None else _prev_kept(self.members, int(gate), r, alias) if int(gate) in alias else int(gate)
                if origin is None and (p < 0 or g < 0):
                    arrivals[r] = int(row["_as"])
                    continue
                # a rank's work counts from its gate's end, or (one step, no gate yet) its step start
                start = ends[g] if g >= 0 or origin is None else int(origin)
                ready = start + works[r] + carry.pop(r, 0)
                fifo = ends[p] if self.side and p >= 0 else ready
                arrivals[r] = max(ready, fifo) + int(row["x"] or 0)
                by_gate[r] = ready >= fifo
            if not arrivals:
                continue
            last = max(arrivals.values())
            cost = own_c + extra_c[j]
            if j in merged_into and not free_comm:
                # one collective instead of two: one fixed cost fewer (never more than the smaller one took)
                cost -= min(COLLECTIVE_LATENCY_NS, own_c, extra_c[j])
            ends[j] = last + cost
            crit[j] = min(r for r, a in arrivals.items() if a == last)
            via_gate[j] = by_gate.get(crit[j], True)  # type: ignore[arg-type]
            waits[j] = {r: last - a for r, a in arrivals.items()}
        for j, target in alias.items():
            ends[j] = ends[target]
        return ChainResult(ends=ends, crit=crit, waits=waits, via_gate=via_gate)


def _prev_kept(members: list[list[dict[str, Any]]], p: int, r: int, alias: Mapping[int, int]) -> int:
    """The previous collective of rank ``r`` that was not merged away (before ``p``)."""
    while p in alias:
        row = next((x for x in members[p] if x["rank"] == r), None)
        if row is None or row["prev"] is None:
            return -1
        p = int(row["prev"])
    return p

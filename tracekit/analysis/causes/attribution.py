"""How an idle cause takes its share of an idle gap: the attribution rules an entry declares.

The timeline (:func:`tracekit.analysis.timeline.analyze_timeline`) splits every idle gap of a
device by what the host thread that launched the next GPU work was doing:

* the *host-late* part, until that launch call started, and the *queued* part after it (the
  GPU had the work and had not started it);
* in the host-late part, the *sync-induced* stretch right after a sync call returned, and the
  rest.

In each of the two stretches every host instant is claimed by the first cause (declaration
order) whose detector marks it, else by *other host work* (any other operator, range or call),
else it is *untraced*.  :class:`GapParts` holds those times, one value per gap; a cause's
:class:`Rule` says which of them are its idle time.  The common rule (:data:`OWN_TIME`) is its
detector's exclusive time; the others are declared by the causes that need them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import polars as pl

#: idle gaps up to this long, filled by op dispatch and launch calls, are launch overhead
LAUNCH_GAP_NS = 100_000
#: queued work that starts within this long after the GPU went idle: launch latency
LAUNCH_LATENCY_NS = 50_000


@dataclass(frozen=True)
class GapParts:
    """What the host did during every idle gap (one value per gap, in the gaps' order).

    ``in_sync`` and ``rest`` hold, per cause with a detector, the host time its intervals claim
    in the sync-induced stretch and in the rest of the host-late part; ``other_*`` the time of
    other host work; ``untraced_*`` the time nothing recorded covers."""

    in_sync: Mapping[str, pl.Series]
    rest: Mapping[str, pl.Series]
    other_in_sync: pl.Series
    other_rest: pl.Series
    untraced_in_sync: pl.Series
    untraced_rest: pl.Series
    #: the queued part of each gap
    queued: pl.Series
    #: each gap's launch call (null: nothing recorded launched the work that ended it)
    launch_event_id: pl.Series
    #: cause → the host intervals its detector marked
    marked: Mapping[str, pl.DataFrame] = field(default_factory=dict)

    def own(self, cause: str) -> pl.Series:
        """The cause's exclusive host time in the gap (both stretches)."""
        total: pl.Series = self.in_sync[cause] + self.rest[cause]
        return total

    def launched_by(self, cause: str) -> pl.Series:
        """Whether each gap's work was launched by a call the cause's detector marked."""
        ids = self.marked[cause]["event_id"].implode()
        return self.launch_event_id.is_in(ids).fill_null(False)


def where(mask: pl.Series, value: pl.Series) -> pl.Series:
    """``value`` where ``mask`` holds, else 0."""
    return pl.select(pl.when(pl.lit(mask)).then(pl.lit(value)).otherwise(0)).to_series()


class Rule(Protocol):
    """How a cause takes its idle time from a gap."""

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        """The host-late time of each gap that is the cause's."""
        ...

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        """The gaps whose queued part the cause claims (among those no earlier cause claimed);
        None: it claims none."""
        ...


@dataclass(frozen=True)
class OwnTime:
    """The common rule: the exclusive host time of the cause's intervals in the gap; with
    ``queued``, also the wait for the GPU after one of its own calls launched the work (a
    pageable copy call's queued copy)."""

    queued: bool = False

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        return parts.own(cause)

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        return parts.launched_by(cause) if self.queued else None


@dataclass(frozen=True)
class SyncInduced:
    """Host-device sync: its own intervals, and in the sync-induced stretch the host time no
    cause of its own claims (other host work, untraced time): the host was waking up after the
    GPU drained, not working."""

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        total: pl.Series = parts.own(cause) + parts.other_in_sync + parts.untraced_in_sync
        return total

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        return None


@dataclass(frozen=True)
class ShortHostWork:
    """Launch overhead: other host work of at most ``limit`` in a gap (op dispatch between short
    kernels), and the queued part when it is at most ``latency`` (launch latency)."""

    limit: int = LAUNCH_GAP_NS
    latency: int = LAUNCH_LATENCY_NS

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        return where(parts.other_rest <= self.limit, parts.other_rest)

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        return parts.queued <= self.latency


@dataclass(frozen=True)
class LongHostWork:
    """Other host work longer than ``limit`` in a gap (optimizer, logging...)."""

    limit: int = LAUNCH_GAP_NS

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        return where(parts.other_rest > self.limit, parts.other_rest)

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        return None


@dataclass(frozen=True)
class Untraced:
    """Time nothing recorded explains: untraced host time outside the sync-induced stretch, and
    the queued part no other cause claims."""

    def host_time(self, parts: GapParts, cause: str) -> pl.Series:
        return parts.untraced_rest

    def queue(self, parts: GapParts, cause: str) -> pl.Series | None:
        return pl.Series([True] * parts.queued.len(), dtype=pl.Boolean)


#: the rule of a cause that declares a detector and no rule of its own
OWN_TIME = OwnTime()

"""What the registry's entries declare: a cause, a path category, a what-if knob, a finding kind,
and the replay edit that models a fix.

These are plain frozen dataclasses; the behaviour they name (a detector, an attribution rule, an
evidence builder) is a function written next to the built-in entries
(:mod:`.detectors`, :mod:`.attribution`, :mod:`.evidence`) or by whoever registers a new cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from .attribution import Rule
    from .detectors import HostEvents
    from .evidence import Detected, EvidenceInputs

#: a finding kind's evidence or wording that is the generic one: the common facts of a measured
#: cause (total, gaps, largest gap) and, in reports, its plain facts
GENERIC = ""
#: a finding kind whose detector writes its evidence as it finds it (efficiency, cross-rank, batch size)
DETECTOR = "detector"

#: TUI text colour on a light cause background, and on a dark one
ON_LIGHT = "$on-cause"
ON_DARK = "#ffffff"
#: HTML/SVG text colour on a light fill (the reports' ink), and on a dark one
INK = "#222222"
WHITE = "#ffffff"

#: host intervals a cause's detector marks: a frame of host events (at least pid, tid, start_ns,
#: end_ns and event_id) from the host events and links it is given
Detector = Callable[["HostEvents"], pl.DataFrame]
#: a boolean expression over GPU activities (columns kind, name, src_memory, dst_memory)
GpuPredicate = Callable[[], pl.Expr]
#: a boolean expression over the innermost host event of a stretch, given its kind and name columns
OwnerPredicate = Callable[[pl.Expr, pl.Expr], pl.Expr]
#: evidence of a measured cause's own, next to its common facts
EvidenceBuilder = Callable[["EvidenceInputs"], dict[str, Any]]
#: a finding kind not read from the breakdown: its cost and evidence, or None when it is absent
FindingDetector = Callable[["EvidenceInputs"], "Detected | None"]


@dataclass(frozen=True)
class GraphCapture:
    """CUDA graphs (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``) as a replay
    edit: the host execution of the captured region becomes one graph replay.

    The captured region is the host work between operators that the replay would otherwise
    repeat every step: launch calls and the operators that dispatch them, the short untraced
    stretches between operators (Python, the autograd engine's bookkeeping) and the hand-overs
    between the driving thread and the autograd thread, on every thread.  Anything else on a
    thread (a sync, a data-loading range, a pageable copy, an allocator call, host work longer
    than :attr:`host_ns`) cannot be captured: it runs eagerly and ends a region, and the next
    region is another replay costing :attr:`replay_ns` and :attr:`node_ns` per launch on its
    thread, before the first of its kernels starts.  On the GPU, consecutive
    activities of a region run :attr:`kernel_gap_ns` apart at most (the device schedules a
    graph's kernels itself).
    """

    #: host time of one replay: the replay wrapper's Python (torch.compile's guards and its
    #: cudagraph trees' checks) and ``cudaGraphLaunch``
    replay_ns: int
    #: ``cudaGraphLaunch``'s cost per kernel node of the graph (on top of :attr:`replay_ns`)
    node_ns: int
    #: the gap between consecutive kernels of one graph on the device
    kernel_gap_ns: int
    #: an untraced stretch of a thread shorter than this is inside a region (Python between
    #: operators); a longer one is host work of its own (logging, metrics) that stays eager
    host_ns: int


#: the host intervals a rule marks on each thread: a frame of pid, tid, start_ns, end_ns, from
#: the trace's events and links (see :attr:`Edit.collapse`)
SpanRule = Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class Edit:
    """How one question edits the replay's graph: tag → weight factor, and the GPU → host waits removed."""

    #: the replay's column for it (a finding kind's fix: the kind's name, given at registration)
    label: str = ""
    #: tag → factor on host-side edges (cpu / data_loading / wake)
    host: Mapping[str, float] = field(default_factory=dict)
    #: tag → factor on GPU activities
    gpu: Mapping[str, float] = field(default_factory=dict)
    #: removable sync edges whose tag is in here are removed
    drop_sync: frozenset[str] = frozenset()
    #: pageable copies run at pinned bandwidth (and the main thread pins without workers)
    pin: bool = False
    #: factor on launch edges (call → GPU start)
    launch_factor: float = 1.0
    #: the host execution of captured regions becomes one graph replay each (None: eager)
    graphs: GraphCapture | None = None
    #: host intervals whose work the fix removes (:data:`SpanRule`): the host edges inside them
    #: weigh nothing, the GPU activities launched from them take no time and the waits of their
    #: calls for the GPU are gone (an element-wise transfer loop becomes one transfer)
    collapse: SpanRule | None = None
    #: a copy from pageable memory smaller than this keeps its blocking and its bandwidth under
    #: :attr:`pin` (pinning pays where bandwidth matters: a 4-byte read still waits for its value)
    pin_min_bytes: int = 0
    #: the fix moves loading into DataLoader worker processes: a batch is pinned by their
    #: pin-memory thread, not on the main thread (under :attr:`pin`)
    workers: bool = False

    def combined(self, other: Edit, label: str = "") -> Edit:
        """This edit and ``other`` applied together (a plan of several fixes), field by field:
        a tag both scale gets the product of their factors, the waits either removes are
        removed, pinning applies when either pins (from the smaller of their size bounds), the
        launch factors multiply, a graph capture of either is kept (of both: this edit's), the
        intervals either collapse rule marks are collapsed, loading is in workers when either
        moves it there, and the label is ``label``.  A field added to :class:`Edit` gets its rule
        here (``tests/test_plan.py`` checks that every field has one)."""
        def factors(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
            return {tag: a.get(tag, 1.0) * b.get(tag, 1.0) for tag in (*a, *(t for t in b if t not in a))}

        pins = [e.pin_min_bytes for e in (self, other) if e.pin]
        return Edit(
            label=label, host=factors(self.host, other.host), gpu=factors(self.gpu, other.gpu),
            drop_sync=self.drop_sync | other.drop_sync, pin=self.pin or other.pin,
            launch_factor=self.launch_factor * other.launch_factor, graphs=self.graphs or other.graphs,
            collapse=_either(self.collapse, other.collapse), pin_min_bytes=min(pins) if pins else 0,
            workers=self.workers or other.workers,
        )

    @classmethod
    def all_of(cls, *edits: Edit) -> Edit:
        """One edit applying every one of ``edits`` (:meth:`combined` in turn), labelled with
        their labels joined by ``+`` (the fix plan's column for a prefix of its steps)."""
        out = cls()
        for e in edits:
            out = out.combined(e)
        return dataclasses.replace(out, label="+".join(e.label for e in edits))


@dataclass(frozen=True)
class SpanUnion:
    """The intervals every one of ``rules`` marks (two edits' collapse rules applied together),
    in the interval columns (a rule's own columns beyond them, a loop's read count, dropped)."""

    rules: tuple[SpanRule, ...]

    def __call__(self, events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
        return pl.concat([interval_columns(rule(events, links)) for rule in self.rules])


def interval_columns(spans: pl.DataFrame) -> pl.DataFrame:
    """A rule's intervals as pid, tid, start_ns, end_ns (Int64)."""
    return spans.select(pl.col(c).cast(pl.Int64) for c in ("pid", "tid", "start_ns", "end_ns"))


def base_rules(rule: SpanRule) -> tuple[SpanRule, ...]:
    """The rules a collapse rule applies (itself, or a union's members)."""
    return rule.rules if isinstance(rule, SpanUnion) else (rule,)


def _either(a: SpanRule | None, b: SpanRule | None) -> SpanRule | None:
    """The intervals either rule marks (one rule: itself)."""
    if a is None or b is None or a is b:
        return a or b
    rules = tuple(dict.fromkeys([*base_rules(a), *base_rules(b)]))
    return rules[0] if len(rules) == 1 else SpanUnion(rules)


@dataclass(frozen=True)
class Fix:
    """A finding's fix as the replay models it: the edit of the program and the sentence the report states."""

    edit: Edit
    text: str


@dataclass(frozen=True)
class GpuMark:
    """GPU activities a cause stands for: their critical-path edge tag, and the activities (a predicate)."""

    tag: str
    where: GpuPredicate
    #: the launch edge of such an activity, and the wait of the call that blocked on it, carry
    #: its tag too (a pageable copy's launch and blocking are the copy's cost)
    owns_call: bool = False


@dataclass(frozen=True)
class Knob:
    """A ``--what-if CAUSE=FACTOR`` name: the edge tags it scales."""

    name: str
    tags: frozenset[str]
    #: what it scales (docs/critical-path.md)
    doc: str


@dataclass(frozen=True)
class PathCause:
    """A category of the critical-path breakdown, and the edge tags it is made of."""

    name: str
    label: str
    #: the breakdown cause whose colours it is drawn in
    colour_of: str
    #: colour name of the annotated Chrome trace (``cname``)
    chrome_color: str
    #: what it is made of (docs/critical-path.md)
    doc: str
    #: the edge tags whose time it is (:data:`tracekit.analysis.whatif.TAGS`)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class FindingKind:
    """A kind of finding: what reports say, how its fix is priced, how it is found."""

    name: str
    title: str
    fix: str
    #: what it means (docs/json-report.md)
    doc: str
    #: the fix as one short imperative clause, for a report's opening sentence and its fix plan
    #: ("load batches in DataLoader workers ..."; empty: the plan names the kind's title)
    action: str = ""
    #: the what-if (knob → factor) that models fixing it on the critical path; a cause's own
    #: finding without one is priced as that cause at 0
    what_if: Mapping[str, float] | None = None
    #: found by the cross-rank comparison of a job, not in one trace
    job: bool = False
    #: how the docs describe its what-if, when that is not "that cause at 0"
    what_if_doc: str = ""
    #: title and fix on a CPU-only trace, where no GPU was recorded (empty: the usual ones)
    host_title: str = ""
    host_fix: str = ""
    #: how its evidence is built: a builder (evidence of its own next to the common facts),
    #: :data:`DETECTOR` (its detector writes it) or :data:`GENERIC` (the common facts only)
    evidence: EvidenceBuilder | str = GENERIC
    #: its evidence in one line: a key of ``tracekit.report.formatting.EVIDENCE_WORDING``, or
    #: :data:`GENERIC` (its first plain facts)
    wording: str = GENERIC
    #: a job finding's evidence in one line: a key of ``tracekit.report.formatting.JOB_WORDING``
    job_wording: str = GENERIC
    #: a job finding's title and fix, when the kind is also found across ranks (empty: the usual ones)
    job_title: str = ""
    #: its fix as the replay models it (None: priced on the critical path only)
    replay: Fix | None = None
    #: the replay may find it on its own: a fix whose replayed saving reaches the reporting
    #: threshold is a finding even when the breakdown charges its time elsewhere
    replay_finds: bool = False
    #: a kind it replaces when both are found (the same cause measured another way)
    supersedes: str = ""
    #: the breakdown cause whose time, idle gaps and colour it is: a cause's own finding is that
    #: cause (given at registration); small_batch is launch_bound's time; empty for the others
    cause: str = ""
    #: how a kind not read from the breakdown is found in one trace (None: by its own analysis)
    detect: FindingDetector | None = None
    #: the kind whose finding this one replaces when :attr:`detect` finds its evidence there
    #: (the refined finding keeps its cost; ``detect`` sees its evidence)
    refines: str = ""
    #: the evidence key listing the kernels where the finding shows (the TUI opens the first)
    focus_kernels: str = ""
    #: False: the finding says what is known of time whose fix no model can price (time the
    #: trace does not explain: its fix is to record it); no what-if, no replay, no predicted step
    priced: bool = True

    @property
    def measured(self) -> bool:
        """Its cost is read from the breakdown column of its name."""
        return self.cause == self.name

    @property
    def replayed(self) -> bool:
        """The replay prices its fix (:attr:`replay`); the efficiency findings are priced from
        their own measurement on the critical path instead."""
        return self.replay is not None


@dataclass(frozen=True)
class Cause:
    """A bucket of the step-time breakdown, with everything that branches on it.

    An *idle cause* (one with a :attr:`detector` or a :attr:`rule`) is also a cause of idle
    gaps: the first cause (declaration order) whose detector marks a host interval claims it,
    and :attr:`rule` says how much of a gap's idle time is the cause's.
    """

    name: str
    #: how reports name it ("data loading")
    label: str
    #: a shorter name for one-line legends ("host sync")
    short_label: str
    #: fill colour in the HTML/SVG report
    color: str
    #: background colour in the terminal UI
    term_color: str
    #: text colour on ``term_color`` in the terminal UI
    term_text: str
    #: what the host thread was doing (docs/analysis.md)
    doc: str
    #: text colour on ``color`` in the HTML/SVG report
    on_color: str = INK
    #: the host intervals that mark it (None: it marks none of its own)
    detector: Detector | None = None
    #: how its idle time is attributed (None with a detector: its detector's exclusive host time
    #: in the gap, :data:`.attribution.OWN_TIME`; None without one: a busy-only bucket)
    rule: Rule | None = None
    #: the critical-path edge tag of the host stretches its detector marks
    host_tag: str = ""
    #: the GPU activities it stands for: busy time when only they run (and no earlier cause's),
    #: and their edge tags; see :attr:`rest_of_gpu`
    gpu: tuple[GpuMark, ...] = ()
    #: its marks catch the GPU activities no other cause marks, and it is the busy time no other
    #: cause claims (compute)
    rest_of_gpu: bool = False
    #: innermost events whose stretches inside its intervals keep their own edge tag on the
    #: critical path (an allocation inside a copy operator is the allocator's)
    keeps_own: OwnerPredicate | None = None
    #: its intervals end the idle time a sync explains (the host turned to work with a name of its own)
    ends_sync_wait: bool = False
    #: on a CPU-only trace the training thread's time in its intervals is counted as it
    without_gpu: bool = False
    #: ``--what-if`` names it adds (none: an idle cause with tags gets one named after it, scaling them)
    knobs: tuple[Knob, ...] = ()
    #: a path category of its own, for tags no declared category has
    path: PathCause | None = None
    #: the finding that reports it (its name is the cause's)
    finding: FindingKind | None = None

    @property
    def css_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def idle(self) -> bool:
        """A cause of idle gaps."""
        return self.detector is not None or self.rule is not None

    @property
    def tags(self) -> tuple[str, ...]:
        """The critical-path edge tags of what it marks (host stretches, then GPU activities)."""
        own = (self.host_tag,) if self.host_tag else ()
        return own + tuple(m.tag for m in self.gpu if m.tag not in own)


#: what the registry holds: breakdown causes and the finding kinds measured otherwise
Entry = Cause | FindingKind

"""The vocabulary of tracekit, and the behaviour of each cause: one registry.

Everything that names a cause — the timeline's breakdown buckets and idle-gap causes, the host
intervals that mark each, how its idle time is attributed, the critical path's categories and
edge tags, the ``--what-if`` knobs, the finding kinds with their titles, fixes and evidence, the
replay edit that models each fix, and the labels and colours every renderer (text, Markdown,
HTML/SVG, annotated trace, TUI) shows — is declared once, in the registry's entries
(:mod:`.builtins` for tracekit's own).  The analyses, the renderers, the TUI and the docs tables
iterate over the registry; ``tests/test_causes.py`` walks it and checks that each of them knows
every entry.

What an entry declares (:mod:`.model`):

* :class:`Cause` — a bucket of the step-time breakdown: labels and colours; its *detector*
  (the host intervals that mark it, :mod:`.detectors`); its attribution *rule*
  (:mod:`.attribution`: by default its detector's exclusive host time in a gap); the GPU
  activities it stands for (:class:`GpuMark`); the critical-path edge tags of what it marks
  and their path category; its what-if knobs; its finding.
* :class:`FindingKind` — a finding: title, fix, evidence, wording, the replay's model of its
  fix (:class:`Fix`, an :class:`Edit` of the replayed program and its sentence), whether the
  replay may find it on its own, what it supersedes.
* :class:`PathCause` — a category of the critical-path breakdown, made of edge tags.
* :class:`Knob` — a ``--what-if CAUSE=FACTOR`` name and the edge tags it scales.

Order is meaning: the entries' order is the order reports list causes and break ties between
findings; among the idle causes the first whose detector marks a host instant claims it.

Adding a cause takes the entry and its detector, nothing else: :func:`register` (or
:func:`registered` in a test) puts it in the registry at run time, and every table derived from
the registry is derived at call time (:mod:`.tables`), so the next analysis, report or TUI
session knows it.  ``docs/causes.md`` walks through an example.
"""

from __future__ import annotations

from .attribution import (
    LAUNCH_GAP_NS,
    LAUNCH_LATENCY_NS,
    GapParts,
    LongHostWork,
    OwnTime,
    Rule,
    ShortHostWork,
    SyncInduced,
    Untraced,
)
from .builtins import GRAPH_KERNEL_GAP_NS, GRAPH_REPLAY_NS, REPLAY_TENSOR_CORE_SPEEDUP, TENSOR_CORE_SPEEDUP
from .detectors import HOST_CATEGORY_COLUMNS, HostEvents
from .docs import (
    breakdown_markdown,
    finding_kinds_markdown,
    finding_what_if_markdown,
    idle_causes_markdown,
    knobs_markdown,
    path_causes_markdown,
)
from .evidence import Detected, EvidenceInputs
from .model import (
    DETECTOR,
    GENERIC,
    INK,
    ON_DARK,
    ON_LIGHT,
    WHITE,
    Cause,
    Edit,
    FindingKind,
    Fix,
    GpuMark,
    GraphCapture,
    Knob,
    PathCause,
    SpanRule,
    SpanUnion,
    base_rules,
    interval_columns,
)
from .registry import REGISTRY, LiveMapping, LiveSequence, knobs_of, register, registered, unregister
from .tables import (
    ACTIONS,
    BREAKDOWN,
    BY_NAME,
    CAUSE_COLORS,
    CAUSE_LABELS,
    CAUSES,
    CP_CAUSES,
    EDGE_TAGS,
    FALLBACK_CAUSE,
    FINDING_BY_NAME,
    FINDING_COLOR,
    FINDING_KINDS,
    FINDING_WHAT_IF,
    FINDINGS,
    FIX_MODELS,
    FIXES,
    HOST_FIXES,
    HOST_TITLES,
    IDLE_CAUSES,
    IDLE_LIKE,
    JOB_FIXES,
    JOB_TITLES,
    KNOBS,
    MEASURED_FINDINGS,
    PATH,
    PATH_BY_NAME,
    PATH_LABELS,
    REPLAY_FOUND,
    REPLAYED_FINDINGS,
    SHORT_LABELS,
    SUPERSEDES,
    TITLES,
    WHAT_IF_CAUSES,
    breakdown,
    by_name,
    cause_color,
    cause_label,
    cause_text_color,
    detected,
    edge_tags,
    finding_by_name,
    finding_cause,
    finding_color,
    findings,
    fix_edit,
    gpu_claimants,
    idle_causes,
    knobs,
    path_causes,
    path_label,
    rank_fixable,
    without_gpu,
)

__all__ = [
    "ACTIONS", "BREAKDOWN", "BY_NAME", "CAUSES", "CAUSE_COLORS", "CAUSE_LABELS", "CP_CAUSES", "DETECTOR", "EDGE_TAGS", "FALLBACK_CAUSE",
    "FINDINGS", "FINDING_BY_NAME", "FINDING_COLOR", "FINDING_KINDS", "FINDING_WHAT_IF", "FIXES", "FIX_MODELS", "GENERIC",
    "GRAPH_KERNEL_GAP_NS", "GRAPH_REPLAY_NS",     "HOST_CATEGORY_COLUMNS", "HOST_FIXES", "HOST_TITLES", "IDLE_CAUSES", "IDLE_LIKE", "INK", "JOB_FIXES", "JOB_TITLES",
    "KNOBS", "LAUNCH_GAP_NS", "LAUNCH_LATENCY_NS", "MEASURED_FINDINGS", "ON_DARK", "ON_LIGHT", "PATH",
    "PATH_BY_NAME", "PATH_LABELS", "REGISTRY", "REPLAYED_FINDINGS", "REPLAY_FOUND", "REPLAY_TENSOR_CORE_SPEEDUP",
    "SHORT_LABELS", "SUPERSEDES", "TENSOR_CORE_SPEEDUP", "TITLES", "WHAT_IF_CAUSES", "WHITE", "Cause", "Detected", "Edit",
    "EvidenceInputs", "FindingKind", "Fix", "GapParts", "GpuMark", "GraphCapture", "HostEvents", "Knob", "LiveMapping", "LiveSequence",
    "LongHostWork", "OwnTime", "PathCause", "Rule", "ShortHostWork", "SpanRule", "SpanUnion", "SyncInduced", "Untraced", "base_rules", "breakdown",
    "breakdown_markdown", "by_name", "cause_color", "cause_label", "cause_text_color", "detected", "edge_tags",
    "finding_by_name", "finding_cause", "finding_color", "finding_kinds_markdown", "finding_what_if_markdown", "findings",
    "fix_edit", "gpu_claimants", "idle_causes", "idle_causes_markdown", "interval_columns", "knobs", "knobs_markdown", "knobs_of",
    "path_causes", "path_causes_markdown", "path_label", "rank_fixable", "register", "registered", "unregister",
    "without_gpu",
]

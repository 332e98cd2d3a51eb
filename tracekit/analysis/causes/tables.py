"""Tables derived from the registry, computed once per registry version (:func:`.registry.derived`),
and the live views the analyses, renderers and TUI read them through."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .model import Cause, Edit, FindingKind, Knob, PathCause
from .registry import REGISTRY, LiveMapping, LiveSequence, derived, knobs_of

#: the bucket a cause the renderers do not know is drawn as
FALLBACK_CAUSE = "unattributed"
#: the colour of a finding whose kind is no breakdown cause's
FINDING_COLOR = "#999999"

# ------------------------------------------------------------------ causes


@derived
def breakdown() -> tuple[Cause, ...]:
    """Every bucket of the step-time breakdown, in the registry's order (reports list them in it)."""
    return tuple(e for e in REGISTRY.entries if isinstance(e, Cause))


@derived
def by_name() -> Mapping[str, Cause]:
    return {c.name: c for c in breakdown()}


@derived
def idle_causes() -> tuple[Cause, ...]:
    """The causes of idle gaps, in precedence order: the registry's."""
    return tuple(c for c in breakdown() if c.idle)


@derived
def detected() -> tuple[Cause, ...]:
    """The idle causes whose detector marks host intervals, in precedence order."""
    return tuple(c for c in idle_causes() if c.detector is not None)


@derived
def gpu_claimants() -> tuple[Cause, ...]:
    """The causes whose GPU activities are theirs (busy time when only they run), then the cause
    that has the rest of the GPU's activities (compute).

    Where several causes' activities run at once and nothing else does, the busy time is the
    cause's whose activities the critical path's categories list first (:func:`path_causes`:
    communication before copies), the GPU's own order of its kinds of work."""
    rank = {p.name: i for i, p in enumerate(path_causes())}
    tags = edge_tags()

    def first(c: Cause) -> int:
        return min(rank[tags[m.tag]] for m in c.gpu)

    ordered = sorted((c for c in breakdown() if c.gpu and not c.rest_of_gpu), key=first)
    return (*ordered, *(c for c in breakdown() if c.rest_of_gpu))


@derived
def without_gpu() -> tuple[Cause, ...]:
    """The causes a CPU-only trace's training thread is split into (besides compute), in precedence order."""
    return tuple(c for c in detected() if c.without_gpu)


def cause_label(name: str) -> str:
    """The report label of a breakdown cause (the name itself for one not declared)."""
    cause = by_name().get(name)
    return name if cause is None else cause.label


def cause_color(name: str) -> str:
    """The HTML/SVG colour of a breakdown cause (the unattributed colour for one not declared)."""
    return by_name().get(name, by_name()[FALLBACK_CAUSE]).color


def cause_text_color(name: str) -> str:
    """The HTML/SVG text colour on a breakdown cause's fill."""
    return by_name().get(name, by_name()[FALLBACK_CAUSE]).on_color


# ------------------------------------------------------------------ critical path


@derived
def path_causes() -> tuple[PathCause, ...]:
    return REGISTRY.paths


@derived
def edge_tags() -> Mapping[str, str]:
    """Every critical-path edge tag → the path category whose time it is, in tag order."""
    return {t: p.name for p in path_causes() for t in p.tags}


def path_label(name: str) -> str:
    """The report label of a critical-path cause (the name itself for one not declared)."""
    cause = {p.name: p for p in path_causes()}.get(name)
    return name if cause is None else cause.label


# ------------------------------------------------------------------ what-if knobs


@derived
def knobs() -> tuple[Knob, ...]:
    """Every ``--what-if`` name: each cause's (the registry's order), then the GPU's as a whole."""
    return (*(k for c in breakdown() for k in knobs_of(c)), *REGISTRY.device_knobs)


# ------------------------------------------------------------------ findings


@derived
def findings() -> tuple[FindingKind, ...]:
    """Every finding kind, in tie-break order (the order of the entries)."""
    out: list[FindingKind] = []
    for e in REGISTRY.entries:
        kind = e.finding if isinstance(e, Cause) else e
        if kind is not None:
            out.append(kind)
    return tuple(out)


@derived
def finding_by_name() -> Mapping[str, FindingKind]:
    return {f.name: f for f in findings()}


def finding_cause(kind: str) -> str:
    """The breakdown cause whose time, gaps and colour a finding kind has (the kind itself when
    it names no cause)."""
    found = finding_by_name().get(kind)
    return kind if found is None or not found.cause else found.cause


def finding_color(kind: str) -> str:
    """The colour a finding is drawn in: its cause's, else :data:`FINDING_COLOR`."""
    cause = by_name().get(finding_cause(kind))
    return FINDING_COLOR if cause is None else cause.color


@derived
def idle_like() -> tuple[str, ...]:
    """Measured kinds that are idle time only (no GPU activity of their own): not reported when
    the GPU is saturated."""
    return tuple(f.name for f in findings() if f.measured and not by_name()[f.name].gpu)


@derived
def fix_models() -> Mapping[str, str]:
    """Finding kind → the fix the replay models (the report states it)."""
    return {f.name: f.replay.text for f in findings() if f.replay is not None}


def fix_edit(kind: str) -> Edit | None:
    """The replay edit that models fixing a finding of this kind (None: not modelled)."""
    found = finding_by_name().get(kind)
    if found is None or found.replay is None:
        return None
    return dataclasses.replace(found.replay.edit, label=kind)


@derived
def rank_fixable() -> tuple[str, ...]:
    """Idle causes a rank-level fix removes from a job's work between collectives: the ones with
    a finding of one trace only (communication is the job model's own)."""
    return tuple(c.name for c in idle_causes() if c.finding is not None and not c.finding.job_title)


#: every bucket of the step-time breakdown, in the registry's order
CAUSES = LiveSequence(lambda: tuple(c.name for c in breakdown()))
BREAKDOWN = LiveSequence(breakdown)
BY_NAME = LiveMapping(by_name)
#: the causes of idle gaps, in precedence order
IDLE_CAUSES = LiveSequence(lambda: tuple(c.name for c in idle_causes()))
#: breakdown cause → report label, short label, HTML/SVG colour
CAUSE_LABELS = LiveMapping(lambda: {c.name: c.label for c in breakdown()})
SHORT_LABELS = LiveMapping(lambda: {c.name: c.short_label for c in breakdown()})
CAUSE_COLORS = LiveMapping(lambda: {c.name: c.color for c in breakdown()})
PATH = LiveSequence(path_causes)
PATH_BY_NAME = LiveMapping(lambda: {p.name: p for p in path_causes()})
#: the critical-path breakdown's causes, in display order
CP_CAUSES = LiveSequence(lambda: tuple(p.name for p in path_causes()))
PATH_LABELS = LiveMapping(lambda: {p.name: p.label for p in path_causes()})
#: what every critical-path edge's time is made of (one tag per edge) → its path cause
EDGE_TAGS = LiveMapping(edge_tags)
KNOBS = LiveSequence(knobs)
#: what-if knob → the edge tags it scales
WHAT_IF_CAUSES = LiveMapping(lambda: {k.name: k.tags for k in knobs()})
FINDINGS = LiveSequence(findings)
FINDING_BY_NAME = LiveMapping(finding_by_name)
#: kinds of single-trace findings, in tie-break order
FINDING_KINDS = LiveSequence(lambda: tuple(f.name for f in findings() if not f.job))
#: single-trace finding kinds whose fix the replay models
REPLAYED_FINDINGS = LiveSequence(lambda: tuple(f.name for f in findings() if not f.job and f.replayed))
#: single-trace finding kinds read from the breakdown
MEASURED_FINDINGS = LiveSequence(lambda: tuple(f.name for f in findings() if f.measured))
IDLE_LIKE = LiveSequence(idle_like)
#: finding kind → title, fix (single-trace kinds)
TITLES = LiveMapping(lambda: {f.name: f.title for f in findings() if not f.job})
FIXES = LiveMapping(lambda: {f.name: f.fix for f in findings() if not f.job})
#: kind → its fix as one short clause (the plan's and the opening sentence's words)
ACTIONS = LiveMapping(lambda: {f.name: f.action for f in findings() if f.action})
#: titles and fixes on a CPU-only trace (no GPU recorded: the words speak of the host)
HOST_TITLES = LiveMapping(lambda: {f.name: f.host_title for f in findings() if f.host_title})
HOST_FIXES = LiveMapping(lambda: {f.name: f.host_fix for f in findings() if f.host_fix})
#: finding kind → the what-if that models fixing it on the critical path
FINDING_WHAT_IF = LiveMapping(lambda: {f.name: f.what_if for f in findings() if f.what_if is not None})
#: a job-level finding's title and fix
JOB_TITLES = LiveMapping(lambda: {f.name: f.job_title or f.title for f in findings() if f.job or f.job_title})
JOB_FIXES = LiveMapping(lambda: {f.name: f.fix for f in findings() if f.job or f.job_title})
#: finding kind → the fix the replay models
FIX_MODELS = LiveMapping(fix_models)
#: kinds the replay may find on its own (a fix whose replayed saving reaches the reporting
#: threshold is a finding even when the breakdown charges its time elsewhere)
REPLAY_FOUND = LiveSequence(lambda: tuple(f.name for f in findings() if f.replay_finds))
#: kind → the kind it supersedes (the same cause measured another way)
SUPERSEDES = LiveMapping(lambda: {f.name: f.supersedes for f in findings() if f.supersedes})

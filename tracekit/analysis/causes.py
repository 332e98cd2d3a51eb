"""The vocabulary of tracekit: every cause, critical-path category, what-if knob and finding kind.

Everything that names a cause — the timeline's breakdown buckets and idle-gap causes, the
critical path's categories and edge tags, the ``--what-if`` knobs, the finding kinds with their
titles and fixes, and the labels and colours every renderer (text, Markdown, HTML/SVG,
annotated trace, TUI) shows — is declared here, once.  The other modules derive their tables
from these declarations, and ``tests/test_causes.py`` walks them and checks that every renderer,
the TUI's stylesheet and the docs have each one.

Four kinds of declaration:

* :class:`Cause` — a bucket of the step-time breakdown (``Diagnosis.breakdown``); the ones with
  an ``idle_priority`` are also causes of idle gaps (``Timeline.gaps``).  Declaration order is
  display order.
* :class:`PathCause` — a category of the critical-path breakdown, made of edge tags
  (:data:`EDGE_TAGS`), drawn in the colour of a breakdown cause.
* :class:`Knob` — a ``--what-if CAUSE=FACTOR`` name and the edge tags it scales.
* :class:`FindingKind` — a finding: title, fix, the what-if that models fixing it.

How to add a kind
-----------------
* **A new idle cause** (say ``gc_pause``): add a :class:`Cause` to :data:`BREAKDOWN` with its
  labels, colours, ``idle_priority`` (its place among the idle causes: a gap's cause is the
  first of the largest) and a one-line ``doc``; write its detector in
  :mod:`tracekit.analysis.timeline` (a ``<name>_ns`` column of the gaps); add a :class:`Knob`
  and, when it should be reported, a :class:`FindingKind` with ``measured=True``: its ms per
  step, steps affected and common evidence (total, gaps, largest gap) are read from the
  breakdown column.  Evidence of its own is optional: a builder in
  ``tracekit.analysis.findings.EVIDENCE_BUILDERS`` named by ``evidence=`` and a one-line
  wording in ``tracekit.report.formatting.EVIDENCE_WORDING`` named by ``wording=`` (left
  :data:`GENERIC`, the common facts are built and its plain facts are shown).
  Renderers, the TUI stylesheet, the CLI help and the docs tables
  (``python scripts/gen_docs.py``) follow from the declaration.  The breakdown, the gaps and
  the TUI's tables pick the new column up by name.
* **A new finding from another measurement** (an efficiency finding such as small GEMMs):
  add a :class:`FindingKind` (``measured=False``) and its detector in
  :mod:`tracekit.analysis.findings` (``Finding.of(kind, ...)`` takes the title and the fix from
  here); give it a ``what_if`` when a knob models the fix, ``evidence=DETECTOR`` (the detector
  writes the evidence) and a ``wording``.
* **A new kind of critical-path time**: add the edge tag to :data:`EDGE_TAGS` (mapped to its
  :class:`PathCause`), then tag the edges in :mod:`tracekit.analysis.critical_path`.

Nothing here computes anything: it is data, imported by analyses and renderers alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: a finding kind's evidence or wording that is the generic one: the common facts of a measured
#: cause (total, gaps, largest gap) and, in reports, its plain facts
GENERIC = ""
#: a finding kind whose detector writes its evidence as it finds it (efficiency, cross-rank, batch size)
DETECTOR = "detector"

#: TUI text colour on a light cause background, and on a dark one
ON_LIGHT = "$on-cause"
ON_DARK = "#ffffff"


@dataclass(frozen=True)
class Cause:
    """A bucket of the step-time breakdown (and, with ``idle_priority``, a cause of idle gaps)."""

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
    #: rank among the idle causes (lower first: ties between causes of one gap go to it);
    #: None for a busy-only bucket
    idle_priority: int | None = None

    @property
    def css_name(self) -> str:
        return self.name.replace("_", "-")


@dataclass(frozen=True)
class PathCause:
    """A category of the critical-path breakdown."""

    name: str
    label: str
    #: the breakdown cause whose colours it is drawn in
    colour_of: str
    #: colour name of the annotated Chrome trace (``cname``)
    chrome_color: str
    #: what it is made of (docs/critical-path.md)
    doc: str


@dataclass(frozen=True)
class Knob:
    """A ``--what-if CAUSE=FACTOR`` name: the edge tags it scales."""

    name: str
    tags: frozenset[str]
    #: what it scales (docs/critical-path.md)
    doc: str


@dataclass(frozen=True)
class FindingKind:
    """A kind of finding."""

    name: str
    title: str
    fix: str
    #: what it means (docs/json-report.md)
    doc: str
    #: the what-if (knob → factor) that models fixing it, if any
    what_if: Mapping[str, float] | None = None
    #: cost read from the breakdown column of the same name (else from its own measurement)
    measured: bool = False
    #: an idle-time cause: not reported when the GPU is busy anyway
    idle_like: bool = False
    #: found by the cross-rank comparison of a job, not in one trace
    job: bool = False
    #: how the docs describe its what-if, when that is not "that cause at 0"
    what_if_doc: str = field(default="")
    #: priced by replaying the steps with its fix (:data:`tracekit.analysis.replay.FIX_MODELS`); the
    #: efficiency findings are priced from their own measurement on the critical path instead
    replayed: bool = True
    #: title and fix on a CPU-only trace, where no GPU was recorded (empty: the usual ones)
    host_title: str = ""
    host_fix: str = ""
    #: how its evidence is built: a key of ``tracekit.analysis.findings.EVIDENCE_BUILDERS`` (evidence
    #: of its own next to the common facts), :data:`DETECTOR` (its detector writes it) or
    #: :data:`GENERIC` (the common facts only)
    evidence: str = GENERIC
    #: its evidence in one line: a key of ``tracekit.report.formatting.EVIDENCE_WORDING``, or
    #: :data:`GENERIC` (its first plain facts)
    wording: str = GENERIC
    #: a job finding's evidence in one line: a key of ``tracekit.report.formatting.JOB_WORDING``
    job_wording: str = GENERIC


# ------------------------------------------------------------------ breakdown causes

BREAKDOWN: tuple[Cause, ...] = (
    Cause("compute", "compute", "compute", "#4c78a8", "#5e9e6e", ON_LIGHT,
          "the GPU runs compute kernels (busy time, not idle)"),
    Cause("data_loading", "data loading", "data loading", "#f58518", "#d08770", ON_LIGHT,
          "DataLoader / `__next__` / collate / data-pipeline ranges", idle_priority=0),
    Cause("host_device_sync", "host-device sync", "host sync", "#e45756", "#bf616a", ON_DARK,
          "a synchronising call (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, "
          "blocking `cudaMemcpy`, HIP equivalents), an explicit sync row, or a data-dependent operator "
          "(`aten::item`, `aten::nonzero`...), or host code running after one", idle_priority=2),
    Cause("pageable_memcpy", "pageable copies", "pageable", "#b279a2", "#b48ead", ON_LIGHT,
          "a copy call whose host memory is pageable, or the operator around it (`aten::to`); "
          "also busy time when only such a copy runs", idle_priority=1),
    Cause("launch_bound", "launch overhead", "launch", "#eeca3b", "#a3be8c", ON_LIGHT,
          "other host work of at most 100 µs in the gap (op dispatch between short kernels), or the launch "
          "latency of queued work", idle_priority=5),
    Cause("allocator", "allocator", "allocator", "#9d755d", "#ebcb8b", ON_LIGHT,
          "`cudaMalloc`/`cudaFree`-style calls", idle_priority=3),
    Cause("exposed_communication", "exposed communication", "communication", "#72b7b2", "#88c0d0", ON_LIGHT,
          "a CPU-side collective call; also busy time when only communication kernels run", idle_priority=4),
    Cause("cpu_bound", "other host work", "host work", "#54a24b", "#5e81ac", ON_DARK,
          "other host work longer than 100 µs in the gap (optimizer, logging...)", idle_priority=6),
    Cause("unattributed", "unattributed idle", "unattributed", "#bab0ac", "#7b8394", ON_DARK,
          "nothing recorded explains it; tracekit does not guess", idle_priority=7),
)

BY_NAME: Mapping[str, Cause] = MappingProxyType({c.name: c for c in BREAKDOWN})
#: every bucket of the step-time breakdown, in display order
CAUSES: tuple[str, ...] = tuple(c.name for c in BREAKDOWN)
#: the causes of idle gaps, in priority order
IDLE_CAUSES: tuple[str, ...] = tuple(
    c.name for c in sorted((c for c in BREAKDOWN if c.idle_priority is not None), key=lambda c: c.idle_priority or 0)
)
#: breakdown cause → report label
CAUSE_LABELS: Mapping[str, str] = MappingProxyType({c.name: c.label for c in BREAKDOWN})
#: breakdown cause → short label
SHORT_LABELS: Mapping[str, str] = MappingProxyType({c.name: c.short_label for c in BREAKDOWN})
#: breakdown cause → HTML/SVG colour
CAUSE_COLORS: Mapping[str, str] = MappingProxyType({c.name: c.color for c in BREAKDOWN})
#: the bucket a cause the renderers do not know is drawn as
FALLBACK_CAUSE = "unattributed"


def cause_label(name: str) -> str:
    """The report label of a breakdown cause (the name itself for one not declared)."""
    cause = BY_NAME.get(name)
    return name if cause is None else cause.label


def cause_color(name: str) -> str:
    """The HTML/SVG colour of a breakdown cause (the unattributed colour for one not declared)."""
    return BY_NAME.get(name, BY_NAME[FALLBACK_CAUSE]).color


# ------------------------------------------------------------------ critical path

PATH: tuple[PathCause, ...] = (
    PathCause("gpu_compute", "GPU compute", "compute", "good", "kernels (not communication)"),
    PathCause("communication", "communication", "exposed_communication", "olive",
              "communication kernels, host-side collective calls"),
    PathCause("memcpy", "copies", "pageable_memcpy", "yellow",
              "copies and memsets; host time blocked in pageable copies"),
    PathCause("launch_overhead", "launch overhead", "launch_bound", "bad",
              "CUDA runtime/driver calls, operator dispatch around launches, launch latency, gaps on a stream"),
    PathCause("data_loading", "data loading", "data_loading", "terrible",
              "host time in DataLoader / collate / data-pipeline ranges"),
    PathCause("host_device_sync", "host-device sync", "host_device_sync", "terrible",
              "sync calls, data-dependent operators (`.item()`), waking up after the GPU"),
    PathCause("allocator", "allocator", "allocator", "bad", "`cudaMalloc`/`cudaFree`-style calls"),
    PathCause("cpu_other", "other host work", "cpu_bound", "grey",
              "other host work, including the driving thread's untraced time"),
)
PATH_BY_NAME: Mapping[str, PathCause] = MappingProxyType({c.name: c for c in PATH})
#: the critical-path breakdown's causes, in display order
CP_CAUSES: tuple[str, ...] = tuple(c.name for c in PATH)
#: critical-path cause → report label
PATH_LABELS: Mapping[str, str] = MappingProxyType({c.name: c.label for c in PATH})

#: what every critical-path edge's time is made of (one tag per edge) → its path cause
EDGE_TAGS: Mapping[str, str] = MappingProxyType({
    "kernel": "gpu_compute",
    "fp32_matmul": "gpu_compute",
    "comm_kernel": "communication",
    "memcpy": "memcpy",
    "pageable_memcpy": "memcpy",
    "launch": "launch_overhead",
    "data_loading": "data_loading",
    "sync": "host_device_sync",
    "allocator": "allocator",
    "collective": "communication",
    "cpu": "cpu_other",
    "wait": "cpu_other",
})


def path_label(name: str) -> str:
    """The report label of a critical-path cause (the name itself for one not declared)."""
    cause = PATH_BY_NAME.get(name)
    return name if cause is None else cause.label


# ------------------------------------------------------------------ what-if knobs

KNOBS: tuple[Knob, ...] = (
    Knob("data_loading", frozenset({"data_loading"}), "data-loading stretches"),
    Knob("host_device_sync", frozenset({"sync"}),
         "sync calls and data-dependent operators; factor 0 also removes their GPU → host waits"),
    Knob("pageable_memcpy", frozenset({"pageable_memcpy"}),
         "pageable copies, their launch and the host call blocked on them; factor 0 removes the wait "
         "(the copy becomes asynchronous)"),
    Knob("launch_bound", frozenset({"launch"}), "runtime/driver calls, dispatch, launch latency, stream gaps"),
    Knob("allocator", frozenset({"allocator"}), "allocator calls"),
    Knob("exposed_communication", frozenset({"comm_kernel", "collective"}),
         "communication kernels and host-side collectives"),
    Knob("communication", frozenset({"comm_kernel"}), "communication kernels"),
    Knob("cpu_bound", frozenset({"cpu"}), "other host work"),
    Knob("kernels", frozenset({"kernel", "fp32_matmul"}), "every compute kernel"),
    Knob("fp32_matmul", frozenset({"fp32_matmul"}), "fp32 (SIMT) GEMM/convolution kernels"),
    Knob("memcpy", frozenset({"memcpy", "pageable_memcpy"}), "every copy and memset"),
)
#: what-if knob → the edge tags it scales
WHAT_IF_CAUSES: Mapping[str, frozenset[str]] = MappingProxyType({k.name: k.tags for k in KNOBS})

#: assumed speed-up of fp32 GEMMs once they run on tensor cores (TF32/bf16); conservative:
#: the hardware peak ratio is 8x or more, real models see 2-3x end to end on matmuls
TENSOR_CORE_SPEEDUP = 2.0


# ------------------------------------------------------------------ findings

FINDINGS: tuple[FindingKind, ...] = (
    FindingKind(
        "data_loading", "The GPU waits for the DataLoader",
        "Load data in parallel and ahead of time: DataLoader(num_workers=N > 0 (start with the CPU cores per GPU), "
        "pin_memory=True, prefetch_factor=2-4, persistent_workers=True); move slow preprocessing (decode, augment) "
        "into the workers or onto the GPU; cache decoded samples.",
        "the GPU waits while the host loads/prepares the next batch",
        what_if={"data_loading": 0.0}, measured=True, idle_like=True,
        host_title="The training loop waits for the DataLoader",
        host_fix="Load data in parallel and ahead of time: DataLoader(num_workers=N > 0, prefetch_factor=2-4, "
        "persistent_workers=True) so batches are ready when the loop asks; move slow preprocessing (decode, augment) "
        "into the workers; cache decoded samples.",
        evidence="data_loading", wording="data_loading",
    ),
    FindingKind(
        "host_device_sync", "Host-device synchronisation stalls the GPU",
        "Remove synchronisations from the training loop: avoid .item(), .cpu(), .tolist(), print(tensor) and "
        "torch.cuda.synchronize() every step (accumulate metrics on the GPU and read them every N steps); avoid "
        "data-dependent ops (nonzero, boolean masks) in the hot path; never read a tensor element by element "
        "(.item() or .cpu() in a Python loop): transfer it once (t.tolist(), t.cpu()) or keep the logic on the GPU; "
        "use .to(device, non_blocking=True).",
        "the host waits for the GPU (`.item()`, `.cpu()`, `torch.cuda.synchronize`, blocking copies), draining its queue",
        what_if={"host_device_sync": 0.0}, measured=True, idle_like=True,
        evidence="host_device_sync", wording="host_device_sync",
    ),
    FindingKind(
        "pageable_memcpy", "Copies from pageable (unpinned) host memory",
        "Copy from pinned memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
        ".to(device, non_blocking=True) so the copy runs asynchronously and overlaps compute.",
        "copies from/to pageable host memory (`pin_memory=False`)",
        what_if={"pageable_memcpy": 0.0}, measured=True,
        evidence="pageable_memcpy", wording="pageable_memcpy",
    ),
    FindingKind(
        "launch_bound", "Launch-bound: kernels finish faster than the host launches them",
        "Give the GPU more work per launch: a larger batch, torch.compile (mode='reduce-overhead' adds CUDA graphs), "
        "CUDA graphs for the step, fused kernels and optimizers (foreach=True / fused=True).",
        "kernels finish faster than the host launches them",
        what_if={"launch_bound": 0.0}, measured=True, idle_like=True,
        evidence="launch_bound", wording="launch_bound",
    ),
    FindingKind(
        "allocator", "Allocator calls (cudaMalloc/cudaFree) in the steady state",
        "Stop allocating in the steady state: keep shapes stable, reuse buffers, do not call torch.cuda.empty_cache() "
        "in the loop, try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        "`cudaMalloc`/`cudaFree` in the steady state",
        what_if={"allocator": 0.0}, measured=True, idle_like=True,
        evidence="allocator", wording="allocator",
    ),
    FindingKind(
        "no_tensor_cores", "Matrix multiplies run in fp32, without tensor cores",
        "Use the tensor cores: mixed precision with torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
        "(or float16 with a GradScaler), or at least TF32 via torch.set_float32_matmul_precision('high').",
        "fp32 matrix multiplies on a GPU with tensor cores (no AMP/TF32)",
        what_if={"fp32_matmul": 1.0 / TENSOR_CORE_SPEEDUP},
        what_if_doc="`fp32_matmul=0.5` (a conservative 2× speed-up on tensor cores)",
        evidence=DETECTOR, wording="no_tensor_cores",
    ),
    FindingKind(
        "small_batch", "The batch is too small for this GPU",
        "Increase the batch size (scale the learning rate accordingly): matrix multiplies are too small to fill the GPU "
        "and most device memory is unused, so each step pays fixed launch costs for little work. If the batch must stay, "
        "cut the per-launch cost instead: torch.compile(mode='reduce-overhead') or CUDA graphs for the step.",
        "launch-bound, with most device memory unused and matrix multiplies too small to fill the GPU",
        # a larger batch amortises the per-launch cost: the step loses its launch overhead
        what_if={"launch_bound": 0.0},
        what_if_doc="`launch_bound=0` (a bigger batch amortises the per-launch cost)",
        evidence=DETECTOR, wording="launch_bound",
    ),
    FindingKind(
        "exposed_communication", "Communication is not overlapped with compute",
        "Overlap communication with compute: tune DDP bucket_cap_mb, use gradient_as_bucket_view=True and no_sync() "
        "during accumulation; with FSDP enable backward_prefetch/forward_prefetch; check the interconnect.",
        "communication kernels running with no compute to hide them",
        what_if={"exposed_communication": 0.0}, measured=True,
        evidence="exposed_communication", wording="exposed_communication", job_wording="exposed_communication",
    ),
    FindingKind(
        "cpu_bound", "The GPU waits for other host code",
        "Move host work off the GPU's path: log and compute metrics every N steps, use foreach/fused optimizers, "
        "avoid Python loops over parameters; profile with with_stack=True to find the lines.",
        "other host code (optimizer, logging) between GPU work",
        what_if={"cpu_bound": 0.0}, measured=True, idle_like=True,
        host_title="Host code other than the model dominates the step",
        evidence="cpu_bound", wording="cpu_bound",
    ),
    # busy but not efficient (analysis/efficiency.py): priced by scaling the compute kernels so that
    # they lose the finding's cost (diagnose._efficiency_what_ifs), hence no fixed what-if here
    FindingKind(
        "fp32_gemm", "Matrix multiplies run in fp32 on a GPU with much faster bf16/TF32 units",
        "Run the matrix math in lower precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) for the "
        "forward pass (float16 needs a GradScaler), or at least TF32 with "
        "torch.set_float32_matmul_precision('high'); the evidence lists the fp32 shapes and the saving at each "
        "dtype's peak.",
        "fp32 GEMM/convolution operators (from recorded shapes and dtypes) on a GPU whose bf16/TF32 peak is far higher",
        what_if_doc="compute kernels scaled to lose the fp32 GEMMs' excess time at the bf16/TF32 peak",
        replayed=False,
        evidence=DETECTOR, wording="fp32_gemm",
    ),
    FindingKind(
        "small_gemm", "GEMMs too small to fill the GPU",
        "Give each GEMM more work: a larger batch (or micro-batch), fuse small projections (one GEMM for Q, K and V; "
        "batched GEMMs instead of loops), pad dimensions to multiples of 64/128; the evidence lists the shapes, "
        "their output tiles against the GPU's SM count and the TFLOP/s they reach.",
        "GEMMs whose output tiles leave most SMs idle (wave quantisation) and reach a small share of the peak",
        what_if_doc="compute kernels scaled to lose the small GEMMs' time beyond a well-filled GPU's",
        replayed=False,
        evidence=DETECTOR, wording="small_gemm",
    ),
    FindingKind(
        "unfused_elementwise", "Chains of memory-bound elementwise kernels (unfused)",
        "Fuse elementwise chains into one kernel: torch.compile(model) (Inductor fuses pointwise ops and "
        "normalisations), fused optimizers (fused=True / foreach=True) and fused layers (e.g. fused LayerNorm, "
        "F.scaled_dot_product_attention); each unfused op reads and writes the whole tensor again.",
        "runs of memory-bound elementwise/normalisation kernels that a compiler would fuse",
        what_if_doc="compute kernels scaled to lose the traffic that fusing the chains saves",
        replayed=False,
        evidence=DETECTOR, wording="unfused_elementwise",
    ),
    FindingKind(
        "straggler", "Straggler rank(s): the other ranks wait in their collectives",
        "Find out why the late rank(s) are slow: compare their per-rank reports (data loading, host syncs, "
        "other host work), check the node (a slower or throttling GPU, a noisy neighbour, a slower NIC) and "
        "the data (uneven shards, longer sequences on some ranks: bucket samples by length).",
        "(job findings) some ranks start their collectives late; the others wait inside them",
        job=True,
        evidence=DETECTOR, job_wording="straggler",
    ),
    FindingKind(
        "load_imbalance", "Load imbalance: ranks do unequal amounts of GPU work",
        "Balance the work per rank: equalise batch shapes (pack or bucket variable-length sequences), "
        "rebalance pipeline stages or expert placement, and shard data evenly (drop_last, equal shard sizes).",
        "(job findings) ranks do unequal amounts of GPU compute per step",
        job=True,
        evidence=DETECTOR, job_wording="load_imbalance",
    ),
)
FINDING_BY_NAME: Mapping[str, FindingKind] = MappingProxyType({f.name: f for f in FINDINGS})
#: kinds of single-trace findings, in tie-break order
FINDING_KINDS: tuple[str, ...] = tuple(f.name for f in FINDINGS if not f.job)
#: single-trace finding kinds whose fix the replay models
REPLAYED_FINDINGS: tuple[str, ...] = tuple(f.name for f in FINDINGS if not f.job and f.replayed)
#: single-trace finding kinds read from the breakdown, in the order they are checked
MEASURED_FINDINGS: tuple[str, ...] = tuple(f.name for f in FINDINGS if f.measured)
#: kinds that are idle time (not reported when the GPU is saturated)
IDLE_LIKE: frozenset[str] = frozenset(f.name for f in FINDINGS if f.idle_like)
#: finding kind → title (single-trace kinds)
TITLES: Mapping[str, str] = MappingProxyType({f.name: f.title for f in FINDINGS if not f.job})
#: finding kind → fix (single-trace kinds)
FIXES: Mapping[str, str] = MappingProxyType({f.name: f.fix for f in FINDINGS if not f.job})
#: titles and fixes on a CPU-only trace (no GPU recorded: the words speak of the host)
HOST_TITLES: Mapping[str, str] = MappingProxyType({f.name: f.host_title for f in FINDINGS if f.host_title})
HOST_FIXES: Mapping[str, str] = MappingProxyType({f.name: f.host_fix for f in FINDINGS if f.host_fix})
#: finding kind → the what-if that models fixing it
FINDING_WHAT_IF: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {f.name: f.what_if for f in FINDINGS if f.what_if is not None}
)

#: a job-level finding's title when it differs from the single-trace one
JOB_TITLES: Mapping[str, str] = MappingProxyType({
    **{f.name: f.title for f in FINDINGS if f.job},
    "exposed_communication": FINDING_BY_NAME["exposed_communication"].title + " (all ranks)",
})
#: a job-level finding's fix
JOB_FIXES: Mapping[str, str] = MappingProxyType({**{f.name: f.fix for f in FINDINGS if f.job},
                                                 "exposed_communication": FINDING_BY_NAME["exposed_communication"].fix})


# ------------------------------------------------------------------ docs tables


def _md_table(head: tuple[str, str], rows: list[tuple[str, str]]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines.extend(f"| {a} | {b} |" for a, b in rows)
    return "\n".join(lines) + "\n"


def idle_causes_markdown() -> str:
    """docs/analysis.md: the idle causes and what the host thread was doing."""
    return _md_table(("cause", "the host thread was in"), [(f"`{n}`", BY_NAME[n].doc) for n in IDLE_CAUSES])


def breakdown_markdown() -> str:
    """docs/json-report.md: the breakdown keys."""
    return _md_table(("key", "label in reports"), [(f"`{c.name}`", c.label) for c in BREAKDOWN])


def finding_kinds_markdown() -> str:
    """docs/json-report.md: every finding kind."""
    return _md_table(("kind", "meaning"), [(f"`{f.name}`", f.doc) for f in FINDINGS])


def path_causes_markdown() -> str:
    """docs/critical-path.md: the critical path's causes."""
    return _md_table(("cause", "made of"), [(f"`{c.name}`", c.doc) for c in PATH])


def knobs_markdown() -> str:
    """docs/critical-path.md: the ``--what-if`` names."""
    return _md_table(("cause", "scales"), [(f"`{k.name}`", k.doc) for k in KNOBS])


def finding_what_if_markdown() -> str:
    """docs/critical-path.md: the what-if each finding uses."""
    plain = [f.name for f in FINDINGS if f.what_if is not None and not f.what_if_doc]
    rows = [(", ".join(plain), "that cause at 0")]
    rows.extend((f.name, f.what_if_doc) for f in FINDINGS if f.what_if is not None and f.what_if_doc)
    return _md_table(("finding", "what-if"), rows)

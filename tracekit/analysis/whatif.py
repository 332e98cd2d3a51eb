"""What-if questions on the critical-path graph: how long would a step take without a cause?

Every edge of a step's dependency graph (:mod:`tracekit.analysis.critical_path`) carries one
*tag* saying what its time is made of.  A what-if scales the weights of the edges whose tag
belongs to a cause and recomputes the longest path; the predicted step time is the step's
wall time minus what the path lost.  Because the path is recomputed, overlap is honoured:
removing 40 ms of data loading that ran while the GPU was busy saves nothing, and removing
it from a step whose GPU work is 60 ms predicts max(CPU path, GPU path), never a plain
subtraction.

The causes ``tracekit analyze --what-if CAUSE=FACTOR`` accepts, and the tags each scales, are
declared in :mod:`tracekit.analysis.causes` (:data:`~tracekit.analysis.causes.KNOBS`; listed
in docs/critical-path.md).

A factor multiplies the cause's time: ``0`` removes it, ``0.5`` halves it, ``2`` doubles it.
Waits (GPU → host sync edges) are dependencies, not durations: factor 0 removes the
dependency, any other factor scales the wake-up latency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ..errors import UsageError
from .causes import EDGE_TAGS, FINDING_WHAT_IF, WHAT_IF_CAUSES, LiveSequence

#: what every edge's time is made of (one tag per edge; a view of the registry)
TAGS = LiveSequence(lambda: tuple(EDGE_TAGS))
#: tag → critical-path cause
TAG_CAUSE: Mapping[str, str] = EDGE_TAGS

#: the what-if questions a caller may ask: ``"cause=factor"``, several of them, or a mapping cause → factor
WhatIfSpec = str | Mapping[str, float] | Sequence[str]

#: weight given to a removed dependency: far below any real path, so it is never taken
REMOVED = -(10**15)


@dataclass(frozen=True)
class WhatIf:
    """One question: scale these causes by these factors (all together)."""

    factors: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, factors: Mapping[str, float]) -> WhatIf:
        checked = {}
        for name, factor in factors.items():
            checked[_valid_cause(name)] = _valid_factor(name, factor)
        return cls(tuple(sorted(checked.items())))

    @property
    def label(self) -> str:
        return ", ".join(f"{name}={_fmt(factor)}" for name, factor in self.factors)

    def tag_factors(self) -> dict[str, float]:
        """tag → factor (1 for untouched tags)."""
        out = dict.fromkeys(TAGS, 1.0)
        for name, factor in self.factors:
            for tag in WHAT_IF_CAUSES[name]:
                out[tag] = factor
        return out


@dataclass(frozen=True)
class WhatIfResult:
    """The answer to one :class:`WhatIf`, per step and as a mean over complete steps."""

    what_if: WhatIf
    #: rank, step, complete, wall_ns, path_ns, predicted_path_ns, predicted_step_ns
    per_step: pl.DataFrame
    #: mean wall time of the complete steps, ms
    baseline_step_ms: float | None
    #: mean predicted time of the complete steps, ms
    predicted_step_ms: float | None

    @property
    def saving_ms(self) -> float | None:
        if self.baseline_step_ms is None or self.predicted_step_ms is None:
            return None
        return self.baseline_step_ms - self.predicted_step_ms

    def to_dict(self) -> dict[str, object]:
        return {
            "what_if": dict(self.what_if.factors),
            "label": self.what_if.label,
            "baseline_step_ms": _round(self.baseline_step_ms),
            "predicted_step_ms": _round(self.predicted_step_ms),
            "saving_ms": _round(self.saving_ms),
        }


def parse_what_if(spec: str) -> tuple[str, float]:
    """``"data_loading=0"`` → ``("data_loading", 0.0)``; a bad spec is a :class:`UsageError`."""
    if "=" not in spec:
        raise UsageError(
            f"--what-if expects CAUSE=FACTOR (e.g. data_loading=0), got {spec!r}",
            hint="valid causes: " + ", ".join(WHAT_IF_CAUSES),
        )
    name, _, value = spec.partition("=")
    name = _valid_cause(name.strip())
    try:
        factor = float(value.strip())
    except ValueError:
        raise UsageError(f"--what-if {spec!r}: the factor must be a number (0 removes the cause, 0.5 halves it)") from None
    return name, _valid_factor(name, factor)


def what_if_questions(spec: WhatIfSpec | None) -> list[dict[str, float]]:
    """The what-if questions ``spec`` asks, as ``tracekit analyze --what-if`` asks them: each cause
    scaled on its own and, when there are several, all of them together.

    >>> what_if_questions("data_loading=0")
    [{'data_loading': 0.0}]
    >>> what_if_questions({"data_loading": 0, "host_device_sync": 0.5})
    [{'data_loading': 0.0}, {'host_device_sync': 0.5}, {'data_loading': 0.0, 'host_device_sync': 0.5}]
    """
    if spec is None:
        return []
    pairs: list[tuple[str, float]] = []
    if isinstance(spec, str):
        pairs = [parse_what_if(spec)]
    elif isinstance(spec, Mapping):
        for name, factor in spec.items():
            if isinstance(factor, bool) or not isinstance(factor, (int, float)):
                raise UsageError(f"what_if={{{name!r}: {factor!r}}}: the factor must be a number (0 removes the cause, 0.5 halves it)")
            pairs.extend(WhatIf.of({str(name): float(factor)}).factors)
    else:
        for item in spec:
            if not isinstance(item, str):
                raise UsageError(f"what_if: expected 'cause=factor' strings or a mapping cause → factor, got {item!r}")
            pairs.append(parse_what_if(item))
    questions = [{name: factor} for name, factor in pairs]
    if len(pairs) > 1:
        questions.append(dict(pairs))
    return questions


def scenario_weights(what_if: WhatIf, tags: Iterable[str] = TAGS) -> pl.Expr:
    """The weight of every edge under ``what_if`` (an expression over a graph's edges, which
    hold their time split by tag in ``w_<tag>`` columns and a ``removable`` flag); ``tags``:
    the tags the edges have a column for (a tag without one carries no time)."""
    factors = what_if.tag_factors()
    scaled: pl.Expr = pl.lit(0.0)
    for tag in tags:
        scaled = scaled + pl.col(f"w_{tag}").cast(pl.Float64) * factors[tag]
    gone = pl.col("removable") & (pl.col("tag").replace_strict(factors, default=1.0, return_dtype=pl.Float64) == 0.0)
    return pl.when(gone).then(pl.lit(REMOVED, dtype=pl.Int64)).otherwise(scaled.round(0).cast(pl.Int64))


def finding_what_if(kind: str) -> WhatIf | None:
    spec = FINDING_WHAT_IF.get(kind)
    return None if spec is None else WhatIf.of(spec)


def _valid_cause(name: str) -> str:
    if name not in WHAT_IF_CAUSES:
        raise UsageError(
            f"unknown what-if cause {name!r}",
            hint="valid causes: " + ", ".join(WHAT_IF_CAUSES) + " (e.g. --what-if data_loading=0 --what-if kernels=0.5)",
        )
    return name


def _valid_factor(name: str, factor: float) -> float:
    value = float(factor)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--what-if {name}={factor}: the factor must be a finite number >= 0")
    return value


def _fmt(x: float) -> str:
    return f"{x:g}"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def what_ifs(specs: Iterable[Mapping[str, float]]) -> tuple[WhatIf, ...]:
    return tuple(WhatIf.of(s) for s in specs)

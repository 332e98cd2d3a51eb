"""The Nsight export's NVTX rows: ranges as annotations (with their domain's name), marks as
instants, and the thread names set through NVTX.
"""

from __future__ import annotations

import polars as pl

from tracekit.schema import EVENT_KIND, EventKind

from ._nsight_export import Export
from ._nsight_schema import (
    I64,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_SPEC,
    NVTX_START_END,
    NVTX_THREAD_NAME,
    NVTX_WHERE,
    STR,
    pid_of,
    tid_of,
)

#: autograd sequence number in emit_nvtx range names ("aten::mm, seq = 12, op_id = 40")
_NVTX_SEQ = r"(?:^|, )(?:stashed )?seq = (\d+)"
#: input shapes in emit_nvtx(record_shapes=True) range names ("..., sizes = [[8, 64], [64, 32]]")
_NVTX_SIZES = r", sizes = (\[(?:[^\[\]]|\[[^\[\]]*\])*\])"


def nvtx_rows(export: Export) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(annotation and mark events, NVTX thread names as pid/tid/thread_name)."""
    frame = export.fetch("NVTX_EVENTS", NVTX_SPEC, NVTX_WHERE)
    empty_threads = pl.DataFrame(schema={"pid": I64, "tid": I64, "thread_name": STR})
    if not frame.height:
        return pl.DataFrame(), empty_threads
    frame = export.name(frame, "text_id", "registered").with_columns(
        pl.coalesce("text", "registered").alias("text"), pid_of("gtid").alias("pid"), tid_of("gtid").alias("tid")
    )
    # Domain names: from the creating process first (domain ids are handed out per
    # process), else from any process that created that id.
    created = frame.filter((pl.col("event_type") == NVTX_DOMAIN_CREATE) & pl.col("domain_id").is_not_null())
    own_domains = created.select("pid", "domain_id", pl.col("text").alias("own_domain")).unique(
        ["pid", "domain_id"], keep="last", maintain_order=True
    )
    any_domains = created.select("domain_id", pl.col("text").alias("any_domain")).unique(
        "domain_id", keep="last", maintain_order=True
    )
    threads = (
        frame.filter((pl.col("event_type") == NVTX_THREAD_NAME) & pl.col("text").is_not_null())
        .select("pid", "tid", pl.col("text").alias("thread_name"))
        .unique(["pid", "tid"], keep="last", maintain_order=True)
    )
    is_range = pl.col("event_type").is_in([NVTX_PUSH_POP, NVTX_START_END])
    open_ranges = frame.select((is_range & pl.col("end").is_null()).sum()).item()
    if open_ranges:
        export.warnings.append(f"{open_ranges:,} NVTX ranges never ended within the capture and were dropped")
    # ranges and marks in one pass, in file order (a range and a mark never tie in the
    # canonical sort: their kinds differ)
    is_mark = pl.col("event_type") == NVTX_MARK
    events = frame.filter(
        pl.col("start").is_not_null() & ((is_range & pl.col("end").is_not_null()) | is_mark)
    ).with_columns(
        pl.when(is_mark).then(pl.lit(EventKind.INSTANT.value)).otherwise(pl.lit(EventKind.ANNOTATION.value))
        .cast(EVENT_KIND).alias("kind"),
        pl.when(is_mark).then(pl.lit(0, dtype=I64)).otherwise(pl.col("end") - pl.col("start")).alias("dur_ns"),
    )
    del frame
    named = pl.col("domain_id").fill_null(0) != 0
    if created.height and events.select(named.any()).item():
        events = events.join(own_domains, on=["pid", "domain_id"], how="left", maintain_order="left").join(
            any_domains, on="domain_id", how="left", maintain_order="left"
        )
        domain = pl.when(named).then(pl.coalesce("own_domain", "any_domain")).otherwise(None)
    else:  # the default domain only (or no domain was ever named): null throughout
        domain = pl.lit(None, dtype=STR)
    text = pl.col("text")
    # the emit_nvtx fields are looked for only when some range names carry them
    has_seq, has_sizes = events.select(
        text.str.contains("seq = ", literal=True).any().alias("seq"),
        text.str.contains(", sizes = ", literal=True).any().alias("sizes"),
    ).row(0)
    return (
        events.select(
            "kind",
            text.alias("name"),
            "pid",
            "tid",
            pl.col("start").alias("start_ns"),
            "dur_ns",
            (text.str.extract(_NVTX_SEQ, 1).cast(I64, strict=False) if has_seq else pl.lit(None, dtype=I64))
            .alias("sequence_nr"),
            (text.str.extract(_NVTX_SIZES, 1) if has_sizes else pl.lit(None, dtype=STR)).alias("input_dims"),
            domain.alias("domain"),
        ),
        threads,
    )

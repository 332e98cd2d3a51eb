"""What a Kineto memcpy's name says: its copy direction and the memory kinds it copies between
(``Memcpy HtoD (Pageable -> Device)``), worked out once per distinct name of the trace.
"""

from __future__ import annotations

import polars as pl

from tracekit.schema import MEMCPY_KIND, MEMORY_KIND

#: the copy directions a memcpy's name or ``kind`` argument names
DIRECTIONS = ["HtoD", "DtoH", "DtoD", "HtoH", "PtoP"]


class CopyNames:
    """What a memcpy's name says (its copy direction, source and destination memory), worked
    out once per distinct name of the trace and looked up by an enum of the names after: the
    regular expressions cost about 0.1 ms a call however few the rows, and a trace has a
    handful of memcpy names."""

    def __init__(self) -> None:
        #: each name seen so far → its row in ``said``
        self.rows: dict[str, int] = {}
        #: an enum of the names in row order, made when they change (not on every lookup)
        self.codes: pl.Enum | None = None
        self.said: pl.DataFrame | None = None

    def lookup(self, names: pl.Series) -> tuple[pl.Series, pl.DataFrame]:
        """Each of ``names`` as an index into the second result, which has ``direction``
        (null where the name names none), ``memcpy_kind`` (the direction, or ``unknown``),
        ``src_memory`` and ``dst_memory`` for every name seen so far (a null name says what
        an empty one says: nothing).  The index is an enum of the names: its physical codes
        are the row numbers."""
        if names.null_count():  # (a fill copies the names even when there is nothing to fill)
            names = names.fill_null("")
        index = None if self.codes is None else names.cast(self.codes, strict=False)
        if index is None or index.null_count() or self.said is None:
            # the names not seen before, among the distinct ones (a native value count: a
            # mask of the unknown rows and ``unique`` would be two queries)
            distinct = names.value_counts().get_column(names.name).to_list()
            new = [name for name in distinct if name not in self.rows]
            said = copy_names_said(pl.Series("name", new, dtype=pl.String))
            for name in new:
                self.rows[name] = len(self.rows)
            self.said = said if self.said is None else pl.concat([self.said, said])
            self.codes = pl.Enum(list(self.rows))
            index = names.cast(self.codes)
        return index, self.said



def copy_names_said(names: pl.Series) -> pl.DataFrame:
    """What each memcpy name says: ``direction`` (null where it names none), ``memcpy_kind``
    (the direction, or ``unknown``), ``src_memory`` and ``dst_memory`` (a memory kind's word in
    ``(src -> dst)``, lower-cased, or ``unknown``)."""
    lname = pl.col("name").str.to_lowercase()
    direction = pl.col("name").str.extract(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", 1)
    return names.alias("name").to_frame().select(
        direction.alias("direction"),
        direction.fill_null("unknown").cast(MEMCPY_KIND).alias("memcpy_kind"),
        _memory_kind(lname.str.extract(r"\((\w+)\s*->", 1)).alias("src_memory"),
        _memory_kind(lname.str.extract(r"->\s*(\w+)\)", 1)).alias("dst_memory"),
    )


def _memory_kind(word: pl.Expr) -> pl.Expr:
    """The memory kind a word of a memcpy's name names: one of the kind's own words, else
    ``unknown`` (also when there is no word)."""
    return word.cast(MEMORY_KIND, strict=False).fill_null(pl.lit("unknown", dtype=MEMORY_KIND))

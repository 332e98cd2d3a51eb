"""What a Kineto memcpy's name says: its copy direction and the memory kinds it copies between
(``Memcpy HtoD (Pageable -> Device)``), worked out once per distinct name of the trace.
"""

from __future__ import annotations

import re

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


#: :func:`copy_names_said`'s expressions in Python's ``re`` for ASCII text: the classes
#: spelled out as what polars' (Unicode) ``\w`` and ``\s`` match among ASCII characters
#: (Python's own ``\s`` also matches \x1c-\x1f, polars' does not)
_ASCII_DIRECTION = re.compile(r"HtoD|DtoH|DtoD|HtoH|PtoP")
_ASCII_SOURCE = re.compile(r"\(([0-9A-Za-z_]+)[\t\n\x0b\x0c\r ]*->")
_ASCII_DESTINATION = re.compile(r"->[\t\n\x0b\x0c\r ]*([0-9A-Za-z_]+)\)")
#: at most this many names are read by Python's ``re`` (a few µs each), more by polars
_PYTHON_COPY_NAMES = 256
_COPY_SAID_SCHEMA: dict[str, pl.DataType] = {
    "direction": pl.String(), "memcpy_kind": MEMCPY_KIND, "src_memory": MEMORY_KIND, "dst_memory": MEMORY_KIND
}


def copy_names_said(names: pl.Series, python: bool | None = None) -> pl.DataFrame:
    """What each memcpy name says: ``direction`` (null where it names none), ``memcpy_kind``
    (the direction, or ``unknown``), ``src_memory`` and ``dst_memory`` (a memory kind's word in
    ``(src -> dst)``, lower-cased, or ``unknown``).

    A handful of ASCII names (the usual case: each memcpy name of a trace, once) is read by
    Python's ``re``: polars compiles a regular expression on every call, 0.25 ms each, four
    of them (3 ms a lookup, twice a parse on a typical trace); other names by polars, whose
    answer is the reference (``python``: force one way, for the test comparing the two)."""
    if python is None:
        python = names.len() <= _PYTHON_COPY_NAMES
    texts: list[str] = names.to_list() if python else []
    if python and all(text.isascii() for text in texts):
        memory_words = set(MEMORY_KIND.categories.to_list())

        def word(pattern: re.Pattern[str], text: str) -> str:
            found = pattern.search(text)
            return found.group(1) if found is not None and found.group(1) in memory_words else "unknown"

        directions = [(found.group(0) if (found := _ASCII_DIRECTION.search(text)) else None) for text in texts]
        lowered = [text.lower() for text in texts]
        columns: dict[str, list[str | None]] = {
            "direction": directions,
            "memcpy_kind": [d if d is not None else "unknown" for d in directions],
            "src_memory": [word(_ASCII_SOURCE, text) for text in lowered],
            "dst_memory": [word(_ASCII_DESTINATION, text) for text in lowered],
        }
        # (text columns cast to their enums: a third of the time of enum columns from Python)
        return pl.DataFrame(
            [pl.Series(c, values, dtype=pl.String).cast(_COPY_SAID_SCHEMA[c]) for c, values in columns.items()]
        )
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

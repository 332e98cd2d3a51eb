"""An Nsight Systems export being read: its database, its strings, and what the reading
noted (warnings, the tables read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ._nsight_db import Db
from ._nsight_schema import I64, STR


class Export:
    """The state every table reader shares: the database, the ``StringIds`` lookup (read by
    :meth:`read_strings`), the warnings so far, and the tables read (for the metadata)."""

    def __init__(self, db: Db, shown_path: str, size: int = 0) -> None:
        self.db = db
        self.size = size
        self.shown_path = shown_path
        self.warnings: list[str] = []
        self.read_tables: list[str] = []
        self.strings = pl.DataFrame(schema={"id": I64, "value": STR})

    def read_strings(self, spec: Mapping[str, tuple[str, pl.DataType]]) -> None:
        """The export's ``StringIds`` (id → text; the first text of an id repeated)."""
        self.strings = self.db.fetch("StringIds", spec).unique("id", keep="first")

    def fetch(
        self, table: str, spec: Mapping[str, tuple[str, pl.DataType]], where: Sequence[tuple[str, str]] = ()
    ) -> pl.DataFrame:
        """:meth:`Db.fetch`, the table noted as read where the export has it."""
        if self.db.has(table):
            self.read_tables.append(table)
        return self.db.fetch(table, spec, where)

    def name(self, frame: pl.DataFrame, id_col: str, out: str) -> pl.DataFrame:
        """Resolve a StringIds reference column into ``out``."""
        lookup = self.strings.rename({"id": id_col, "value": out})
        return frame.join(lookup, on=id_col, how="left", maintain_order="left")

    def intervals(self, frame: pl.DataFrame, what: str) -> pl.DataFrame:
        """Drop rows without a start or end (warned), add start_ns/dur_ns."""
        bad = frame.filter(pl.col("start").is_null() | pl.col("end").is_null()).height
        if bad:
            self.warnings.append(f"{bad:,} {what} rows without a start or end time were dropped")
            frame = frame.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
        return frame.with_columns(
            pl.col("start").alias("start_ns"), (pl.col("end") - pl.col("start")).alias("dur_ns")
        ).drop("start", "end")

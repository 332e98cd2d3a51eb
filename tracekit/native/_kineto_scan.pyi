# Type stub of the native scanner built from _kineto_scan.c (its glue: parsers/_kineto_scanner.py).
# A column entry is (name, kind, floats, labels, column, labels column); kind 7 is a time
# column of integers already in nanoseconds (_kineto_scanner._K_TIME_NS).
from typing import Literal

class Column:
    """One column of a scanned chunk (Arrow PyCapsule interface, exported once)."""

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]: ...

class Pool:
    """One parse's freed column memory, reused by the next chunks' columns."""

    def __init__(self) -> None: ...
    def stats(self) -> dict[str, int]: ...

_Columns = tuple[tuple[str, int, int, int, Column | None, Column | None], ...]
_Fallback = tuple[tuple[int, int, int], ...]

def scan(
    chunk: bytes | bytearray | memoryview, pool: Pool | None = None, categories: tuple[str, ...] | None = None
) -> (
    tuple[int, _Columns, _Fallback]
    | tuple[int, _Columns, _Fallback, Column | None]
    | Literal[False]
    | None
): ...

# Type stub of the native scanner built from _kineto_scan.c (see parsers/kineto.py, _scan_columns).
# A column entry is (name, kind, floats, labels, column, labels column); kind 7 is a time
# column of integers already in nanoseconds (kineto._K_TIME_NS).
from typing import Literal

class Column:
    """One column of a scanned chunk (Arrow PyCapsule interface, exported once)."""

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]: ...

def scan(
    chunk: bytes | bytearray | memoryview, /
) -> (
    tuple[int, tuple[tuple[str, int, int, int, Column | None, Column | None], ...], tuple[tuple[int, int, int], ...]]
    | Literal[False]
    | None
): ...

"""Arrow arrays made by tracekit's native modules, handed to polars without a copy."""

from __future__ import annotations


class ArrowCapsules:
    """One exported Arrow array, as its schema and array PyCapsules (what a native module
    returns), wrapped in the object the Arrow PyCapsule protocol asks for: ``pl.Series(...)``
    and ``pl.DataFrame(...)`` then import it in place.  The capsules can be imported once."""

    __slots__ = ("_pair",)

    def __init__(self, pair: tuple[object, object]) -> None:
        self._pair = pair

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self._pair

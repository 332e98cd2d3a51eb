# Type stub of the critical path's longest-path kernel built from _dag.c (see analysis/critical_path.py).
from typing import Any

def longest_paths(
    src: Any, dst: Any, weights: list[Any], offsets: Any, want_path: bool, /
) -> tuple[bytes, bytes, bytes, bytes, bytes]: ...

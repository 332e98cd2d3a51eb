# Type stub of the native whole-file gunzip built from _inflate.c (see parsers/_source.py, open_whole).
from typing import Any

def gunzip(src: Any, dst: Any, library: str, /) -> tuple[int, int] | None: ...

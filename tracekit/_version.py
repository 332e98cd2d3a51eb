"""The single source of tracekit's version (read by pyproject.toml and the cache key)."""

__version__ = "0.1.0"

"""``python -m tracekit`` runs the command line."""

from .cli import entry

entry()

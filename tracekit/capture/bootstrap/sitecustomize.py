"""tracekit capture bootstrap.

``tracekit capture`` puts this directory first on ``PYTHONPATH`` of the command it runs, so
Python imports this module at start-up in every process of the command.  It only arms a hook
that instruments training once ``torch`` is imported (nothing else is imported or changed),
then runs the ``sitecustomize`` module this one shadows, if the environment has one.
"""

from __future__ import annotations

import os
import sys


def _arm() -> None:
    if not os.environ.get("TRACEKIT_CAPTURE"):
        return
    try:
        from tracekit.capture import importhook
    except ImportError:
        # this interpreter cannot import tracekit (another virtual environment): use the
        # copy that started the capture, after everything of this environment
        import json

        try:
            where = json.loads(os.environ["TRACEKIT_CAPTURE"]).get("tracekit_path")
        except (ValueError, AttributeError):
            where = None
        if not where:
            raise
        sys.path.append(where)
        from tracekit.capture import importhook
    importhook.arm()


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _arm()
except Exception as exc:  # never break the user's program
    sys.stderr.write(f"tracekit: capture not armed in this process: {type(exc).__name__}: {exc}\n")
try:
    _run_shadowed_sitecustomize()
except Exception as exc:
    sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")

"""Run tracekit's instrumentation right after ``import torch`` completes.

:func:`arm` puts a finder at the front of ``sys.meta_path``.  When ``torch`` is imported it
finds the real module spec through the other finders, wraps its loader so that, once torch's
own code has run, :func:`tracekit.capture.runtime.activate` is called with the module, and
takes itself off ``sys.meta_path``.  Processes that never import torch pay for one
``find_spec`` call per import and nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

TARGET = "torch"


class _ActivatingLoader:
    """Delegates to torch's loader, then calls ``after(module)`` once torch has executed."""

    def __init__(self, inner: Any, after: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._after = after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        # torch is importable now; instrumentation errors must not fail the user's import
        try:
            self._after(module)
        except Exception as exc:
            sys.stderr.write(f"tracekit: capture disabled in this process: {type(exc).__name__}: {exc}\n")

    def __getattr__(self, name: str) -> Any:  # resource readers, get_filename, is_package...
        return getattr(self._inner, name)


class TorchImportFinder:
    """A one-shot meta path finder that wraps torch's loader (see the module docstring)."""

    def __init__(self, after: Callable[[ModuleType], None], target: str = TARGET) -> None:
        self._after = after
        self._target = target
        self._busy = False

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self._target or self._busy:
            return None
        self._busy = True
        try:
            spec: ModuleSpec | None = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        self.disarm()
        spec.loader = _ActivatingLoader(spec.loader, self._after)  # type: ignore[assignment]
        return spec

    def disarm(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _activate(module: ModuleType) -> None:
    from . import runtime

    runtime.activate(module)


def arm(after: Callable[[ModuleType], None] = _activate) -> TorchImportFinder | None:
    """Install the finder (or, when torch is already imported, call ``after`` now)."""
    already = sys.modules.get(TARGET)
    if already is not None:
        after(already)
        return None
    finder = TorchImportFinder(after)
    sys.meta_path.insert(0, finder)
    return finder

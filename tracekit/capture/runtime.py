"""The instrumented process: the one :class:`~tracekit.capture.session.Session` of a process
started by ``tracekit capture``, created when torch is imported and wired into the process
(torch's hooks, :mod:`tracekit.marks`, forks, SIGTERM, the exception hook)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from .config import CaptureConfig
from .session import Session, _warn

# ---------------------------------------------------------------------- activation

_SESSION: Session | None = None


def current() -> Session | None:
    """The session of this process, if capture is active here."""
    return _SESSION


def activate(torch: Any) -> Session | None:
    """Called once torch is imported in a process started by ``tracekit capture``."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    try:
        config = CaptureConfig.from_environ()
    except ValueError as exc:
        _warn(f"capture disabled: bad TRACEKIT_CAPTURE configuration ({exc})")
        return None
    if config is None:
        return None
    from . import torch_hooks
    from .program import ProgramRecorder

    program = ProgramRecorder(torch, torch_hooks.compiling_check(torch))
    session = Session(
        config,
        backend=torch_hooks.make_backend(torch, config, lambda: _SESSION),
        ranges=torch_hooks.TorchRanges(torch),
        facts=torch_hooks.process_facts(torch, current, program),
    )
    torch_hooks.install(torch, current, program)
    _SESSION = session
    _set_marks(session)

    import atexit

    atexit.register(session.finish)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _wrap_excepthook(session)
    _flush_on_sigterm()
    return session


def _set_marks(session: Session | None) -> None:
    from .. import marks

    marks._set_session(session)


def _after_fork_in_child() -> None:
    # a forked child (DataLoader worker, fork-started rank) never reuses the parent's profiler:
    # if the parent already profiles, the child stays uninstrumented; otherwise it gets a
    # fresh session of its own that starts with its first training activity
    global _SESSION
    parent = _SESSION
    if parent is None:
        return
    if parent.state.started:
        parent.disable()
        _set_marks(None)
        return
    child = Session(parent.config, backend=parent.backend, ranges=parent.ranges, facts=parent.facts)
    _SESSION = child
    _set_marks(child)
    import atexit

    atexit.register(child.finish)


def _flush_on_sigterm() -> None:
    """A launcher stopping its ranks (torchrun after another rank failed) sends SIGTERM, which
    skips ``atexit``: save the recorded window first, then die of SIGTERM as before.  Only
    when nobody handles SIGTERM yet; a handler the script installs later replaces this one."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        session = _SESSION
        if session is not None and session.state.started and not session.finished:
            session.error = session.error or "terminated by SIGTERM"
            session.finish()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def _wrap_excepthook(session: Session) -> None:
    previous = sys.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        current_session = _SESSION
        if current_session is not None:
            current_session.record_exception(exc_type, exc)
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook

"""The Textual app: a loading screen, then overview / timeline / tables modes.

:func:`make_app` builds the app without running it (the seam tests and the CLI use).  The
app only renders analysis results: the input is read and diagnosed by
:func:`tracekit.tui.loader.load_session` (on :mod:`tracekit.pipeline`) in a thread worker, which posts
:class:`~tracekit.tui.messages.LoadProgress` messages for the progress bar; a failure
becomes an error screen with the :class:`~tracekit.errors.TracekitError` message (or, for
a bug, its type and text), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from ..errors import TracekitError
from .bindings import GLOBAL, bindings
from .loader import load_batch_trace, load_session
from .messages import LoadProgress, OpenTimeline
from .model import Focus
from .screens.base import SessionHost, SessionScreen
from .screens.batch import BatchScreen
from .screens.help import HelpScreen
from .screens.job import JobScreen
from .screens.loading import ErrorScreen, LoadingScreen
from .screens.overview import OverviewScreen
from .screens.tables import TablesScreen
from .screens.timeline import TimelineScreen
from .session import LoadedTrace, Session
from .styles import cause_css, cause_variables

#: the app's modes, in the order of their keys (1, 2, 3)
MODES: tuple[tuple[str, Callable[[], SessionScreen]], ...] = (
    ("overview", OverviewScreen),
    ("timeline", TimelineScreen),
    ("tables", TablesScreen),
)


class TracekitApp(App[int]):
    """Browse the diagnosis of a trace, a capture folder or a batch output."""

    CSS_PATH = "app.tcss"
    TITLE = "tracekit"
    BINDINGS: ClassVar[list[BindingType]] = bindings(GLOBAL)  # type: ignore[assignment]

    def __init__(self, source: str, *, session: Session | None = None, cache: bool = True) -> None:
        # the rules that colour each cause, generated from the cause registry as it is now
        TracekitApp.CSS = cause_css()
        super().__init__()
        self.source = source
        self.session_data = session
        self.cache = cache
        #: (trace index, rank) shown by the overview and tables
        self.current: tuple[int, int] = (0, 0)
        #: the error that stopped loading, if any (its exit code is the app's return code)
        self.error: BaseException | None = None
        self._screens: dict[str, SessionScreen] = {}

    # ------------------------------------------------------------ state
    def get_theme_variable_defaults(self) -> dict[str, str]:
        """The theme's variables plus the cause colours (``$cause-<name>``, ``$on-cause``)."""
        return {**super().get_theme_variable_defaults(), **cause_variables()}

    @property
    def session(self) -> Session:
        if self.session_data is None:
            raise RuntimeError("the session is not loaded yet")
        return self.session_data

    @property
    def loaded(self) -> bool:
        return self.session_data is not None

    @property
    def trace(self) -> LoadedTrace:
        return self.session.traces[self.current[0]]

    @property
    def rank(self) -> int:
        return self.current[1]

    def where(self) -> str:
        """Which trace and rank the overview shows, when the input has several."""
        choices = self.session.choices()
        if len(choices) <= 1:
            return f"rank {self.rank}" if self.trace.tables.info.world_size else ""
        i = choices.index(self.current) + 1 if self.current in choices else 1
        label = self.trace.name if len(self.session.traces) > 1 else f"rank {self.rank}"
        if len(self.session.traces) > 1 and len(self.trace.ranks) > 1:
            label += f" rank {self.rank}"
        return f"{label} ({i} of {len(choices)}; r/R: next/previous)"

    def choice_for_rank(self, rank: int, prefer: int) -> tuple[int, int] | None:
        """The (trace, rank) choice for ``rank``, preferring trace ``prefer``."""
        matches = [c for c in self.session.choices() if c[1] == rank]
        for c in matches:
            if c[0] == prefer:
                return c
        return matches[0] if matches else None

    # ------------------------------------------------------------ loading
    def get_default_screen(self) -> Screen[None]:
        return LoadingScreen(self.source)

    def on_mount(self) -> None:
        if self.session_data is not None:
            self._install(self.session_data)
        else:
            self._load()

    @work(thread=True, exclusive=True, group="load", exit_on_error=False, description="read and analyse the input")
    def _load(self) -> Session:
        return load_session(self.source, progress=self._progress, cache=self.cache)

    def _progress(self, fraction: float, text: str) -> None:
        self.post_message(LoadProgress(fraction, text))

    def on_load_progress(self, message: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.progress(message.fraction, message.text)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group not in ("load", "open"):
            return
        if worker.group == "open":
            if event.state == WorkerState.SUCCESS and isinstance(worker.result, LoadedTrace):
                self._add_trace(worker.result)
            elif event.state == WorkerState.ERROR and worker.error is not None:
                error = worker.error
                text = error.render() if isinstance(error, TracekitError) else f"{type(error).__name__}: {error}"
                self.notify(text, title="cannot open this trace", severity="error", timeout=8)
            return
        if event.state == WorkerState.SUCCESS and isinstance(worker.result, Session):
            self._install(worker.result)
        elif event.state == WorkerState.ERROR and worker.error is not None:
            self._fail(worker.error)

    def _fail(self, error: BaseException) -> None:
        self.error = error
        if isinstance(error, TracekitError):
            message = error.render()
        else:
            message = (
                f"tracekit: internal error while opening {self.source}: {type(error).__name__}: {error}\n"
                "  this is a bug in tracekit; please report it with the input that caused it"
            )
        self.push_screen(ErrorScreen(message))

    def _install(self, session: Session) -> None:
        self.session_data = session
        choices = session.choices()
        self.current = choices[0] if choices else (0, 0)
        modes = list(MODES)
        if session.catalog is not None:
            modes.append(("batch", BatchScreen))
        if session.job_model is not None:
            modes.append(("job", JobScreen))
        for name, factory in modes:
            self.add_mode(name, partial(self._make_screen, name, factory))
        self.switch_mode("overview")

    def _make_screen(self, name: str, factory: Callable[[], SessionScreen]) -> SessionScreen:
        screen = factory()
        self._screens[name] = screen
        return screen

    def open_batch_trace(self, path: str) -> None:
        """Open one trace of a batch output (in a worker) and show its overview."""
        for i, t in enumerate(self.session.traces):
            if t.path == path:
                self._select((i, t.ranks[0]))
                self.switch_mode("overview")
                return
        self.notify(f"opening {path}", timeout=3)
        self._open(path)

    @work(thread=True, exclusive=True, group="open", exit_on_error=False, description="open a trace of the batch")
    def _open(self, path: str) -> LoadedTrace:
        return load_batch_trace(self.session.source, path, cache=self.cache)

    def _add_trace(self, trace: LoadedTrace) -> None:
        self.session_data, index = self.session.with_trace(trace)
        self._select((index, self.session.traces[index].ranks[0]))
        self.switch_mode("overview")

    @property
    def return_code_for_exit(self) -> int:
        if isinstance(self.error, TracekitError):
            return self.error.exit_code
        return 1 if self.error is not None else 0

    # ----------------------------------------------------------- actions
    async def action_quit(self) -> None:
        self.exit(self.return_code_for_exit, return_code=self.return_code_for_exit)

    def action_show_overview(self) -> None:
        if self.loaded:
            self.switch_mode("overview")

    def action_show_timeline(self) -> None:
        if self.loaded:
            self.switch_mode("timeline")

    def action_show_tables(self) -> None:
        if self.loaded:
            self.switch_mode("tables")

    def action_show_batch(self) -> None:
        if self.loaded and self.session.catalog is not None:
            self.switch_mode("batch")

    def action_show_job(self) -> None:
        if self.loaded and self.session.job_model is not None:
            self.switch_mode("job")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # the batch screen exists for batch outputs only, the job screen for folders of ranks
        if action == "show_batch":
            return self.loaded and self.session.catalog is not None
        if action == "show_job":
            return self.loaded and self.session.job_model is not None
        return True

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_cycle_rank(self, delta: int) -> None:
        if not self.loaded:
            return
        choices = self.session.choices()
        if len(choices) <= 1:
            self.notify("this input has a single rank", timeout=2)
            return
        i = choices.index(self.current) if self.current in choices else 0
        self._select(choices[(i + delta) % len(choices)])
        self.notify(f"showing {self.trace.name}, rank {self.rank}", timeout=2)

    def _select(self, choice: tuple[int, int], *, skip: SessionScreen | None = None) -> None:
        self.current = choice
        for screen in self._screens.values():
            if screen is not skip and screen.is_mounted:
                screen.selection_changed()

    def show_focus(self, focus: Focus | None) -> None:
        """Switch to the timeline at ``focus`` (a notification when there is nothing to show)."""
        if focus is None:
            self.notify("nothing of this to show on the timeline", timeout=3)
            return
        self.post_message(OpenTimeline(focus))

    def on_open_timeline(self, message: OpenTimeline) -> None:
        focus = message.focus
        self.switch_mode("timeline")
        timeline = self._screens["timeline"]
        if (focus.trace, focus.rank) != self.current:
            self._select((focus.trace, focus.rank), skip=timeline)
        if isinstance(timeline, TimelineScreen):
            timeline.show(focus)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The command palette: the built-in commands, then one entry per tracekit action."""
        yield from super().get_system_commands(screen)
        if not self.loaded:
            return
        specs = [s for s in GLOBAL if s.action != "app.quit"]
        specs += list(getattr(screen, "SPECS", ()))
        for spec in specs:
            if spec.action == "app.show_batch" and self.session.catalog is None:
                continue
            yield SystemCommand(spec.description, f"key: {spec.shown_keys}", partial(self.run_action, spec.action, screen))


if TYPE_CHECKING:
    # the screens reach the app through SessionHost: the type checker holds the app to it
    _HOST: type[SessionHost] = TracekitApp


def make_app(source: str | Path | None = None, *, session: Session | None = None, cache: bool = True) -> TracekitApp:
    """Build (not run) the TUI for ``source`` — a trace file, capture folder or batch output —
    or for an already loaded ``session`` (tests, scripts)."""
    if source is None and session is None:
        raise ValueError("make_app needs a source path or a loaded session")
    name = str(source) if source is not None else session.source if session is not None else ""
    return TracekitApp(name, session=session, cache=cache)


__all__ = ["MODES", "TracekitApp", "make_app"]

"""The TUI's efficiency views: the MFU line of the overview and the Efficiency table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tracekit.tui import make_app
from tracekit.tui.loader import load_session
from tracekit.tui.screens.overview import OverviewScreen
from tracekit.tui.screens.tables import TablesScreen
from tracekit.tui.screens.timeline import TimelineScreen

from . import efficiency_scenarios as sc


def _drive(app: Any, scenario: Any) -> None:
    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(run())


def test_efficiency_tab_lists_operator_shapes_and_opens_the_first_call(tmp_path: Path) -> None:
    path = sc.write(tmp_path / "small.json", sc.small_gemms())
    session = load_session(path, cache=False)
    d = session.traces[0].diagnosis
    app = make_app(session=session)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        assert d.efficiency.headline in str(app.screen.query_one("#summary").render())
        await pilot.press("3", *["right_square_bracket"] * 4)
        screen = app.screen
        assert isinstance(screen, TablesScreen)
        table = screen.active_table()
        assert table.id == "table-efficiency"
        assert table.row_count == 2
        first = table.current_row()
        assert first is not None
        assert (first["shape"], first["calls"]) == ("M=32 N=1024 K=1024", 160)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.focus_spec is not None
        assert app.screen.focus_spec.step == 0

    _drive(app, scenario)

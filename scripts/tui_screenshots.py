"""Write the SVG screenshots of docs/tui.md: each screen of ``tracekit tui`` on a real trace.

    python scripts/tui_screenshots.py            # ../shared/traces/param/resnet_kineto.json.gz
    python scripts/tui_screenshots.py --trace other.json.gz

The app runs headless (Textual ``run_test``) at a fixed size, is driven with key presses as a
user would, and each screen is exported with ``App.export_screenshot`` into docs/img/tui-*.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracekit.tui import make_app  # noqa: E402
from tracekit.tui.loader import load_session  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "param" / "resnet_kineto.json.gz"
OUT = ROOT / "docs" / "img"

#: (file name, keys pressed since the previous shot, what the picture shows)
SHOTS = (
    ("tui-overview", (), "overview"),
    ("tui-finding", ("enter",), "finding detail"),
    ("tui-timeline", ("t",), "timeline at the finding's first gap"),
    ("tui-timeline-zoomed", ("plus", "plus", "up", "left"), "timeline zoomed, an event selected"),
    ("tui-tables", ("3", "right", "right", "right", "right", "right", "s"), "gaps table sorted by idle time"),
    ("tui-syncs", ("right_square_bracket",), "sync points table"),
    ("tui-help", ("question_mark",), "help"),
)


async def _shoot(app: Any, size: tuple[int, int]) -> list[Path]:
    written = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for name, keys, _what in SHOTS:
            if keys:
                await pilot.press(*keys)
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.clear_notifications()
            await pilot.pause()
            path = OUT / f"{name}.svg"
            path.write_text(app.export_screenshot(title=f"tracekit tui · {name.removeprefix('tui-')}"), encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace to show (default: the ResNet trace of ../shared)")
    ap.add_argument("--size", default="120x36", help="terminal size WxH (default 120x36)")
    args = ap.parse_args(argv)
    if not args.trace.exists():
        print(f"{args.trace} not found (the real traces live in ../shared/traces)", file=sys.stderr)
        return 1
    w, h = (int(x) for x in args.size.lower().split("x"))
    session = dataclasses.replace(load_session(args.trace), source=args.trace.name)
    OUT.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(_shoot(make_app(session=session), (w, h))):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Screenshots of HTML reports in a real headless browser (Debian's chromium), and a tiny PNG reader.

Used by the tests (tests/test_report_html.py: the page renders without console errors and the
picture is not empty) and to refresh the screenshots in docs/img/:

    python scripts/screenshot_report.py            # rewrite docs/img/*.png
    python scripts/screenshot_report.py --check    # only render and check them (exit 1 on a problem)

Chromium is installed with ``apt-get install -y chromium`` (scripts/test does it when missing
and it can); without it, the tests skip and this script exits 2.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: flags for running Chromium as root in a container, offline and without a profile
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--enable-logging=stderr",
    "--v=0",
)

#: (output file, trace, width, height); traces under ../shared are used only when present; a trace
#: prefixed ``notebook:`` is shown as a notebook cell shows ``tracekit.analyze(trace)``
SCREENSHOTS = (
    ("docs/img/report_dataloader_stall.png", "sample_traces/synthetic/dataloader_stall.kineto.json", 1280, 1700),
    ("docs/img/notebook_dataloader_stall.png", "notebook:sample_traces/synthetic/dataloader_stall.kineto.json", 1000, 1180),
    ("docs/img/report_host_sync_nsys.png", "sample_traces/synthetic/host_sync.nsys.sqlite", 1280, 1700),
    ("docs/img/report_resnet_real.png", "../shared/traces/param/resnet_kineto.json.gz", 1280, 1900),
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(frozen=True)
class Shot:
    png: Path
    returncode: int
    #: console messages the page produced (CSP violations, errors); empty for a clean page
    console: tuple[str, ...]
    stderr: str


def screenshot(html: Path, png: Path, *, width: int = 1280, height: int = 1600, timeout: float = 120) -> Shot:
    """Render ``html`` in headless Chromium and save a ``width``×``height`` screenshot to ``png``."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tracekit-chromium-") as profile:
        proc = subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--screenshot={png}", html.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    console = tuple(line for line in proc.stderr.splitlines() if ":CONSOLE" in line)
    return Shot(png=png, returncode=proc.returncode, console=console, stderr=proc.stderr)


def dump_dom(html: Path, *, timeout: float = 120) -> str:
    """The DOM Chromium built from ``html`` (serialised), to check what it parsed."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="tracekit-chromium-") as profile:
        proc = subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", html.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    return proc.stdout


# --------------------------------------------------------------------------- PNG


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    #: bytes per pixel (3 RGB, 4 RGBA)
    channels: int
    #: the unfiltered rows, each width*channels bytes
    rows: tuple[bytes, ...]

    def pixels(self) -> set[tuple[int, ...]]:
        """The distinct colours (RGB, alpha dropped)."""
        c = self.channels
        seen: set[tuple[int, ...]] = set()
        for row in self.rows:
            seen.update(zip(row[0::c], row[1::c], row[2::c], strict=True))
        return seen

    def count(self, rgb: tuple[int, int, int]) -> int:
        """How many pixels have exactly this colour."""
        c = self.channels
        n = 0
        for row in self.rows:
            n += sum(1 for px in zip(row[0::c], row[1::c], row[2::c], strict=True) if px == rgb)
        return n


def read_png(path: Path) -> Image:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) with zlib only."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat = 8, []
    width = height = depth = ctype = interlace = -1
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        raise ValueError(f"{path}: unsupported PNG (bit depth {depth}, colour type {ctype}, interlace {interlace})")
    channels = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows: list[bytes] = []
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], raw[start + 1:start + 1 + stride]
        cur = _unfilter(ftype, line, prev, channels)
        rows.append(cur)
        prev = cur
    return Image(width=width, height=height, channels=channels, rows=tuple(rows))


def _add_bytes(a: bytes, b: bytes) -> bytes:
    """Bytewise (a + b) mod 256, all bytes at once (SWAR on Python integers)."""
    n = len(a)
    x, y = int.from_bytes(a, "big"), int.from_bytes(b, "big")
    low = int.from_bytes(b"\x7f" * n, "big")
    high = int.from_bytes(b"\x80" * n, "big")
    return (((x & low) + (y & low)) ^ ((x ^ y) & high)).to_bytes(n, "big")


def _unfilter(ftype: int, line: bytes, prev: bytes, bpp: int) -> bytes:
    if ftype == 0:
        return bytes(line)
    if ftype == 2:  # Up
        return _add_bytes(line, prev)
    out = bytearray(line)
    if ftype == 1:  # Sub: a running sum per channel
        for c in range(bpp):
            out[c::bpp] = bytes(v & 255 for v in accumulate(line[c::bpp]))
        return bytes(out)
    n = len(line)
    if ftype == 3:  # Average
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            out[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        return bytes(out)
    if ftype == 4:  # Paeth
        for i in range(n):
            a = out[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out[i] = (line[i] + pred) & 255
        return bytes(out)
    raise ValueError(f"bad PNG filter type {ftype}")


def hex_rgb(color: str) -> tuple[int, int, int]:
    h = color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


# --------------------------------------------------------------------------- docs/img


#: a page standing in for a notebook: the cell output area's width and margins
NOTEBOOK_PAGE = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>notebook output</title></head>'
    '<body style="margin:0; padding:12px 16px; background:#ffffff; max-width:968px">{}</body></html>'
)


def render_notebook_output(trace: Path, html: Path) -> None:
    """What a notebook shows for ``tracekit.analyze(trace)`` (its ``_repr_html_``), in a plain page."""
    import tracekit

    html.write_text(NOTEBOOK_PAGE.format(tracekit.analyze(trace)._repr_html_()), encoding="utf-8")


def render_report(trace: Path, html: Path) -> None:
    from tracekit.cli import main

    code = main(["analyze", str(trace), "--format", "html", "--out", str(html)])
    if code != 0:
        raise SystemExit(f"tracekit analyze {trace} failed with exit code {code}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="render and check, but do not write docs/img")
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    import os

    os.chdir(REPO)
    problems = 0
    with tempfile.TemporaryDirectory() as tmp:
        for out, trace, width, height in SCREENSHOTS:
            notebook = trace.startswith("notebook:")
            trace = trace.removeprefix("notebook:")
            if not Path(trace).exists():
                print(f"skip {out}: {trace} not present")
                continue
            html = Path(tmp) / (Path(out).stem + ".html")
            (render_notebook_output if notebook else render_report)(Path(trace), html)
            png = Path(tmp) / Path(out).name if args.check else REPO / out
            shot = screenshot(html, png, width=width, height=height)
            colours = len(read_png(png).pixels()) if png.exists() else 0
            ok = shot.returncode == 0 and not shot.console and colours > 50
            problems += not ok
            print(f"{'ok ' if ok else 'BAD'} {out}: exit {shot.returncode}, {len(shot.console)} console messages, {colours} colours")
            for line in shot.console:
                print(f"    {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""``--plot FILE.png``: throughput (x) against p99 latency (y) over the sweep, as a PNG.

Written with numpy and zlib only (no plotting library): a white canvas, axes with tick labels
in a 3x5 pixel font scaled up, the sweep as a polyline with a marker per level.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from repokit.perf.report import PerfReport

WIDTH, HEIGHT = 720, 480
LEFT, RIGHT, TOP, BOTTOM = 80, 30, 30, 60
SCALE = 2
INK = (40, 40, 40)
LINE = (31, 119, 180)
GRID = (225, 225, 225)

_GLYPHS = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    ".": "000000000000010",
    "k": "100101110101101",
    "i": "010000010010010",
    "n": "000110101101101",
    "f": "011010111010010",
    "e": "111101111100111",
    "r": "000101110100100",
    "/": "001001010100100",
    "s": "011100010001110",
    "p": "000110101110100",
    "m": "000111111101101",
    " ": "000000000000000",
    "-": "000000111000000",
    "y": "101101111001111",
    "l": "010010010010011",
    "a": "000111011101111",
    "t": "010111010010011",
    "c": "000111100100111",
}

Canvas = npt.NDArray[np.uint8]


def _text(canvas: Canvas, x: int, y: int, text: str, color: tuple[int, int, int]) -> None:
    for ch in text:
        bits = _GLYPHS.get(ch, _GLYPHS[" "])
        glyph = np.array([int(b) for b in bits], dtype=bool).reshape(5, 3)
        block = np.kron(glyph, np.ones((SCALE, SCALE), dtype=bool))
        h, w = block.shape
        if y >= 0 and y + h <= canvas.shape[0] and x >= 0 and x + w <= canvas.shape[1]:
            canvas[y : y + h, x : x + w][block] = color
        x += (3 + 1) * SCALE


def _text_width(text: str) -> int:
    return len(text) * 4 * SCALE


def _line(
    canvas: Canvas,
    x0: float,
    y0: float,
    x1: float,
    y1: float,
    color: tuple[int, int, int],
    width: int = 1,
) -> None:
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.round(np.linspace(x0, x1, steps)).astype(int)
    ys = np.round(np.linspace(y0, y1, steps)).astype(int)
    for dx in range(-(width // 2), width // 2 + 1):
        for dy in range(-(width // 2), width // 2 + 1):
            cx = np.clip(xs + dx, 0, canvas.shape[1] - 1)
            cy = np.clip(ys + dy, 0, canvas.shape[0] - 1)
            canvas[cy, cx] = color


def _label(value: float) -> str:
    if value >= 10000:
        return f"{value / 1000:.0f}k"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    span = high - low or 1.0
    return [low + span * i / (count - 1) for i in range(count)]


def png_bytes(canvas: Canvas) -> bytes:
    height, width, _ = canvas.shape
    raw = np.zeros((height, width * 3 + 1), dtype=np.uint8)
    raw[:, 1:] = canvas.reshape(height, width * 3)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )


def render_plot(report: PerfReport) -> Canvas:
    canvas = np.full((HEIGHT, WIDTH, 3), 255, dtype=np.uint8)
    points = sorted(
        (r.summary.throughput, r.summary.percentiles_ns.get(99, 0) / 1e6) for r in report.results
    )
    x_max = max([p[0] for p in points] + [1.0]) * 1.1
    y_max = max([p[1] for p in points] + [0.001]) * 1.1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + x / x_max * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - y / y_max * plot_h

    for tick in _ticks(0.0, x_max):
        _line(canvas, px(tick), TOP, px(tick), TOP + plot_h, GRID)
        text = _label(tick)
        _text(canvas, int(px(tick)) - _text_width(text) // 2, TOP + plot_h + 8, text, INK)
    for tick in _ticks(0.0, y_max):
        _line(canvas, LEFT, py(tick), LEFT + plot_w, py(tick), GRID)
        text = _label(tick)
        _text(canvas, LEFT - 8 - _text_width(text), int(py(tick)) - 5, text, INK)
    _line(canvas, LEFT, TOP, LEFT, TOP + plot_h, INK, 2)
    _line(canvas, LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h, INK, 2)
    _text(canvas, LEFT + plot_w // 2 - _text_width("infer/s") // 2, HEIGHT - 24, "infer/s", INK)
    _text(canvas, 8, 8, "p99 latency ms", INK)
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        _line(canvas, px(x0), py(y0), px(x1), py(y1), LINE, 3)
    for x, y in points:
        cx, cy = int(px(x)), int(py(y))
        canvas[max(cy - 4, 0) : cy + 5, max(cx - 4, 0) : cx + 5] = LINE
    return canvas


def write_plot(report: PerfReport, path: Path) -> None:
    path.write_bytes(png_bytes(render_plot(report)))

"""The picture: the panels where their ``gridPos`` puts them, in Grafana's dark style."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from progress_control_apps.tools.dashboard_picture.config import SCRAPE_INTERVAL_S
from progress_control_apps.tools.dashboard_picture.queries import PanelResult, Series

# Grafana's dark theme (v10/v11) and its classic palette.
_CANVAS = "#111217"
_PANEL = "#181b1f"
_BORDER = "#2a2c31"
_TEXT = "#ccccdc"
_TEXT_WEAK = "#9a9aa6"
_GRID = "#25272c"
_PALETTE = (
    "#73bf69",
    "#f2cc0c",
    "#8ab8ff",
    "#ff780a",
    "#f2495c",
    "#5794f2",
    "#b877d9",
    "#705da0",
    "#37872d",
    "#fade2a",
)


def _format_value(value: float, unit: str) -> str:
    """An axis label as Grafana writes it for ``unit`` (``s``, ``ops``, else ``short``)."""
    if unit == "s":
        magnitude = abs(value)
        if magnitude == 0:
            return "0 s"
        for limit, divisor, name in (
            (1e-3, 1e-6, "µs"),
            (1.0, 1e-3, "ms"),
            (60.0, 1.0, "s"),
            (3600.0, 60.0, "min"),
            (86400.0, 3600.0, "hour"),
            (31536000.0, 86400.0, "day"),
        ):
            if magnitude < limit:
                return f"{value / divisor:.3g} {name}"
        return f"{value / 31536000.0:.3g} year"
    scaled, suffix = value, ""
    for divisor, name in ((1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
        if abs(value) >= divisor:
            scaled, suffix = value / divisor, name
            break
    text = f"{scaled:.3g}{suffix}"
    return f"{text} ops/s" if unit == "ops" else text


@dataclass(frozen=True)
class _Canvas:
    """Pixel geometry of the picture: Grafana's grid is 24 columns of 30 px rows, 8 px apart."""

    fig: Any
    width: float
    height: float
    margin: float = 16
    header: float = 96
    row: float = 30
    gap: float = 8

    @property
    def column(self) -> float:
        return (self.width - 2 * self.margin - 23 * self.gap) / 24

    def box(self, left: float, top: float, width: float, height: float) -> tuple[float, ...]:
        """Figure coordinates of a box given in pixels from the top left."""
        return (
            left / self.width,
            1 - (top + height) / self.height,
            width / self.width,
            height / self.height,
        )

    def rectangle(self, left: float, top: float, width: float, height: float, face: str) -> None:
        from matplotlib.patches import Rectangle

        x, y, w, h = self.box(left, top, width, height)
        self.fig.patches.append(
            Rectangle(
                (x, y),
                w,
                h,
                transform=self.fig.transFigure,
                facecolor=face,
                edgecolor=_BORDER,
                linewidth=1,
                zorder=-10,
            )
        )

    def text(self, left: float, top: float, text: str, **style: Any) -> Any:
        """Text whose baseline-centre line is ``top`` pixels down; returns its right edge."""
        artist = self.fig.text(left / self.width, 1 - top / self.height, text, va="center", **style)
        extent = artist.get_window_extent(renderer=self.fig.canvas.get_renderer())
        return left + extent.width * self.width / self.fig.bbox.width


def _draw_header(canvas: _Canvas, title: str, start: float, end: float) -> None:
    """Breadcrumb and title, the two variables at All, the absolute time range."""
    right = canvas.text(canvas.margin, 22, "Home  /  Dashboards  /  ", color=_TEXT_WEAK, size=10)
    canvas.text(right, 22, title, color=_TEXT, size=10, weight="bold")
    fmt = "%Y-%m-%d %H:%M:%S"
    span = (
        f"{datetime.fromtimestamp(start, UTC).strftime(fmt)} to "
        f"{datetime.fromtimestamp(end, UTC).strftime(fmt)} UTC"
    )
    canvas.fig.text(
        1 - canvas.margin / canvas.width,
        1 - 22 / canvas.height,
        span,
        color=_TEXT,
        size=9,
        ha="right",
        va="center",
    )
    x = canvas.margin
    for label, value in (("Data source", "Prometheus"), ("Namespace", "All")):
        for text, face in ((label, "#22252b"), (value, _CANVAS)):
            right = canvas.text(x + 10, 58, text, color=_TEXT, size=9)
            canvas.rectangle(x, 44, right + 10 - x, 28, face)
            x = right + 10
        x += 8


def _draw_panel(canvas: _Canvas, result: PanelResult, start: float, end: float) -> None:
    """One time series panel where its ``gridPos`` puts it: title, axes, lines, legend."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    panel = result.panel
    grid = panel["gridPos"]
    left = canvas.margin + grid["x"] * (canvas.column + canvas.gap)
    top = canvas.header + grid["y"] * (canvas.row + canvas.gap)
    width = grid["w"] * canvas.column + (grid["w"] - 1) * canvas.gap
    height = grid["h"] * canvas.row + (grid["h"] - 1) * canvas.gap
    canvas.rectangle(left, top, width, height, _PANEL)
    canvas.text(left + 10, top + 16, panel["title"], color=_TEXT, size=10)
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    series = result.series
    rows = _legend_rows(series, width)
    axis_px = 84 if unit == "ops" else 58
    plot_left, plot_right = left + axis_px, left + width - 14
    plot_top, plot_bottom = top + 34, top + height - 24 - (20 * rows + 4 if series else 0)
    ax = canvas.fig.add_axes(
        canvas.box(plot_left, plot_top, plot_right - plot_left, plot_bottom - plot_top)
    )
    ax.set_facecolor(_PANEL)
    ax.patch.set_alpha(0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.grid(True, color=_GRID, linewidth=1)
    ax.set_axisbelow(True)
    ax.tick_params(colors=_TEXT_WEAK, labelsize=8, length=0, pad=6)
    if not series:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center",
                color=_TEXT_WEAK, size=13)  # fmt: skip
        return
    ax.set_xlim(_date(start), _date(end))
    every = _minute_step(end - start)
    ax.xaxis.set_major_locator(
        mdates.MinuteLocator(byminute=range(0, 60, every), tz=UTC)  # type: ignore[no-untyped-call]
    )
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _format_value(v, unit)))
    finite: list[float] = []
    for index, s in enumerate(series):
        times, values = _with_gaps(s.times, s.values)
        color = _PALETTE[index % len(_PALETTE)]
        ax.plot([_date(t) for t in times], values, color=color, linewidth=1.2, label=s.legend)
        finite += [v for v in values if math.isfinite(v)]
    if finite and min(finite) >= 0:
        ax.set_ylim(bottom=0, top=max(finite) * 1.1 if max(finite) > 0 else 1)
    # Grafana's legend flows in rows; matplotlib fills columns: hand it the items column by column.
    ncol = math.ceil(len(series) / rows)
    handles, labels = ax.get_legend_handles_labels()
    order = [r * ncol + c for c in range(ncol) for r in range(rows) if r * ncol + c < len(series)]
    legend = ax.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="upper left",
        bbox_to_anchor=(
            -(axis_px - 10) / (plot_right - plot_left),
            -22 / (plot_bottom - plot_top),
        ),
        ncol=ncol,
        frameon=False,
        fontsize=8,
        handlelength=1.4,
        handletextpad=0.5,
        columnspacing=1.8,
        borderaxespad=0,
    )
    for text in legend.get_texts():
        text.set_color(_TEXT)
    for line in legend.get_lines():
        line.set_linewidth(3)


def render(
    dashboard: Mapping[str, Any],
    panels: Sequence[PanelResult],
    start: float,
    end: float,
    path: Path,
) -> Path:
    """The dashboard as Grafana lays it out, in its dark theme, as a 256-colour PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 1600.0
    probe = _Canvas(None, width, 0)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    height = probe.header + rows * (probe.row + probe.gap) - probe.gap + probe.margin
    dpi = 100
    plt.rcParams["font.family"] = "DejaVu Sans"
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor=_CANVAS)
    canvas = _Canvas(fig, width, height)
    _draw_header(canvas, dashboard["title"], start, end)
    for result in panels:
        _draw_panel(canvas, result, start, end)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, facecolor=_CANVAS)
    plt.close(fig)
    _quantize(path)
    return path


def _date(t: float) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(t, UTC)))  # type: ignore[no-untyped-call]


def _minute_step(span_s: float) -> int:
    minutes = span_s / 60
    return next((step for step in (1, 2, 5, 10, 15, 30) if minutes / step <= 8), 60)


def _legend_rows(series: Sequence[Series], width_px: float) -> int:
    rows, used = 1, 0.0
    for s in series:
        item = len(s.legend) * 5.6 + 44
        if used and used + item > width_px - 20:
            rows, used = rows + 1, 0.0
        used += item
    return rows


def _with_gaps(times: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """A NaN where two samples are more than two steps apart, so the line breaks there."""
    out_t: list[float] = []
    out_v: list[float] = []
    for t, v in zip(times, values, strict=True):
        if out_t and t - out_t[-1] > 2 * SCRAPE_INTERVAL_S:
            out_t.append(out_t[-1] + SCRAPE_INTERVAL_S)
            out_v.append(math.nan)
        out_t.append(t)
        out_v.append(v)
    return out_t, out_v


def _quantize(path: Path) -> None:
    """A 256-colour PNG: the picture is flat colours and thin lines."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)

"""The main job's picture: stream time (and Spark's watermark) against wall clock, with and
without progress control."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers and CI
import matplotlib.pyplot as plt

__all__ = ["Sample", "plot_time"]


@dataclass(frozen=True)
class Sample:
    """One observation, in seconds since the run started (``None``: not known yet)."""

    wall_s: float
    stream_time_s: float | None
    watermark_s: float | None


def plot_time(
    runs: Mapping[str, Sequence[Sample]],
    data_stopped_s: float,
    path: Path,
    title: str,
) -> Path:
    """One panel per run: wall clock (the diagonal), the runtime's stream time and Spark's
    watermark; a vertical line where the producer stopped sending data."""
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.5), sharey=True)
    panels = [axes] if len(runs) == 1 else list(axes)
    for ax, (name, samples) in zip(panels, runs.items(), strict=True):
        wall = [s.wall_s for s in samples]
        ax.plot(wall, wall, color="0.7", linestyle="--", label="wall clock")
        ax.plot(
            [s.wall_s for s in samples if s.stream_time_s is not None],
            [s.stream_time_s for s in samples if s.stream_time_s is not None],
            label="runtime stream time (slowest task)",
            linewidth=2,
        )
        ax.plot(
            [s.wall_s for s in samples if s.watermark_s is not None],
            [s.watermark_s for s in samples if s.watermark_s is not None],
            label="Spark watermark",
            linewidth=2,
        )
        ax.axvline(data_stopped_s, color="tab:red", linestyle=":", label="data stops")
        ax.set_title(name)
        ax.set_xlabel("wall clock (s since start)")
        ax.grid(alpha=0.3)
    panels[0].set_ylabel("event time (s since start)")
    panels[0].legend(loc="upper left", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["interleaved"]


def interleaved(
    run: Callable[[str], float], names: Sequence[str], repeats: int, *, warm_up: bool = False
) -> dict[str, list[float]]:
    """``run(name)`` for every variant ``repeats`` times, in an order rotating each round so a
    drift in the machine's load hits every variant alike; with ``warm_up``, each once first,
    untimed. Returns each variant's figures in run order."""
    if warm_up:
        for name in names:
            run(name)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repeats):
        shift = rep % len(names)
        for name in [*names[shift:], *names[:shift]]:
            figures[name].append(run(name))
    return figures

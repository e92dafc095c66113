"""The windowed built-in aggregations without a broker: ``count()``, ``sum()``, ``min()`` and
``max()``, and a user's ``reduce(operator.add)``, ``reduce(min)`` or ``reduce(max)``, mark
their aggregation as the built-in and fuse with a suppression below them; any other reducer, or
sliding windows, stay a chain."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest

from streams_runtime import (
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.fused.windowed_builtin import fusable_window_aggregate
from streams_runtime.processors import (
    SessionAggregateProcessor,
    SlidingWindowAggregateProcessor,
    TimeWindowAggregateProcessor,
)
from streams_runtime.serdes import Float

WINDOWS = [SessionWindows(gap_ms=1_000), TimeWindows(size_ms=1_000, advance_ms=500)]

AGGREGATIONS: list[tuple[str | None, Callable[[Any], Any]]] = [
    ("count", lambda windowed: windowed.count()),
    ("sum", lambda windowed: windowed.sum()),
    ("min", lambda windowed: windowed.min()),
    ("max", lambda windowed: windowed.max()),
    ("sum", lambda windowed: windowed.reduce(operator.add)),
    ("min", lambda windowed: windowed.reduce(min)),
    ("max", lambda windowed: windowed.reduce(max)),
    (None, lambda windowed: windowed.reduce(lambda a, b: a + b)),
    (None, lambda windowed: windowed.reduce(operator.mul)),
]


def _processors(windows: Any, aggregate: Callable[[Any], Any]) -> list[Any]:
    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by_key(value_serde=Float())
    aggregate(grouped.windowed_by(windows)).suppress(until_window_closes()).to_stream().to("out")
    [sub] = builder.build("app").subtopologies
    _, processors = sub.instantiate()
    return processors


@pytest.mark.parametrize("windows", WINDOWS, ids=["session", "hopping"])
@pytest.mark.parametrize(("builtin", "aggregate"), AGGREGATIONS)
def test_a_built_in_aggregation_is_marked_and_fuses(
    windows: Any, builtin: str | None, aggregate: Callable[[Any], Any]
) -> None:
    processors = _processors(windows, aggregate)
    [aggregation] = [
        p
        for p in processors
        if isinstance(p, SessionAggregateProcessor | TimeWindowAggregateProcessor)
    ]
    assert aggregation.builtin == builtin
    chain = fusable_window_aggregate(processors)
    assert (chain is not None) == (builtin is not None)
    if chain is not None:
        assert chain[1] is aggregation


def test_sliding_windows_stay_a_chain() -> None:
    processors = _processors(SlidingWindows(time_difference_ms=1_000), lambda w: w.sum())
    assert any(isinstance(p, SlidingWindowAggregateProcessor) for p in processors)
    assert fusable_window_aggregate(processors) is None


@pytest.mark.parametrize("windows", WINDOWS, ids=["session", "hopping"])
@pytest.mark.parametrize(("name", "reducer"), [("sum", operator.add), ("min", min), ("max", max)])
def test_sum_min_and_max_are_reduce_by_add_min_and_max(
    windows: Any, name: str, reducer: Callable[[Any, Any], Any]
) -> None:
    processors = _processors(windows, lambda windowed: getattr(windowed, name)())
    [aggregation] = [p for p in processors if hasattr(p, "builtin")]
    aggregator = aggregation._aggregator
    assert aggregator.reducer is reducer
    assert aggregator(None, 2.0, None) == 2.0  # the first value as it is
    assert aggregator(None, 2.0, 1.0) == reducer(1.0, 2.0)

"""The windowed aggregations without a broker: ``count()``, ``sum()``, ``min()`` and ``max()``,
and a user's ``reduce(operator.add)``, ``reduce(min)`` or ``reduce(max)``, are recorded as the
built-in they are, any other reducer as a reduce, and the native core's rewrite
(:mod:`streams_runtime.fused.planner`) fuses each with a suppression below it when the topology
is built, as ``describe()`` shows, a reduce or an ``aggregate`` with the user's functions too;
sliding windows, a sub-topology of two topics or with user processors, and stores with
context-aware serdes, stay a chain."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest

from progress_control.settings import load_settings
from streams_runtime import (
    RuntimeSettings,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.fused.window_aggregate import FusedWindowAggregate
from streams_runtime.operations import WindowedAggregation
from streams_runtime.processor import Processor
from streams_runtime.serdes import Float
from streams_runtime.topology import Topology
from tests.streams_runtime.test_serde_context import Recording

WINDOWS = [SessionWindows(gap_ms=1_000), TimeWindows(size_ms=1_000, advance_ms=500)]


def _users_aggregate(windowed: Any) -> Any:
    initializer, adder = (lambda: 0), (lambda _k, v, a: a + v)
    if isinstance(windowed.windows, SessionWindows):
        return windowed.aggregate(initializer, adder, lambda _k, a, b: a + b)
    return windowed.aggregate(initializer, adder)


AGGREGATIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("count", lambda windowed: windowed.count()),
    ("sum", lambda windowed: windowed.sum()),
    ("min", lambda windowed: windowed.min()),
    ("max", lambda windowed: windowed.max()),
    ("sum", lambda windowed: windowed.reduce(operator.add)),
    ("min", lambda windowed: windowed.reduce(min)),
    ("max", lambda windowed: windowed.reduce(max)),
    ("reduce", lambda windowed: windowed.reduce(lambda a, b: a + b)),
    ("reduce", lambda windowed: windowed.reduce(operator.mul)),
    ("aggregate", _users_aggregate),
]


def _settings(*, native_core: bool = True) -> RuntimeSettings:
    return load_settings(
        RuntimeSettings, application_id="app", bootstrap_servers="x:9092", native_core=native_core
    )


def _builder(
    windows: Any,
    aggregate: Callable[[Any], Any],
    *,
    topics: tuple[str, ...] = ("in",),
    value_serde: Any = None,
) -> StreamsBuilder:
    builder = StreamsBuilder()
    grouped = builder.stream(list(topics)).group_by_key(value_serde=value_serde or Float())
    aggregate(grouped.windowed_by(windows)).suppress(until_window_closes()).to_stream().to("out")
    return builder


def _fused(topology: Topology) -> list[Any]:
    return [n for sub in topology.subtopologies for n in sub.nodes if n.fuses]


@pytest.mark.parametrize("windows", WINDOWS, ids=["session", "hopping"])
@pytest.mark.parametrize(("kind", "aggregate"), AGGREGATIONS)
def test_a_built_in_aggregation_is_recorded_and_fuses(
    windows: Any, kind: str, aggregate: Callable[[Any], Any]
) -> None:
    builder = _builder(windows, aggregate)
    [aggregation] = [
        n.operation
        for n in builder._graph._nodes
        if n.operation is not None and isinstance(n.operation, WindowedAggregation)
    ]
    assert aggregation.aggregation.kind == kind
    topology = builder.build("app", _settings())
    fused = _fused(topology)
    assert len(fused) == 1
    described = topology.describe()
    [node] = fused
    assert isinstance(node.factory(), FusedWindowAggregate)
    assert {s.name for s in node.stores} == {s.name for s in topology.subtopologies[0].stores}
    assert all(not s.cached for s in node.stores)  # the operator keeps its own state
    shape = "session" if isinstance(windows, SessionWindows) else "time-window"
    assert f"(native {shape} {kind}: KSTREAM-SOURCE-" in described


@pytest.mark.parametrize("windows", WINDOWS, ids=["session", "hopping"])
def test_the_chain_stays_where_the_native_core_is_off_and_the_builder_keeps_its_nodes(
    windows: Any,
) -> None:
    builder = _builder(windows, lambda w: w.count())
    nodes = [(n, list(n.parents), list(n.children)) for n in builder._graph._nodes]
    assert _fused(builder.build("app", _settings()))
    chain = builder.build("app", _settings(native_core=False))
    assert not _fused(chain)
    assert not _fused(builder.build("app"))
    assert [(n, n.parents, n.children) for n in builder._graph._nodes] == nodes
    assert [n.name for n in chain.subtopologies[0].nodes] == [n.name for n, _, _ in nodes]


def test_sliding_windows_stay_a_chain() -> None:
    builder = _builder(SlidingWindows(time_difference_ms=1_000), lambda w: w.sum())
    assert not _fused(builder.build("app", _settings()))


def test_a_source_of_two_topics_stays_a_chain() -> None:
    builder = _builder(WINDOWS[0], lambda w: w.count(), topics=("a", "b"))
    assert not _fused(builder.build("app", _settings()))


def test_steps_on_values_and_a_table_join_fuse_with_the_aggregation() -> None:
    """filter, map_values, peek and a stream-table join above the aggregation join the fused
    node; the table's source, another topic of the sub-topology, stays as it is."""
    builder = StreamsBuilder()
    rows = builder.table("rows")
    (
        builder.stream("in")
        .filter(lambda _k, v: v > 0)
        .map_values(lambda v: v * 2)
        .peek(print)
        .join(rows, lambda v, row: v + row)
        .group_by_key(value_serde=Float())
        .windowed_by(WINDOWS[0])
        .sum()
        .suppress(until_window_closes())
        .to_stream()
        .to("out")
    )
    topology = builder.build("app", _settings())
    (fused,) = _fused(topology)
    assert [name.split("-")[1] for name in fused.fuses] == [
        "SOURCE",
        "FILTER",
        "MAPVALUES",
        "PEEK",
        "JOIN",
        "SESSION",
        "SUPPRESS",
    ]
    assert fused.uses_stores == ("KTABLE-SOURCE-STORE-0000000001",)
    (sub,) = topology.subtopologies
    assert sub.source_topics == ("rows", "in")
    assert "KTABLE-SOURCE-0000000002" in [node.name for node in sub.nodes]


def test_a_step_with_another_child_ends_the_chain() -> None:
    """The aggregation is not fused below a step with two children; the source and the step
    are, as batched stateless steps, the parent of both children."""
    builder = StreamsBuilder()
    filtered = builder.stream("in").filter(lambda _k, v: v > 0)
    filtered.to("all")
    filtered.group_by_key(value_serde=Float()).windowed_by(WINDOWS[0]).count().suppress(
        until_window_closes()
    ).to_stream().to("out")
    (fused,) = _fused(builder.build("app", _settings()))
    assert fused.runs_as == "batched stateless steps"
    assert fused.fuses == ("KSTREAM-SOURCE-0000000000", "KSTREAM-FILTER-0000000001")
    assert [child.name for child in fused.children] == [
        "KSTREAM-SINK-0000000002",
        "KSTREAM-SESSION-AGGREGATE-0000000004",
    ]


def test_map_and_select_key_batch_with_the_steps_before_a_sink() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("in")
        .filter(lambda _k, v: v > 0)
        .select_key(lambda _k, v: v)
        .map(lambda k, v: (v, k))
        .map_values(str)
        .to("out")
    )
    (fused,) = _fused(builder.build("app", _settings()))
    assert fused.runs_as == "batched stateless steps"
    assert len(fused.fuses) == 5
    assert [child.name for child in fused.children] == ["KSTREAM-SINK-0000000005"]
    assert not _fused(builder.build("app", _settings(native_core=False)))


def test_a_sub_topology_with_a_user_processor_stays_a_chain() -> None:
    class Passing(Processor[Any, Any, Any, Any]):
        def process(self, record: Any) -> None:
            self.context.forward(record)

    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.group_by_key(value_serde=Float()).windowed_by(WINDOWS[0]).count().suppress(
        until_window_closes()
    ).to_stream().to("out")
    stream.process(Passing).to("other")
    assert not _fused(builder.build("app", _settings()))


def test_stores_with_context_aware_serdes_stay_a_chain() -> None:
    builder = _builder(WINDOWS[0], lambda w: w.sum(), value_serde=Recording())
    assert not _fused(builder.build("app", _settings()))


@pytest.mark.parametrize("windows", WINDOWS, ids=["session", "hopping"])
@pytest.mark.parametrize(("name", "reducer"), [("sum", operator.add), ("min", min), ("max", max)])
def test_sum_min_and_max_are_reduce_by_add_min_and_max(
    windows: Any, name: str, reducer: Callable[[Any, Any], Any]
) -> None:
    builder = _builder(windows, lambda windowed: getattr(windowed, name)())
    [sub] = builder.build("app").subtopologies
    _, processors = sub.instantiate()
    [aggregation] = [p for p in processors if hasattr(p, "_aggregator")]
    aggregator = aggregation._aggregator
    assert aggregator.reducer is reducer
    assert aggregator(None, 2.0, None) == 2.0  # the first value as it is
    assert aggregator(None, 2.0, 1.0) == reducer(1.0, 2.0)

"""Cogrouped aggregations (KIP-150 ``cogroup``) on the ``TopologyTestDriver``: several grouped
streams into one table through one shared store, each with its own aggregator; a repartitioned
input; time and session windows, whose per-input processors keep their own stream time; ticks
passing through to close windows and to the sinks. The broker run is
tests/streams_runtime/dsl/test_cogroup_broker.py; the comparison with Kafka Streams is the
``cogroup`` conformance cases (tests/conformance)."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import (
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    TopologyError,
    until_window_closes,
)
from streams_runtime.serdes import Json, String
from streams_runtime.testing import TopologyTestDriver

DROPPED = "streams_dropped_records"


def _builder() -> StreamsBuilder:
    return StreamsBuilder(default_key_serde=String(), default_value_serde=String())


def _clicks(_key: str, value: str, aggregate: str) -> str:
    return f"{aggregate}c{value}"


def _views(_key: str, value: str, aggregate: str) -> str:
    return f"{aggregate}v{value}"


def test_cogroup_aggregates_both_inputs_into_one_table() -> None:
    builder = _builder()
    clicks = builder.stream("clicks").group_by_key()
    views = builder.stream("views").group_by_key()
    table = clicks.cogroup(_clicks).cogroup(views, _views).aggregate(lambda: "")
    table.to_stream().to("out")
    topology = builder.build("app").describe()
    # Kafka Streams' names: the store first, an aggregation per input, then the merge.
    assert "COGROUPKSTREAM-AGGREGATE-0000000003" in topology
    assert "COGROUPKSTREAM-AGGREGATE-0000000004" in topology
    assert "COGROUPKSTREAM-MERGE-0000000005" in topology
    assert "stores [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002]" in topology
    assert topology.startswith("Sub-topology 0: sources clicks, views")
    with TopologyTestDriver(builder) as driver:
        c = driver.create_input_topic("clicks", String(), String())
        v = driver.create_input_topic("views", String(), String())
        out = driver.create_output_topic("out", String(), String())
        c.pipe_input("a", "1", timestamp=1000, headers=[("id", b"c1")])
        v.pipe_input("a", "2", timestamp=900)  # older: the aggregate keeps the latest time
        v.pipe_input("b", "3", timestamp=1100)
        c.pipe_input("a", None, timestamp=1200)  # a null value is dropped
        c.pipe_input(None, "4", timestamp=1200)  # and so is a null key
        records = out.read_records()
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            ("a", "c1", 1000),
            ("a", "c1v2", 1000),
            ("b", "v3", 1100),
        ]
        assert records[0].headers == [("id", b"c1")]
        store = driver.get_key_value_store("COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002")
        assert store.get_with_timestamp("a") == ("c1v2", 1000)
        name = "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002"
        assert driver.metrics.total(DROPPED, store=name, reason="null-value") == 1
        assert driver.metrics.total(DROPPED, store=name, reason="null-key") == 1


def test_named_cogroup_and_a_repartitioned_input() -> None:
    builder = _builder()
    orders = builder.stream("orders").group_by_key()
    # Payments are keyed by payment id: regrouped by customer through a repartition topic.
    payments = (
        builder.stream("payments", value_serde=Json())
        .select_key(lambda _id, payment: payment["customer"])
        .group_by_key(value_serde=Json())
    )
    (
        orders.cogroup(lambda _k, order, total: total + 1)
        .cogroup(payments, lambda _k, payment, total: total - payment["amount"])
        .aggregate(lambda: 0, value_serde=Json(), name="balance", store_name="balances")
        .to_stream()
        .to("balances-out", value_serde=Json())
    )
    topology = builder.build("app").describe()
    assert "balance-cogroup-agg-0" in topology
    assert "balance-cogroup-agg-1" in topology
    assert "balance-cogroup-merge" in topology
    assert "-repartition" in topology
    with TopologyTestDriver(builder) as driver:
        o = driver.create_input_topic("orders", String(), String())
        pay = driver.create_input_topic("payments", String(), Json())
        out = driver.create_output_topic("balances-out", String(), Json())
        o.pipe_input("ann", "o1", timestamp=10)
        pay.pipe_input("p1", {"customer": "ann", "amount": 5}, timestamp=20)
        o.pipe_input("bob", "o2", timestamp=30)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("ann", 1, 10),
            ("ann", -4, 20),
            ("bob", 1, 30),
        ]
        assert driver.get_key_value_store("balances").get("ann") == -4


def test_tumbling_cogroup_suppressed_closes_windows_on_ticks() -> None:
    builder = _builder()
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by_key()
    (
        a.cogroup(_clicks)
        .cogroup(b, _views)
        .windowed_by(TimeWindows.of_size(1000, grace=0))
        .aggregate(lambda: "")
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, agg: (f"{w.key}@{w.start}", agg))
        .to("finals")
    )
    with TopologyTestDriver(builder) as driver:
        ta = driver.create_input_topic("a", String(), String())
        tb = driver.create_input_topic("b", String(), String())
        finals = driver.create_output_topic("finals", String(), String())
        ta.pipe_input("k", "1", timestamp=100)
        tb.pipe_input("k", "2", timestamp=200)
        assert finals.read_key_values() == []
        tb.pipe_input("k", "3", timestamp=1100)  # closes [0, 1000): end + grace <= 1100
        assert finals.read_key_values() == [("k@0", "c1v2")]
        # Input b went quiet: a tick on either input closes [1000, 2000) at 2000.
        ta.pipe_tick(1999)
        assert finals.read_key_values() == []
        ta.pipe_tick(2000)
        assert finals.read_key_values() == [("k@1000", "v3")]
        assert finals.read_ticks()  # and ticks reach the output


def test_each_input_judges_lateness_by_its_own_stream_time() -> None:
    """As Kafka Streams' per-input processors do: b's record at 100 is late for a's stream
    time (1500), not for b's own (200)."""
    builder = _builder()
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by_key()
    (
        a.cogroup(_clicks)
        .cogroup(b, _views)
        .windowed_by(TimeWindows.of_size(1000, grace=0))
        .aggregate(lambda: "", name="w")
        .to_stream()
        .map(lambda w, agg: (f"{w.key}@{w.start}", agg))
        .to("updates")
    )
    with TopologyTestDriver(builder) as driver:
        ta = driver.create_input_topic("a", String(), String())
        tb = driver.create_input_topic("b", String(), String())
        updates = driver.create_output_topic("updates", String(), String())
        tb.pipe_input("k", "1", timestamp=200)
        ta.pipe_input("k", "2", timestamp=1500)
        tb.pipe_input("k", "3", timestamp=100)  # b's time is 200: window [0, 1000) is open
        ta.pipe_input("k", "4", timestamp=100)  # a's time is 1500: late
        assert updates.read_key_values() == [
            ("k@0", "v1"),
            ("k@1000", "c2"),
            ("k@0", "v1v3"),
        ]


def test_session_cogroup_merges_sessions_of_both_inputs() -> None:
    builder = _builder()
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by_key()
    (
        a.cogroup(_clicks)
        .cogroup(b, _views)
        .windowed_by(SessionWindows(gap_ms=100, grace_ms=500))
        .aggregate(lambda: "", lambda _k, left, right: left + right)
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, agg: (f"{w.key}@{w.start}-{w.end}", agg))
        .to("sessions")
    )
    with TopologyTestDriver(builder) as driver:
        ta = driver.create_input_topic("a", String(), String())
        tb = driver.create_input_topic("b", String(), String())
        sessions = driver.create_output_topic("sessions", String(), String())
        ta.pipe_input("k", "1", timestamp=1000)
        ta.pipe_input("k", "2", timestamp=1180)
        tb.pipe_input("k", "3", timestamp=1090)  # bridges them: merged, then b's record added
        ta.pipe_tick(1779)
        assert sessions.read_key_values() == []
        tb.pipe_tick(1780)  # end 1180 + gap 100 + grace 500
        assert sessions.read_key_values() == [("k@1000-1180", "c1c2v3")]


def test_sliding_cogroup() -> None:
    builder = _builder()
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by_key()
    (
        a.cogroup(_clicks)
        .cogroup(b, _views)
        .windowed_by(SlidingWindows.of_time_difference(100, grace=0))
        .aggregate(lambda: "")
        .to_stream()
        .map(lambda w, agg: (f"{w.key}@{w.start}", agg))
        .to("updates")
    )
    with TopologyTestDriver(builder) as driver:
        ta = driver.create_input_topic("a", String(), String())
        tb = driver.create_input_topic("b", String(), String())
        updates = driver.create_output_topic("updates", String(), String())
        ta.pipe_input("k", "1", timestamp=1000)
        tb.pipe_input("k", "2", timestamp=1050)
        assert updates.read_key_values() == [
            ("k@900", "c1"),
            ("k@1001", "v2"),  # the right window of a's record
            ("k@950", "c1v2"),
        ]


def test_a_grouped_stream_cogrouped_again_takes_the_new_aggregator() -> None:
    builder = _builder()
    a = builder.stream("a").group_by_key()
    cogrouped = a.cogroup(_clicks)
    assert cogrouped.cogroup(a, _views) is cogrouped
    cogrouped.aggregate(lambda: "").to_stream().to("out")
    with TopologyTestDriver(builder) as driver:
        driver.create_input_topic("a", String(), String()).pipe_input("k", "1", timestamp=1)
        out = driver.create_output_topic("out", String(), String())
        assert out.read_key_values() == [("k", "v1")]


def test_inputs_of_two_builders_are_refused() -> None:
    one, two = _builder(), _builder()
    with pytest.raises(ValueError, match="one StreamsBuilder"):
        one.stream("a").group_by_key().cogroup(_clicks).cogroup(
            two.stream("b").group_by_key(), _views
        )


def test_a_cogrouped_table_may_be_joined_and_queried() -> None:
    """The cogrouped table is a table like any aggregation's: a stream joins it through its
    store."""
    builder = _builder()
    table = (
        builder.stream("a")
        .group_by_key()
        .cogroup(_clicks)
        .cogroup(builder.stream("b").group_by_key(), _views)
        .aggregate(lambda: "", store_name="ab")
    )
    builder.stream("lookups").join(table, lambda v, row: f"{v}={row}").to("joined")
    with TopologyTestDriver(builder) as driver:
        driver.create_input_topic("a", String(), String()).pipe_input("k", "1", timestamp=1)
        driver.create_input_topic("b", String(), String()).pipe_input("k", "2", timestamp=2)
        driver.create_input_topic("lookups", String(), String()).pipe_input("k", "q", timestamp=3)
        joined: Any = driver.create_output_topic("joined", String(), String())
        assert joined.read_key_values() == [("k", "q=c1v2")]


def test_two_cogroups_of_one_stream_need_distinct_stores() -> None:
    builder = _builder()
    a = builder.stream("a").group_by_key()
    a.cogroup(_clicks).aggregate(lambda: "", store_name="same")
    a.cogroup(_views).aggregate(lambda: "", store_name="same")
    with pytest.raises((TopologyError, ValueError)), TopologyTestDriver(builder):
        pass

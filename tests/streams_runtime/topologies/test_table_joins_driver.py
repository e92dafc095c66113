"""Table-table joins on the ``TopologyTestDriver``: on the key (inner, left, outer: deletes, old
values, timestamps) and on a foreign key (KIP-213: foreign-key changes, deletes, null foreign
keys, the other table's updates), and ticks passing through both to their outputs without
reaching a joiner. Processors alone: tests/streams_runtime/processors/test_table_joins_logic.py;
against Kafka Streams: the ``table-table-join`` and ``fk-join`` conformance cases."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import StreamsBuilder, Table
from streams_runtime.serdes import Integer, String
from streams_runtime.testing import TopologyTestDriver
from streams_runtime.testing.topics import TestOutputTopic
from streams_runtime.topology import TopologyError

S = String()


def _pair(a: str | None, b: str | None) -> str:
    if a == "tick" or b == "tick":
        raise AssertionError("a joiner saw a control record")
    return f"{a}|{b}"


def _records(topic: TestOutputTopic[Any, Any]) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in topic.read_records()]


def _tables() -> tuple[StreamsBuilder, Table[str, str], Table[str, str]]:
    builder = StreamsBuilder(default_key_serde=S, default_value_serde=S)
    return builder, builder.table("l"), builder.table("r")


def test_joins_on_the_key_with_deletes_and_timestamps() -> None:
    builder, left, right = _tables()
    left.join(right, _pair).to_stream().to("inner")
    left.left_join(right, _pair).to_stream().to("left")
    left.outer_join(right, _pair).to_stream().to("outer")
    with TopologyTestDriver(builder) as driver:
        lt, rt = driver.create_input_topic("l", S, S), driver.create_input_topic("r", S, S)
        inner, lj, outer = (driver.create_output_topic(n, S, S) for n in ("inner", "left", "outer"))
        lt.pipe_input("a", "1", timestamp=10)
        rt.pipe_input("a", "x", timestamp=20)
        rt.pipe_input("b", "y", timestamp=30)
        lt.pipe_input("a", "2", timestamp=25)  # older than the row it joins: stamped 20
        lt.pipe_input("a", None, timestamp=40)
        rt.pipe_input("a", None, timestamp=50)
        assert _records(inner) == [("a", "1|x", 20), ("a", "2|x", 25), ("a", None, 40)]
        assert _records(lj) == [
            ("a", "1|None", 10),
            ("a", "1|x", 20),
            ("a", "2|x", 25),
            ("a", None, 40),
        ]
        assert _records(outer) == [
            ("a", "1|None", 10),
            ("a", "1|x", 20),
            ("b", "None|y", 30),
            ("a", "2|x", 25),
            ("a", "None|x", 40),
            ("a", None, 50),
        ]
        # The results are tables of their own, in the stores named for them.
        assert driver.get_key_value_store(_merge_store(builder, "outer")).get("b") == "None|y"


def _merge_store(builder: StreamsBuilder, output: str) -> str:
    """The store of the join writing ``output`` (auto-named)."""
    topology = builder.build("app")
    for sub in topology.subtopologies:
        for node in sub.nodes:
            if node.sink_topic == output:
                return node.parents[0].stores[0].name
    raise AssertionError(output)


def test_a_store_name_and_a_name_name_the_result_and_processors() -> None:
    builder, left, right = _tables()
    joined = left.join(right, _pair, name="both", store_name="joined", value_serde=S)
    joined.to_stream().to("out")
    names = {node.name for sub in builder.build("app").subtopologies for node in sub.nodes}
    assert {"both", "both-join-this", "both-join-other"} <= names
    with TopologyTestDriver(builder) as driver:
        driver.create_input_topic("l", S, S).pipe_input("k", "1", timestamp=1)
        driver.create_input_topic("r", S, S).pipe_input("k", "2", timestamp=2)
        assert driver.get_key_value_store("joined").get("k") == "1|2"


def test_old_values_flow_to_an_aggregation_of_the_result() -> None:
    """``group_by`` asks the join for old values: each row leaves its old group when the
    other side changes too, which only the joiner's result of the old value can tell."""
    builder, left, right = _tables()
    (
        left.join(right, _pair)
        .group_by(lambda key, value: (value.split("|")[1], key))
        .count()
        .to_stream()
        .to("counts", value_serde=Integer())
    )
    with TopologyTestDriver(builder) as driver:
        lt, rt = driver.create_input_topic("l", S, S), driver.create_input_topic("r", S, S)
        counts = driver.create_output_topic("counts", S, Integer())
        lt.pipe_input("a", "1", timestamp=1)
        lt.pipe_input("b", "2", timestamp=2)
        rt.pipe_input("a", "x", timestamp=3)
        rt.pipe_input("b", "x", timestamp=4)
        rt.pipe_input("a", "y", timestamp=5)  # a leaves x for y
        lt.pipe_input("b", None, timestamp=6)  # b leaves x
        assert counts.read_key_values_to_map() == {"x": 0, "y": 1}


def test_joining_a_suppressed_table_is_refused() -> None:
    from streams_runtime import BufferConfig, until_time_limit

    _builder, left, right = _tables()
    held = right.suppress(until_time_limit(10, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="suppressed"):
        left.join(held, _pair)


def _orders() -> tuple[StreamsBuilder, Table[str, str], Table[str, str]]:
    builder = StreamsBuilder(default_key_serde=S, default_value_serde=S)
    return builder, builder.table("orders"), builder.table("customers")


def _customer(order: str) -> str | None:
    if order == "tick":
        raise AssertionError("an extractor saw a control record")
    customer = order.split(":", maxsplit=1)[0]
    return customer or None


def test_foreign_key_joins_follow_updates_of_either_table() -> None:
    builder, orders, customers = _orders()
    orders.join(customers, _customer, _pair).to_stream().to("inner")
    orders.left_join(customers, _customer, _pair).to_stream().to("left")
    with TopologyTestDriver(builder) as driver:
        o = driver.create_input_topic("orders", S, S)
        c = driver.create_input_topic("customers", S, S)
        inner, lj = (
            driver.create_output_topic("inner", S, S),
            driver.create_output_topic("left", S, S),
        )
        c.pipe_input("c1", "alice", timestamp=5)
        o.pipe_input("o1", "c1:book", timestamp=10)
        o.pipe_input("o2", "c2:pen", timestamp=11)  # no customer c2 yet
        c.pipe_input("c2", "bob", timestamp=12)
        o.pipe_input("o1", "c2:book", timestamp=13)  # the foreign key changes
        c.pipe_input("c1", "alicia", timestamp=14)  # o1 no longer follows c1
        c.pipe_input("c2", "bobby", timestamp=15)
        o.pipe_input("o2", None, timestamp=16)
        o.pipe_input("o3", ":x", timestamp=17)  # a null foreign key
        c.pipe_input("c2", None, timestamp=18)
        assert _records(inner) == [
            ("o1", "c1:book|alice", 10),
            ("o2", "c2:pen|bob", 12),
            ("o1", "c2:book|bob", 13),
            ("o1", "c2:book|bobby", 15),
            ("o2", "c2:pen|bobby", 15),
            ("o2", None, 16),
            ("o1", None, 18),
        ]
        assert _records(lj) == [
            ("o1", "c1:book|alice", 10),
            ("o2", "c2:pen|None", 11),
            ("o2", "c2:pen|bob", 12),
            ("o1", "c2:book|bob", 13),
            ("o1", "c2:book|bobby", 15),
            ("o2", "c2:pen|bobby", 15),
            ("o2", None, 16),
            ("o3", ":x|None", 17),
            ("o1", "c2:book|None", 18),
        ]
        # The subscription store holds one subscription per order and foreign key.
        assert driver.get_key_value_store(_output_store(builder, "left")).get("o3") == ":x|None"


def _output_store(builder: StreamsBuilder, output: str) -> str:
    return _merge_store(builder, output)


def test_ticks_pass_through_both_joins_to_their_outputs() -> None:
    builder, left, right = _tables()
    left.left_join(right, _pair).to_stream().to("keyed")
    orders = builder.table("orders")
    orders.join(right, _customer, _pair).to_stream().to("fk")
    with TopologyTestDriver(builder) as driver:
        lt, rt = driver.create_input_topic("l", S, S), driver.create_input_topic("r", S, S)
        o = driver.create_input_topic("orders", S, S)
        keyed, fk = (
            driver.create_output_topic("keyed", S, S),
            driver.create_output_topic("fk", S, S),
        )
        lt.pipe_input("k", "1", timestamp=100)
        rt.pipe_input("c", "x", timestamp=110)
        o.pipe_input("o", "c:1", timestamp=120)
        assert _records(keyed) == [("k", "1|None", 100)]
        assert _records(fk) == [("o", "c:1|x", 120)]
        lt.pipe_tick(1_000)
        # Keyed: the join keeps order, so a tick's time reaches the output as it is.
        assert [t.timestamp for t in keyed.read_ticks()][-1:] == [999]
        # Foreign key: answers wait for both the subscriptions and the other table to pass.
        o.pipe_tick(2_000)
        assert fk.read_ticks() == []
        rt.pipe_tick(3_000)
        # Just below 2000, less a millisecond per topic on the way (subscriptions, answers).
        assert [t.timestamp for t in fk.read_ticks()][-1:] == [1_997]
        assert keyed.read_records() == []
        assert fk.read_records() == []

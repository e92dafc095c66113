"""Global tables and stream-global joins in the ``TopologyTestDriver``: Kafka Streams'
``KStreamGlobalKTableJoin`` semantics (a key mapper, KIP-962's left join), the global store's
updates, deletes, skipped control records and bad records, on every state engine. The global
thread against the real broker is tests/streams_runtime/processing/test_global_thread_broker.py."""

from __future__ import annotations

import pytest

from streams_runtime import BadRecordError, GlobalTable, StreamsBuilder, TopologyError
from streams_runtime.serdes import Integer, Json, String
from streams_runtime.testing import TestRecord, TopologyTestDriver

ENGINES = ("memory", "sqlite", "rocksdb")
WALL_CLOCK = 1_000_000_000_000


def _orders(*, left: bool) -> StreamsBuilder:
    """Orders (keyed by order id, no co-partitioning with customers) joined with the customer
    their value names."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    customers = builder.global_table("customers", store_name="customers")
    orders = builder.stream("orders")
    join = orders.left_join if left else orders.join
    join(
        customers,
        lambda _order_id, order: order.get("customer"),
        lambda order, customer: {"item": order["item"], "name": (customer or {}).get("name")},
    ).to("enriched")
    return builder


@pytest.mark.parametrize("state_engine", ENGINES)
def test_a_join_looks_up_the_mapped_key_in_the_global_table(state_engine: str) -> None:
    with TopologyTestDriver(
        _orders(left=False), initial_wall_clock_time_ms=WALL_CLOCK, state_engine=state_engine
    ) as driver:
        customers = driver.create_input_topic("customers", String(), Json())
        orders = driver.create_input_topic("orders", String(), Json())
        enriched = driver.create_output_topic("enriched", String(), Json())
        customers.pipe_input("c1", {"name": "Ann"}, timestamp=1)
        customers.pipe_input("c2", {"name": "Bob"}, timestamp=2)
        orders.pipe_input("o1", {"item": "tea", "customer": "c1"}, 10, [("h", b"v")])
        orders.pipe_input("o2", {"item": "jam", "customer": "c9"}, timestamp=11)  # no row
        orders.pipe_input("o3", {"item": "oil"}, timestamp=12)  # mapped key None: dropped
        orders.pipe_input("o4", None, timestamp=13)  # null value: dropped
        orders.pipe_input(None, {"item": "egg", "customer": "c2"}, timestamp=14)  # keyless: joins
        customers.pipe_input("c1", {"name": "Ann B."}, timestamp=20)  # updated at once
        orders.pipe_input("o5", {"item": "ham", "customer": "c1"}, timestamp=21)
        customers.pipe_input("c1", None, timestamp=30)  # deleted
        orders.pipe_input("o6", {"item": "rye", "customer": "c1"}, timestamp=31)
        # The stream record's key, timestamp and headers, whatever key was looked up.
        assert enriched.read_records() == [
            TestRecord("o1", {"item": "tea", "name": "Ann"}, 10, [("h", b"v")]),
            TestRecord(None, {"item": "egg", "name": "Bob"}, 14),
            TestRecord("o5", {"item": "ham", "name": "Ann B."}, 21),
        ]
        dropped = driver.metrics.total("streams_dropped_records", store="customers")
        assert dropped == 2  # the null mapped key and the null value; a missing row is no drop


def test_a_left_join_joins_none_for_a_missing_row_or_a_null_mapped_key() -> None:
    with TopologyTestDriver(_orders(left=True), initial_wall_clock_time_ms=WALL_CLOCK) as driver:
        customers = driver.create_input_topic("customers", String(), Json())
        orders = driver.create_input_topic("orders", String(), Json())
        enriched = driver.create_output_topic("enriched", String(), Json())
        customers.pipe_input("c1", {"name": "Ann"}, timestamp=1)
        orders.pipe_input("o1", {"item": "tea", "customer": "c1"}, timestamp=10)
        orders.pipe_input("o2", {"item": "jam", "customer": "c9"}, timestamp=11)
        orders.pipe_input("o3", {"item": "oil"}, timestamp=12)  # KIP-962: joins None
        orders.pipe_input("o4", None, timestamp=13)  # a null value is still dropped
        assert enriched.read_key_values() == [
            ("o1", {"item": "tea", "name": "Ann"}),
            ("o2", {"item": "jam", "name": None}),
            ("o3", {"item": "oil", "name": None}),
        ]


@pytest.mark.parametrize("state_engine", ENGINES)
def test_the_global_store_is_read_as_a_table_store(state_engine: str) -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    table = builder.global_table("prices", store_name="prices")
    assert isinstance(table, GlobalTable)
    assert (table.store_name, table.topic) == ("prices", "prices")
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, state_engine=state_engine
    ) as driver:
        prices = driver.create_input_topic("prices", String(), Integer())
        prices.pipe_input("tea", 3, timestamp=5)
        prices.pipe_input("jam", 4, timestamp=6)
        prices.pipe_input("oil", 9, timestamp=7)
        prices.pipe_input("oil", None, timestamp=8)  # a delete
        prices.pipe_input(None, 1, timestamp=9)  # no key: dropped and counted
        prices.pipe_tick(50)  # a control record: never stored
        store = driver.get_key_value_store("prices")
        assert store.get_with_timestamp("tea") == (3, 5)
        assert store.get("oil") is None
        assert store.all() == [("jam", 4), ("tea", 3)]
        assert driver.metrics.total("streams_dropped_records", reason="null-key") == 1
        assert driver.metrics.total("streams_global_records_applied", store="prices") == 4


def test_ticks_pass_a_global_join_and_the_runtime_ticks_its_output() -> None:
    with TopologyTestDriver(_orders(left=False), initial_wall_clock_time_ms=WALL_CLOCK) as driver:
        orders = driver.create_input_topic("orders", String(), Json())
        enriched = driver.create_output_topic("enriched", String(), Json())
        orders.pipe_tick(5_000)
        [tick] = enriched.read_ticks()
        # The join keeps order: no hold, as after a stateless operator (nothing below 5 s).
        assert tick.timestamp == 4_999


def test_bad_records_of_a_global_topic_meet_the_bad_record_policy() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    builder.global_table("prices", store_name="prices")
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, bad_record_policy="dead-letter"
    ) as driver:
        driver.pipe_raw("prices", b"tea", b"not a long", 1)
        driver.create_input_topic("prices", String(), Integer()).pipe_input("jam", 2, timestamp=2)
        assert driver.get_key_value_store("prices").all() == [("jam", 2)]
        dead = driver.create_output_topic("topology-test-driver-dlq", String(), String())
        assert dead.read_key_values() == [("tea", "not a long")]
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, bad_record_policy="log-and-skip"
    ) as driver:
        driver.pipe_raw("prices", b"tea", b"not a long", 1)
        assert driver.get_key_value_store("prices").all() == []
        assert driver.metrics.total("streams_bad_records", reason="deserialization") == 1
    with (
        TopologyTestDriver(builder, initial_wall_clock_time_ms=WALL_CLOCK) as driver,
        pytest.raises(BadRecordError),
    ):
        driver.pipe_raw("prices", b"tea", b"not a long", 1)


def test_a_global_tables_topic_is_no_other_source_and_a_join_takes_a_key_mapper() -> None:
    builder = StreamsBuilder()
    table = builder.global_table("customers")
    assert table.store_name == "customers-STATE-STORE-0000000000"  # Kafka Streams' name
    with pytest.raises(TopologyError, match="already a source"):
        builder.stream("customers")
    with pytest.raises(TopologyError, match="already a source"):
        builder.global_table("customers")
    with pytest.raises(TopologyError, match="already in this topology"):
        builder.global_table("clients", store_name=table.store_name)
    builder.table("addresses", store_name="shared")
    builder.global_table("accounts", store_name="shared")
    with pytest.raises(TopologyError, match="both global and a task's"):
        builder.build("app")
    stream = builder.stream("orders")
    with pytest.raises(TypeError, match="key mapper and a joiner"):
        stream.join(table, lambda order, customer: order)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="JoinWindows"):
        stream.join(builder.stream("views"), lambda a, b: a, lambda a, b: a)  # type: ignore[call-overload]

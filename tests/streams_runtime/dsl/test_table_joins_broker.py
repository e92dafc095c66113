"""Table-table joins through ``App`` against the real broker: on the key (both tables in one task,
co-partitioning checked at start-up) and on a foreign key (KIP-213), whose updates cross two
internal topics between the two tables' tasks. What the joins output is
tests/streams_runtime/topologies/test_table_joins_driver.py (the driver)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from progress_control.protocol import is_control_record
from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker

S = String()


def _produce(
    bootstrap: str,
    topic: str,
    rows: list[tuple[str, str | None, int]],
    partitioner: str = "murmur2_random",
) -> None:
    """Write ``(key, value, timestamp)`` rows, partitioned by key as Kafka's Java clients are
    (murmur2), as the runtime partitions its own topics, unless ``partitioner`` says another
    librdkafka partitioner."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner})
    for key, value, timestamp in rows:
        producer.produce(
            topic, value.encode() if value else None, key.encode(), timestamp=timestamp
        )
    assert producer.flush(30) == 0


def _rows(reader: TopicReader) -> dict[str, str]:
    """The table ``reader``'s updates make so far (ticks left out): each key's latest value, a
    deleted key not at all (whether a row that never was is deleted depends on timing)."""
    latest: dict[str, str | None] = {}
    for msg in reader.read():
        if not is_control_record(msg):
            value = msg.value()
            latest[(msg.key() or b"").decode()] = None if value is None else value.decode()
    return {key: value for key, value in latest.items() if value is not None}


def _pair(a: str | None, b: str | None) -> str:
    return f"{a}|{b}"


def test_a_table_table_join_on_the_key_runs_on_the_broker(
    kafka_bootstrap: str, create_topic: Callable[..., str], run_app: Callable[..., App]
) -> None:
    left, right = create_topic("left", 2), create_topic("right", 2)
    inner, outer = create_topic("inner", 2), create_topic("outer", 2)
    builder = StreamsBuilder(default_key_serde=S, default_value_serde=S)
    lt, rt = builder.table(left), builder.table(right)
    lt.join(rt, _pair, store_name="joined").to_stream().to(inner)
    lt.outer_join(rt, _pair).to_stream().to(outer)
    run_app(builder)
    _produce(kafka_bootstrap, left, [(f"k{n}", str(n), 1_000 + n) for n in range(6)])
    _produce(kafka_bootstrap, right, [("k1", "a", 2_000), ("k2", "b", 2_001), ("k9", "z", 2_002)])
    _produce(kafka_bootstrap, left, [("k2", None, 3_000)])
    readers = TopicReader(kafka_bootstrap, inner, 2), TopicReader(kafka_bootstrap, outer, 2)
    want_inner = {"k1": "1|a"}
    want_outer = {f"k{n}": f"{n}|None" for n in (0, 3, 4, 5)}
    want_outer |= {"k1": "1|a", "k2": "None|b", "k9": "None|z"}
    try:
        wait_for(
            lambda: _rows(readers[0]) == want_inner and _rows(readers[1]) == want_outer,
            timeout_s=60,
            message="the joins' results",
        )
    finally:
        for reader in readers:
            reader.close()


def test_tables_of_different_partition_counts_are_refused(
    create_topic: Callable[..., str], run_app: Callable[..., App]
) -> None:
    left, right = create_topic("left", 2), create_topic("right", 3)
    builder = StreamsBuilder(default_key_serde=S, default_value_serde=S)
    builder.table(left).join(builder.table(right), _pair).to_stream().to(create_topic("out", 2))
    with pytest.raises(AssertionError, match="not co-partitioned"):
        run_app(builder)


def test_a_foreign_key_join_runs_on_the_broker(
    kafka_bootstrap: str, create_topic: Callable[..., str], run_app: Callable[..., App]
) -> None:
    # Not co-partitioned, and orders partitioned as librdkafka does by default (CRC32, not
    # murmur2): answers go back to the partition their subscription came from, as in Kafka
    # Streams, and the internal topics take each table's partition count.
    orders, customers = create_topic("orders", 3), create_topic("customers", 2)
    inner, left = create_topic("inner", 2), create_topic("left", 2)
    builder = StreamsBuilder(default_key_serde=S, default_value_serde=S)
    ot, ct = builder.table(orders), builder.table(customers)

    def customer(order: str) -> str | None:
        return order.split(":", maxsplit=1)[0] or None

    ot.join(ct, customer, _pair).to_stream().to(inner)
    ot.left_join(ct, customer, _pair, name="orders-customers").to_stream().to(left)
    app_id = unique_name("fk-join")
    run_app(builder, application_id=app_id)
    _produce(kafka_bootstrap, customers, [(f"c{n}", f"name{n}", 1_000 + n) for n in range(4)])
    rows: list[tuple[str, str | None, int]] = [
        (f"o{n}", f"c{n % 4}:{n}", 2_000 + n) for n in range(8)
    ]
    rows += [("o1", "c3:1", 3_000), ("o2", None, 3_001), ("o3", ":3", 3_002)]
    _produce(kafka_bootstrap, orders, rows, partitioner="consistent_random")
    _produce(kafka_bootstrap, customers, [("c0", "zero", 4_000), ("c2", None, 4_001)])
    expected = {f"o{n}": f"c{n % 4}:{n}|name{n % 4}" for n in range(8)}
    expected |= {"o0": "c0:0|zero", "o4": "c0:4|zero", "o1": "c3:1|name3"}
    for deleted in ("o2", "o3", "o6"):
        del expected[deleted]
    expected_left = expected | {"o6": "c2:6|None", "o3": ":3|None"}
    readers = TopicReader(kafka_bootstrap, inner, 2), TopicReader(kafka_bootstrap, left, 2)
    try:
        wait_for(
            lambda: _rows(readers[0]) == expected and _rows(readers[1]) == expected_left,
            timeout_s=90,
            message="the foreign-key joins' results",
        )
    finally:
        for reader in readers:
            reader.close()
    # Both internal topics exist under Kafka Streams' names (``name`` names the second join's).
    topics = Producer({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert f"{app_id}-orders-customers-subscription-registration-topic" in topics
    assert f"{app_id}-orders-customers-subscription-response-topic" in topics

"""``cogroup`` end to end against the real broker: orders and payments (the payments regrouped
by customer through a repartition topic) aggregated into one tumbling-windowed table in one
shared store with the record cache on, suppressed to final results that come out on ticks
alone, carried across the repartition topic by the runtime's own ticks. What the operator
outputs is tests/streams_runtime/topologies/test_cogroup_driver.py (the driver)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from streams_runtime import App, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import String
from tests.conformance.broker_runs import ProcessedCheck
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker

BASE_MS = (int(time.time()) - 3600) // 60 * 60_000  # an hour back, on a whole minute


def _topology(orders: str, payments: str, out: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    by_customer = builder.stream(orders).group_by_key()
    paid = builder.stream(payments).group_by(
        lambda _payment, value: value.split(":")[0], name="paid-by-customer"
    )
    (
        by_customer.cogroup(lambda _k, order, agg: f"{agg}o{order}")
        .cogroup(paid, lambda _k, payment, agg: f"{agg}p{payment.split(':')[1]}")
        .windowed_by(TimeWindows.of_size(10_000, grace=0))
        .aggregate(lambda: "", name="activity", store_name="activity")
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda window, agg: (f"{window.key}@{window.start - BASE_MS}", agg))
        .to(out)
    )
    return builder


def _data(reader: TopicReader) -> list[tuple[str, str, int]]:
    return [
        ((m.key() or b"").decode(), (m.value() or b"").decode(), m.timestamp()[1] - BASE_MS)
        for m in reader.read()
        if not is_control_record(m)
    ]


def test_cogroup_with_a_repartitioned_input_closes_windows_on_ticks(
    *,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    orders, payments = create_topic("orders", partitions=2), create_topic("payments", partitions=2)
    out = create_topic("activity")
    app = run_app(
        _topology(orders, payments, out),
        progress_interval_ms=100,
        statestore_cache_max_bytes=1 << 20,
    )
    assert f"{app.settings.application_id}-paid-by-customer-repartition" in (
        app.topology.repartition_topics
    )
    # Partitioned as the runtime partitions the repartition topic (Kafka's Java clients'
    # murmur2), so a customer's orders and payments meet in one task.
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for topic, key, value, at in (
        (orders, "ann", "1", 1_000),
        (payments, "pay-1", "ann:5", 2_000),
        (orders, "bob", "2", 3_000),
        (payments, "pay-2", "bob:7", 4_000),
        (orders, "ann", "3", 5_000),
    ):
        producer.produce(topic, value.encode(), key.encode(), timestamp=BASE_MS + at)
    assert producer.flush(10) == 0

    finals = reader_for(out, 1)
    # Every input record processed first (the payments through the repartition topic too): a
    # tick on the orders alone would close the window before a payment still on its way.
    check = ProcessedCheck(kafka_bootstrap, app.settings.application_id, [orders, payments])
    try:
        wait_for(check, timeout_s=60, message="the input processed")
    finally:
        check.close()
    assert _data(finals) == []
    # No data closes [0, 10 000): ticks on every input partition do.
    for topic in (orders, payments):
        for partition in (0, 1):
            marker = ControlMarker("cogroup-test", partition)
            tick = ControlRecord(topic, partition, BASE_MS + 12_000, marker)
            producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(10) == 0
    wait_for(lambda: len(_data(finals)) >= 2, timeout_s=90, message="the final results")
    # Which of an order and a payment the task takes first depends on when the payment came
    # through the repartition topic: compare what each window holds, not its order.
    assert sorted((key, sorted(_tokens(value)), ts) for key, value, ts in _data(finals)) == [
        ("ann@0", ["o1", "o3", "p5"], 5_000),
        ("bob@0", ["o2", "p7"], 4_000),
    ]


def _tokens(aggregate: str) -> list[str]:
    """``o1p5o3`` -> ``["o1", "p5", "o3"]``."""
    return [kind + digit for kind, digit in zip(aggregate[::2], aggregate[1::2], strict=True)]

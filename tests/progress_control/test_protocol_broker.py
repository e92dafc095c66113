"""Data and control records through a real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer

from progress_control.protocol import (
    CONTROL_HEADER,
    DEFAULT_SENTINEL_KEY,
    ControlMarker,
    ControlRecord,
    is_control_record,
    malformed_control_headers_seen,
    parse_control_headers,
)
from tests.helpers import unique_name, wait_for


def _consume(bootstrap: str, topic: str, count: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("roundtrip"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[Message] = []

    def got_all() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            received.append(msg)
        return len(received) >= count

    try:
        wait_for(got_all, timeout_s=30, interval_s=0, message=f"{count} records on {topic}")
    finally:
        consumer.close()
    return received


def _produce(bootstrap: str, *records: dict[str, object]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for record in records:
        producer.produce(**record)  # type: ignore[arg-type]
    assert producer.flush(30) == 0


def test_data_and_control_records_round_trip(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("roundtrip", partitions=2)
    now_ms = int(time.time() * 1000)
    marker = ControlMarker(source_id=f"test-{uuid.uuid4().hex[:6]}", sequence=41)
    _produce(
        kafka_bootstrap,
        {"topic": topic, "partition": 0, "key": b"k", "value": b"v", "timestamp": now_ms},
        ControlRecord(topic, 1, now_ms + 5, marker).produce_kwargs(),
    )

    by_partition = {m.partition(): m for m in _consume(kafka_bootstrap, topic, 2)}

    data, control = by_partition[0], by_partition[1]
    assert not is_control_record(data)
    assert (data.key(), data.value(), data.timestamp()[1]) == (b"k", b"v", now_ms)

    assert is_control_record(control)
    assert control.key() == DEFAULT_SENTINEL_KEY
    assert control.value() is None  # a tombstone, so compaction removes it
    assert control.timestamp()[1] == now_ms + 5
    assert control.headers() == [(CONTROL_HEADER, marker.encode())]
    assert parse_control_headers(control.headers()) == marker


def test_null_key_control_record(kafka_bootstrap: str, create_topic: Callable[..., str]) -> None:
    topic = create_topic("nullkey")
    marker = ControlMarker(source_id="null-key", sequence=0)
    _produce(kafka_bootstrap, ControlRecord(topic, 0, 1_000, marker, key=None).produce_kwargs())
    [record] = _consume(kafka_bootstrap, topic, 1)
    assert is_control_record(record)
    assert record.key() is None


def test_garbage_marker_from_the_wire_is_rejected_and_counted(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("garbage")
    _produce(
        kafka_bootstrap,
        {"topic": topic, "key": b"k", "value": b"v", "headers": [(CONTROL_HEADER, b"\xde\xad")]},
    )
    [record] = _consume(kafka_bootstrap, topic, 1)
    before = malformed_control_headers_seen()
    assert not is_control_record(record)
    assert malformed_control_headers_seen() == before + 1

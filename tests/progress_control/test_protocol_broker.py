"""Data and control records through a real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
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
from progress_control.trust import (
    ControlRecordSource,
    ControlRecordValidator,
    SigningKey,
    TrustPolicy,
    Verdict,
)
from tests.helpers import unique_name, wait_for

pytestmark = pytest.mark.broker


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


def test_signed_records_of_a_source_verify_after_a_round_trip(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("signed-source", partitions=3)
    key = SigningKey("writer-1", b"a-secret-for-the-round-trip")
    now_ms = int(time.time() * 1000)
    signed = ControlRecordSource(f"signer-{uuid.uuid4().hex[:6]}", signing_key=key)
    null_key = ControlRecordSource("null-key-signer", key=None, signing_key=key)
    unsigned = ControlRecordSource("unsigned-writer")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    def produce(record: ControlRecord) -> None:
        producer.produce(**record.produce_kwargs())  # type: ignore[arg-type]

    for partition in range(3):
        signed.emit(topic, partition, now_ms - partition, produce)
    null_key.emit(topic, 0, now_ms - 10, produce)
    unsigned.emit(topic, 1, now_ms - 20, produce)
    # A signed header copied to another partition, as anyone who can write the topic could.
    moved = signed.record(topic, 0, now_ms - 30)
    producer.produce(
        topic, None, moved.key, partition=2, timestamp=now_ms - 30, headers=moved.headers
    )
    assert producer.flush(30) == 0

    received = _consume(kafka_bootstrap, topic, 6)
    keyed = ControlRecordValidator(TrustPolicy(verification_keys={key.key_id: key.secret}))
    other = ControlRecordValidator(TrustPolicy(verification_keys={"other": b"x" * 16}))
    verdicts: dict[tuple[str, int, int], Verdict] = {}
    for msg in received:
        assert is_control_record(msg)
        marker = parse_control_headers(msg.headers())
        assert marker is not None
        partition, timestamp = msg.partition() or 0, msg.timestamp()[1]
        verdicts[marker.source_id, partition, timestamp - now_ms] = keyed.check(
            msg.topic() or "", partition, timestamp, msg.headers()
        )
        if marker.key_id is not None:
            assert other.check(topic, partition, timestamp, msg.headers()) is Verdict.UNKNOWN_KEY
        if marker.source_id == "null-key-signer":
            assert msg.key() is None
    assert verdicts == {
        (signed.source_id, 0, 0): Verdict.ACCEPTED,
        (signed.source_id, 1, -1): Verdict.ACCEPTED,
        (signed.source_id, 2, -2): Verdict.ACCEPTED,
        ("null-key-signer", 0, -10): Verdict.ACCEPTED,
        ("unsigned-writer", 1, -20): Verdict.UNSIGNED,
        (signed.source_id, 2, -30): Verdict.BAD_SIGNATURE,
    }
    # Without keys, every well-formed record is an ordinary control record.
    assert all(
        ControlRecordValidator().check(topic, m.partition() or 0, m.timestamp()[1], m.headers())
        is Verdict.ACCEPTED
        for m in received
    )

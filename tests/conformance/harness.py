"""Broker-side plumbing of the conformance suite: produce the input, wait until an application
has processed all of it, read an output topic to its end."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from progress_control.protocol import is_control_record
from tests.conformance.compare import OutputRecord
from tests.conformance.inputs import InputRecord
from tests.helpers import unique_name

__all__ = ["ProcessedCheck", "produce", "read_to_end"]


def produce(
    bootstrap: str, topics: dict[str, str], records: list[InputRecord], base_ms: int
) -> None:
    """Write ``records`` in order (each to its explicit partition), timestamps shifted by
    ``base_ms``; fail unless every record was acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failures: list[str] = []

    def on_delivery(error: object, _msg: object) -> None:
        if error is not None:
            failures.append(str(error))

    for sequence, record in enumerate(records):
        producer.produce(
            topics[record.role],
            record.value,
            record.key,
            record.partition,
            timestamp=base_ms + record.timestamp,
            headers=record.headers(sequence),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0, "input not delivered within 30 s"
    assert not failures, failures[:3]


class ProcessedCheck:
    """Whether a consumer group has committed the end of its inputs and of its application's
    repartition topics (``<application id>-...-repartition``): everything it will ever output
    for the input is then written (both engines flush their producer before committing)."""

    def __init__(self, bootstrap: str, application_id: str, inputs: list[str]) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": application_id, "enable.auto.commit": False}
        )
        self._application_id = application_id
        self._inputs = inputs

    def __call__(self) -> bool:
        metadata = self._consumer.list_topics(timeout=10)
        topics = self._inputs + [
            name
            for name in metadata.topics
            if name.startswith(f"{self._application_id}-") and name.endswith("-repartition")
        ]
        partitions = [
            TopicPartition(topic, p) for topic in topics for p in metadata.topics[topic].partitions
        ]
        for tp in self._consumer.committed(partitions, timeout=10):
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            if high > 0 and tp.offset < high:
                return False
        return True

    def close(self) -> None:
        self._consumer.close()


def read_to_end(
    bootstrap: str, topic: str, base_ms: int, timeout_s: float = 60.0
) -> list[OutputRecord]:
    """Every record of ``topic`` up to its current end, in offset order per partition, with
    timestamps relative to ``base_ms``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("conformance-reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        remaining = {p for p, end in ends.items() if end > 0}
        records: list[OutputRecord] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset >= ends[partition]:
                remaining.discard(partition)
                continue
            records.append(
                OutputRecord(
                    partition,
                    msg.key(),
                    msg.value(),
                    msg.timestamp()[1] - base_ms,
                    tuple(msg.headers() or ()),
                    control=is_control_record(msg),
                )
            )
            if offset + 1 >= ends[partition]:
                remaining.discard(partition)
        return records
    finally:
        consumer.close()

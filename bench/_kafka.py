"""Small broker helpers shared by the benchmarks that run against a real broker."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["create_topic", "end_offsets", "unique_name"]

_TIMEOUT_S = 30.0


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap_servers: str, name: str, partitions: int) -> str:
    """Create ``name`` with ``partitions`` partitions and wait until it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1)
    futures = admin.create_topics([topic], operation_timeout=_TIMEOUT_S)
    for future in futures.values():  # ``admin`` stays referenced until these resolve
        future.result(timeout=_TIMEOUT_S)
    return name


def end_offsets(bootstrap_servers: str, topic: str, partitions: int) -> list[int]:
    """High watermark of each partition of ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": unique_name("bench-watermarks"),
            "enable.auto.commit": False,
        }
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()

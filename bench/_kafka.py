"""Small broker helpers shared by the benchmarks that run against a real broker."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control_apps.dev.broker import EmbeddedKafkaBroker

__all__ = ["bootstrap_servers", "create_topic", "end_offsets", "unique_name"]

_TIMEOUT_S = 30.0


@contextlib.contextmanager
def bootstrap_servers() -> Iterator[str]:
    """``KAFKA_BOOTSTRAP_SERVERS`` when set (a shared broker), else an embedded one."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    with EmbeddedKafkaBroker() as broker:
        yield broker.bootstrap_servers


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

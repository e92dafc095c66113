"""Ticks on Schema Registry-framed topics, read by a plain confluent-kafka consumer with registry
deserializers (``DeserializingConsumer`` + ``AvroDeserializer``), against the real broker and a
real registry.

The producer is the interceptor's ``SerializingProducer`` with Avro key and value serializers. On
the topic listed in ``null.key.topics`` its ticks have a null key and value: the consumer
deserializes every record without error, and the documented recipe (skip
``is_control_record(msg)``) keeps ticks out of the data. On a topic ticked with the sentinel key,
the same consumer fails on the first tick: what the option is for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer, KafkaError
from confluent_kafka.error import ConsumeError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from interceptor import SerializingProducer as TickingSerializingProducer
from progress_control.protocol import is_control_record
from tests.helpers import registry_client, unique_name

pytestmark = pytest.mark.broker

PARTITIONS = 2
USER_SCHEMA = """{"type": "record", "name": "User", "namespace": "test.clicks",
  "fields": [{"name": "id", "type": "string"}]}"""
CLICK_SCHEMA = """{"type": "record", "name": "Click", "namespace": "test.clicks",
  "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}"""
CLICKS: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({"id": f"u{i % 5}"}, {"page": f"/p{i}", "ms": 1_000 + i}) for i in range(40)
]


def _tick_and_read(
    kafka_bootstrap: str, registry_url: str, topic: str, extra: dict[str, Any]
) -> list[tuple[Any, Any, bool]]:
    """Produce CLICKS through the ticking Avro producer and read the topic back with registry
    deserializers while the idle partitions get three ticks each: (key, value, is_tick)."""
    registry = registry_client(registry_url)
    producer = TickingSerializingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "key.serializer": AvroSerializer(registry, USER_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
            "progress.control.start.ms": 200,
            "progress.control.backoff.ms": 200,
            "progress.control.max.records": 3,
            **extra,
        }
    )
    for key, value in CLICKS:
        producer.produce(topic, key=key, value=value, timestamp=value["ms"])
    producer.flush(10)
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("registry-reader"),
            "auto.offset.reset": "earliest",
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry),
        }
    )
    consumer.subscribe([topic])
    read: list[tuple[Any, Any, bool]] = []
    try:
        while len(read) < len(CLICKS) + 3 * PARTITIONS:
            msg = consumer.poll(15)
            assert msg is not None, f"only {len(read)} records within 15 s"
            read.append((msg.key(), msg.value(), is_control_record(msg)))
    finally:
        consumer.close()
        producer.close()
    return read


def test_a_registry_consumer_reads_null_key_ticks_without_error(
    create_topic: Callable[..., str], kafka_bootstrap: str, schema_registry_url: str
) -> None:
    topic = create_topic("avro-clicks", partitions=PARTITIONS)
    read = _tick_and_read(
        kafka_bootstrap, schema_registry_url, topic, {"progress.control.null.key.topics": topic}
    )
    ticks = [(key, value) for key, value, tick in read if tick]
    data = [(key, value) for key, value, tick in read if not tick]
    assert ticks == [(None, None)] * 3 * PARTITIONS
    assert sorted(data, key=lambda kv: kv[1]["ms"]) == CLICKS


def test_the_sentinel_key_breaks_a_registry_consumer(
    create_topic: Callable[..., str], kafka_bootstrap: str, schema_registry_url: str
) -> None:
    topic = create_topic("avro-clicks", partitions=PARTITIONS)
    with pytest.raises(ConsumeError) as failure:
        _tick_and_read(kafka_bootstrap, schema_registry_url, topic, {})
    assert failure.value.code == KafkaError._KEY_DESERIALIZATION

"""The runtime's own ticks on topics whose keys are Schema Registry-framed have a null key
(docs/design.md §2), against the real broker and a real registry: a confluent-kafka consumer
with registry deserializers reads such an output without error, ticks as ``(None, None)``; an
output with plain string keys keeps the sentinel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer
from confluent_kafka.schema_registry.avro import AvroDeserializer

from progress_control.protocol import DEFAULT_SENTINEL_KEY, is_control_record
from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json, String
from streams_runtime.serdes_registry import Avro
from tests.helpers import TopicReader, registry_client, unique_name, wait_for
from tests.streams_runtime.test_progress import In, produce, tick

pytestmark = pytest.mark.broker

USER_KEY = '{"type": "record", "name": "UserKey", "fields": [{"name": "id", "type": "string"}]}'
CLICK = '{"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]}'


def test_output_ticks_have_a_null_key_where_keys_are_registry_framed(
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    reader_for: Callable[[str, int], TopicReader],
    schema_registry_url: str,
) -> None:
    clicks, framed, plain = create_topic("clicks"), create_topic("framed"), create_topic("plain")
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    stream = builder.stream(clicks)
    stream.map(lambda user, click: ({"id": user}, {"page": click["page"]})).to(
        framed,
        key_serde=Avro(USER_KEY, registry=schema_registry_url),
        value_serde=Avro(CLICK, registry=schema_registry_url),
    )
    stream.to(plain)
    run_app(builder, progress_propagation=True, progress_interval_ms=20, commit_interval_ms=100)
    data_in = [In(0, f"u{n}", {"page": f"/p{n}"}, n) for n in range(5)]
    produce(kafka_bootstrap, clicks, [*data_in, tick(0, 1_000)])  # the tick raises the promise

    plain_reader = reader_for(plain, 1)
    plain_ticks = wait_for(lambda: [m for m in plain_reader.read(max_s=1) if is_control_record(m)])
    assert {m.key() for m in plain_ticks} == {DEFAULT_SENTINEL_KEY}

    registry = registry_client(schema_registry_url)
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("framed-reader"),
            "auto.offset.reset": "earliest",
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry),
        }
    )
    consumer.subscribe([framed])
    data: list[tuple[Any, Any]] = []
    ticks: list[tuple[Any, Any]] = []
    try:
        while len(data) < 5 or not ticks:  # a deserialization error raises here
            msg = consumer.poll(15)
            assert msg is not None, f"{len(data)} records and {len(ticks)} ticks within 15 s"
            (ticks if is_control_record(msg) else data).append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert set(ticks) == {(None, None)}
    assert sorted(key["id"] for key, _ in data) == [f"u{n}" for n in range(5)]

"""Kafka Connect sinks on Schema Registry-framed topics (docs/readers/schema-registry.md, "Kafka
Connect"): a real Connect 4.3.1 standalone worker on the real broker, its key and value
converters Apicurio's ``AvroConverter`` in Confluent's wire format (``tests/readers/apicurio.py``;
a plugin on the worker's ``plugin.path``) against the embedded registry, the data written by
confluent-kafka's ``AvroSerializer`` through the interceptor's ``SerializingProducer``.

- The converter and confluent-kafka's Avro serializers read each other's records (the tiny
  interoperability check the others rest on).
- On a topic in the writer's ``null.key.topics`` (ticks: null key, null value), a
  ``FileStreamSink`` with the documented recipe (``Filter`` + ``HasHeaderKey``) keeps running
  and writes exactly the data records; one without it writes the ticks as ``null`` lines (the
  converter passes null through), so the recipe is what keeps them out.
- With the sentinel key instead, the key converter fails on the first tick, before any
  transform runs: the task is ``FAILED`` (the REST API's status says so), recipe or not.

One worker serves the module; each test adds its connectors through the REST API.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer, SerializingProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from interceptor import SerializingProducer as TickingSerializingProducer
from progress_control.readers.kafka_connect import sink_drop_ticks
from progress_control_apps.dev.jars import apicurio_avro_converter_jars, fetch_jars
from tests.helpers import TopicReader, registry_client, ticks_by_partition, unique_name, wait_for
from tests.readers.apicurio import CLICK_SCHEMA, USER_SCHEMA, avro_converters
from tests.readers.connect_worker import ConnectWorker, committed_offsets, end_offsets, file_sink

pytestmark = [pytest.mark.broker, pytest.mark.network]

PARTITIONS = 2
TICKS_PER_PARTITION = 2
CLICKS: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({"id": f"u{i % 5}"}, {"page": f"/p{i}", "ms": 1_000 + i}) for i in range(20)
]


_FAILED_STAGE = re.compile(
    r"Error encountered in task registry-sentinel-0\. Executing stage '(?P<stage>\w+)' .*"
    r"where consumed record is \{topic='(?P<topic>[^']+)', partition=(?P<partition>\d+), "
    r"offset=(?P<offset>\d+)"
)


def _as_sink_line(click: dict[str, Any]) -> str:
    """How ``FileStreamSink`` writes a click the converter made a Connect ``Struct``."""
    return f"Struct{{page={click['page']},ms={click['ms']}}}"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def worker(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnectWorker]:
    connect = ConnectWorker(kafka_bootstrap, tmp_path_factory.mktemp("connect-registry"))
    connect.start(plugins={"apicurio-converter": fetch_jars(apicurio_avro_converter_jars())})
    yield connect
    connect.stop()


def _produce_ticked(
    bootstrap: str, registry_url: str, topic: str, reader: TopicReader, *, null_key: bool
) -> None:
    """CLICKS through the ticking Avro producer, then ticks on both (idle) partitions: null-key
    ticks when the topic is in ``null.key.topics``, sentinel-key ticks otherwise."""
    registry = registry_client(registry_url)
    producer = TickingSerializingProducer(
        {
            "bootstrap.servers": bootstrap,
            "key.serializer": AvroSerializer(registry, USER_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
            "progress.control.start.ms": 200,
            "progress.control.backoff.ms": 200,
            "progress.control.max.records": TICKS_PER_PARTITION,
            **({"progress.control.null.key.topics": topic} if null_key else {}),
        }
    )
    try:
        for i, (key, value) in enumerate(CLICKS):
            producer.produce(topic, key=key, value=value, partition=i % PARTITIONS)
        producer.flush(10)
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == dict.fromkeys(range(PARTITIONS), 2),
            timeout_s=30,
            message="the interceptor's ticks on both partitions",
        )
    finally:
        producer.close()
    ticks = reader.ticks()
    assert all((m.key() is None) == null_key for m in ticks), [m.key() for m in ticks]


def test_the_avro_converter_and_confluent_kafkas_avro_serializers_read_each_other(
    kafka_bootstrap: str,
    schema_registry_url: str,
    create_topic: Callable[..., str],
    worker: ConnectWorker,
) -> None:
    registry = registry_client(schema_registry_url)
    from_python, from_connect = create_topic("py-avro"), create_topic("connect-avro")
    producer = SerializingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "key.serializer": AvroSerializer(registry, USER_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
        }
    )
    for key, value in CLICKS[:3]:
        producer.produce(from_python, key=key, value=value)
    producer.flush(10)
    sunk, lines = worker.directory / "interop-sink.txt", worker.directory / "interop-lines.txt"
    lines.write_text("one\ntwo\nthree\n")
    converters = avro_converters(schema_registry_url)
    worker.add(file_sink("interop-sink", from_python, sunk, **converters))
    worker.add(
        {
            "name": "interop-source",
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1",
            "file": str(lines),
            "topic": from_connect,
            **converters,
        }
    )

    wait_for(lambda: len(_lines(sunk)) == 3, timeout_s=120, message="the sink's three lines")
    assert _lines(sunk) == [_as_sink_line(value) for _key, value in CLICKS[:3]]
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("interop"),
            "auto.offset.reset": "earliest",
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry),
        }
    )
    consumer.subscribe([from_connect])
    read: list[tuple[Any, Any]] = []
    try:
        while len(read) < 3:
            msg = consumer.poll(30)
            assert msg is not None, f"only {read} within 30 s"
            read.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert read == [(None, "one"), (None, "two"), (None, "three")]
    assert worker.task_states("interop-sink") == ["RUNNING"]


def test_a_registry_sink_with_the_recipe_keeps_running_and_writes_only_data(
    *,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    worker: ConnectWorker,
) -> None:
    topic = create_topic("registry-null-key", partitions=PARTITIONS)
    reader = reader_for(topic, PARTITIONS)
    _produce_ticked(kafka_bootstrap, schema_registry_url, topic, reader, null_key=True)
    converters = avro_converters(schema_registry_url)
    filtered, raw = worker.directory / "recipe.txt", worker.directory / "raw.txt"
    worker.add(sink_drop_ticks(file_sink("registry-recipe", topic, filtered, **converters)))
    worker.add(file_sink("registry-raw", topic, raw, **converters))

    ends = end_offsets(kafka_admin, topic, PARTITIONS)
    for connector in ("registry-recipe", "registry-raw"):
        wait_for(
            lambda connector=connector: (  # type: ignore[misc]
                committed_offsets(kafka_admin, f"connect-{connector}", topic, PARTITIONS) == ends
            ),
            timeout_s=120,
            message=f"{connector} to commit every offset of the topic",
        )
        assert worker.task_states(connector) == ["RUNNING"], worker.status(connector)

    data = [_as_sink_line(value) for _key, value in CLICKS]
    assert Counter(_lines(filtered)) == Counter(data)
    ticks = TICKS_PER_PARTITION * PARTITIONS
    assert Counter(_lines(raw)) == Counter([*data, *["null"] * ticks])


def test_the_sentinel_key_fails_a_registry_sink_task_recipe_or_not(
    kafka_bootstrap: str,
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    worker: ConnectWorker,
) -> None:
    topic = create_topic("registry-sentinel", partitions=PARTITIONS)
    reader = reader_for(topic, PARTITIONS)
    _produce_ticked(kafka_bootstrap, schema_registry_url, topic, reader, null_key=False)
    file = worker.directory / "sentinel.txt"
    converters = avro_converters(schema_registry_url)
    errors_log = {"errors.log.enable": "true", "errors.log.include.messages": "true"}
    sink = file_sink("registry-sentinel", topic, file, **converters, **errors_log)
    worker.add(sink_drop_ticks(sink))

    wait_for(
        lambda: worker.task_states("registry-sentinel") == ["FAILED"],
        timeout_s=120,
        message="the sink task to fail on the sentinel key",
    )
    status = worker.status("registry-sentinel")
    assert status is not None
    assert "SerdeBasedConverter.toConnectData" in status["tasks"][0]["trace"], status
    # Connect's error log (errors.log.enable) names the stage and the record: the key
    # converter, on a tick (the transforms, the recipe's Filter among them, come after it).
    failure = wait_for(
        lambda: _FAILED_STAGE.search(worker.log.read_text()),
        timeout_s=30,
        message="Connect's error log of the failed record",
    )
    assert failure["stage"] == "KEY_CONVERTER"
    assert failure["topic"] == topic
    ticks = {(m.partition(), m.offset()) for m in reader.ticks()}
    assert (int(failure["partition"]), int(failure["offset"])) in ticks

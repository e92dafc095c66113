"""The Spark jobs over Schema Registry-framed values: real Spark with its Kafka connector and
from_avro, a real broker, a real registry (the session's ``schema_registry_url``), values written
by confluent-kafka's own AvroSerializer and JSONSerializer, ticks with a null key and a null value.

The streaming scenario runs once (module fixture): the clicks of test_spark_jobs.py, half written
with schema version 1 and half with version 2 (an optional field with a default), bad records
among them; the job starts; a version 3 registered after it started writes one more click; then
ticks. The same clicks in JSON on a twin topic are the reference: the sessions must be theirs,
and the ticks must close them exactly as there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from progress_control.protocol import ControlMarker, ControlRecord
from progress_control_apps.spark import (
    InputSchema,
    KafkaSource,
    MalformedRecord,
    Session,
    SessionizationStream,
    StreamConfig,
    StreamMetrics,
    read_errors,
    read_sessions,
    run_batch,
)
from progress_control_apps.spark.cli import main
from tests.helpers import registry_client, unique_name, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.network]  # network: a cold jar or registry cache

GAP_MS = 5_000
PARTITIONS = 2
T = (int(time.time()) - 600) * 1000  # ten minutes ago, whole seconds
CLICKS = [  # (user, offset from T in ms), as in test_spark_jobs.py; the first half in v1
    ("alice", 0),
    ("bob", 500),
    ("alice", 1_000),
    ("carol", 1_500),
    ("alice", 2_000),
    ("bob", 2_500),
    ("bob", 3_000),
    ("carol", 3_500),
]
LAST_EVENT_MS = T + 3_500
TICK_MS = T + 20_000
LATE_CLICK = ("dave", 3_200)  # written with v3, registered after the stream started

CLICK = {"type": "record", "name": "Click", "namespace": "progress.control.test"}
V1 = {
    **CLICK,
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
REFERRER = {"name": "referrer", "type": ["null", "string"], "default": None}  # optional
V2 = {**V1, "fields": [*V1["fields"], REFERRER]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "device", "type": "string", "default": "web"}]}
UNKNOWN_ID = 2**31 - 1


def _session(user: str, start: int, end: int, events: int) -> Session:
    return Session(user, T + start, T + end, events, T + start, T + end + GAP_MS)


EXPECTED = sorted(
    [
        _session("alice", 0, 2_000, 3),
        _session("bob", 500, 3_000, 3),
        _session("carol", 1_500, 3_500, 2),
    ]
)


@dataclass(frozen=True)
class Infra:
    """The broker and the registry, with a client of each."""

    bootstrap: str
    registry_url: str
    admin: AdminClient
    producer: Producer
    registry: SchemaRegistryClient


@pytest.fixture(scope="module")
def infra(kafka_bootstrap: str, schema_registry_url: str) -> Iterator[Infra]:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    yield Infra(
        bootstrap=kafka_bootstrap,
        registry_url=schema_registry_url,
        admin=AdminClient({"bootstrap.servers": kafka_bootstrap}),
        producer=producer,
        registry=registry_client(schema_registry_url),
    )
    producer.flush(30)


def _topic(admin: AdminClient, prefix: str) -> str:
    name = unique_name(prefix)
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(timeout=30)
    return name


def _click(user: str, offset: int) -> dict[str, Any]:
    return {"user": user, "page": f"/p{offset}", "ts": T + offset}


def _produce_ticks(producer: Producer, topic: str) -> None:
    """Ticks as a topic with registry-framed keys gets them: null key, null value."""
    for partition in range(PARTITIONS):
        marker = ControlMarker("spark-registry-test", sequence=partition)
        tick = ControlRecord(topic, partition, TICK_MS, marker, key=None)
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(30) == 0


def _serialize(serializer: Any, topic: str, record: dict[str, Any]) -> bytes:
    data = serializer(record, SerializationContext(topic, MessageField.VALUE))
    assert isinstance(data, bytes)
    return data


def _produce_avro_clicks(
    producer: Producer, registry: SchemaRegistryClient, topic: str
) -> dict[str, int]:
    """The clicks, half in v1 and half in v2, then the bad records on partition 0; returns the
    schema ids by version name."""
    half = len(CLICKS) // 2
    v1 = AvroSerializer(registry, json.dumps(V1))
    v2 = AvroSerializer(registry, json.dumps(V2))
    for i, (user, offset) in enumerate(CLICKS):
        record = _click(user, offset) if i < half else {**_click(user, offset), "referrer": "/"}
        value = _serialize(v1 if i < half else v2, topic, record)
        producer.produce(topic, key=user, value=value, timestamp=T + offset)
    ids = {
        "v1": registry.get_version(f"{topic}-value", 1).schema_id,
        "v2": registry.get_version(f"{topic}-value", 2).schema_id,
    }
    for i, (value, _reason) in enumerate(_bad_records(ids["v1"], topic, 2)):
        producer.produce(topic, key=b"bad", value=value, partition=0, timestamp=T + 100 + i)
    assert producer.flush(30) == 0
    return ids


def _bad_records(v1_id: int, topic: str, read_as: int) -> list[tuple[bytes | None, str]]:
    """The bad records (value, reason), read with the subject's version ``read_as`` latest."""
    good = json.dumps(_click("eve", 0)).encode()
    framed = b"\x00" + v1_id.to_bytes(4, "big")
    return [
        (good, "wrong magic byte 0x7B (a Schema Registry-framed value starts with 0x00)"),
        (b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"\x06eve", f"unknown schema id {UNKNOWN_ID}"),
        (
            framed + b"\xff" * 10 + b"\x01",  # a varint longer than a long
            f"Avro payload does not decode with schema id {v1_id} ({topic}-value version 1, "
            f"read as version {read_as})",
        ),
        (b"\x00\x00", "value is shorter than the 5-byte Schema Registry header"),
        (None, "null value"),
    ]


def _produce_json_twin(producer: Producer, topic: str) -> None:
    for user, offset in CLICKS:
        value = json.dumps(_click(user, offset))
        producer.produce(topic, key=user, value=value, timestamp=T + offset)
    assert producer.flush(30) == 0
    _produce_ticks(producer, topic)


@dataclass(frozen=True)
class AvroStreamRun:
    topic: str
    ids: dict[str, int]
    late_id: int
    sessions_before_ticks: list[Session]
    metrics_before_ticks: StreamMetrics
    errors_before_ticks: list[MalformedRecord]
    sessions: list[Session]
    metrics: StreamMetrics
    described: str
    json_sessions: list[Session]


@pytest.fixture(scope="module")
def avro_run(
    spark: SparkSession, infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> AvroStreamRun:
    producer, registry = infra.producer, infra.registry
    topic = _topic(infra.admin, "spark-avro-clicks")
    ids = _produce_avro_clicks(producer, registry, topic)
    bad = len(_bad_records(ids["v1"], topic, 2))
    work = tmp_path_factory.mktemp("avro-stream")
    schema = InputSchema(value_format="avro", schema_registry_url=infra.registry_url)
    config = StreamConfig(
        source=KafkaSource(infra.bootstrap, topic, schema=schema),
        gap_ms=GAP_MS,
        output_dir=str(work / "out"),
        checkpoint_dir=str(work / "checkpoints"),
        trigger_interval_ms=250,
    )
    with SessionizationStream(spark, config) as job:
        assert job.value_schemas is not None
        described = job.value_schemas.describe()
        job.process_all_available()
        wait_for(
            lambda: (m := job.metrics()).data_records == len(CLICKS) and m.watermark_ms,
            timeout_s=120,
            message="the data batch's metrics and the watermark it moved",
        )
        # A compatible version registered now: the job fetched the subject when it started, so
        # a click written with it is an error row, and moves no time.
        late = _click(*LATE_CLICK)
        value = _serialize(AvroSerializer(registry, json.dumps(V3)), topic, late)
        late_id = registry.get_version(f"{topic}-value", 3).schema_id
        producer.produce(topic, key="dave", value=value, partition=0, timestamp=late["ts"])
        assert producer.flush(30) == 0
        errors_before = wait_for(
            lambda: e if len(e := job.errors()) >= bad + 1 else None,
            timeout_s=120,
            message="the errors output",
        )
        metrics_before = wait_for(
            lambda: m if (m := job.metrics()).malformed_records == bad + 1 else None,
            timeout_s=60,
            message="the late click counted as malformed",
        )
        # No ticks: nothing may close however many triggers pass. Watch for a while.
        deadline = time.monotonic() + 3.0
        before = job.sessions()
        while not before and time.monotonic() < deadline:
            time.sleep(0.25)
            before = job.sessions()

        _produce_ticks(producer, topic)
        sessions = job.wait_for_sessions(lambda s: len(s) >= len(EXPECTED), timeout_s=120)
        metrics = wait_for(
            lambda: (
                m
                if (m := job.metrics()).control_records == PARTITIONS
                and m.watermark_ms != metrics_before.watermark_ms
                else None
            ),
            timeout_s=60,
            message="ticks counted and the watermark they moved",
        )
        assert job.is_active

    json_topic = _topic(infra.admin, "spark-json-twin")
    _produce_json_twin(producer, json_topic)
    twin = run_batch(
        spark,
        KafkaSource(infra.bootstrap, json_topic),
        GAP_MS,
        str(work / "json-twin"),
        closed_only=True,
    )
    return AvroStreamRun(
        topic=topic,
        ids=ids,
        late_id=late_id,
        sessions_before_ticks=before,
        metrics_before_ticks=metrics_before,
        errors_before_ticks=errors_before,
        sessions=sessions,
        metrics=metrics,
        described=described,
        json_sessions=read_sessions(spark, twin.sessions_path),
    )


def test_avro_sessions_are_the_json_sessions_and_ticks_close_them(avro_run: AvroStreamRun) -> None:
    # As in test_spark_jobs.py's JSON stream: nothing closes without ticks, the watermark at
    # the last click; the ticks alone (null key, null value) close every session.
    assert avro_run.metrics_before_ticks.watermark_ms == LAST_EVENT_MS
    assert avro_run.sessions_before_ticks == []
    assert avro_run.sessions == EXPECTED == avro_run.json_sessions
    assert avro_run.metrics.watermark_ms == TICK_MS
    assert avro_run.metrics.control_records == PARTITIONS
    assert avro_run.metrics.rejected_control_records == {}
    # Both versions read: every click is data.
    assert avro_run.metrics.data_records == len(CLICKS)
    ids = avro_run.ids
    assert avro_run.described == (
        f"{avro_run.topic}-value: version 1 (id {ids['v1']}), version 2 (id {ids['v2']}), "
        "read as version 2"
    )


def test_bad_values_are_error_rows_and_the_stream_goes_on(avro_run: AvroStreamRun) -> None:
    expected = _bad_records(avro_run.ids["v1"], avro_run.topic, 2)
    errors = [e for e in avro_run.errors_before_ticks if e.key == b"bad"]
    assert [(e.value, e.error) for e in errors] == expected
    assert all(e.partition == 0 and e.topic == avro_run.topic for e in errors)
    # The version registered after the start: unknown to the running job.
    late = [e for e in avro_run.errors_before_ticks if e.key == b"dave"]
    assert [(e.error, e.timestamp_ms) for e in late] == [
        (f"unknown schema id {avro_run.late_id}", T + LATE_CLICK[1])
    ]
    assert avro_run.metrics.malformed_records == len(expected) + 1


def test_batch_reads_what_the_stream_read_and_a_restart_reads_the_late_version(
    spark: SparkSession,
    infra: Infra,
    avro_run: AvroStreamRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the command line: the batch job fetches the subject when it starts, version 3
    included, so the click the stream could not read is a session of its own now."""
    status = main(
        [
            "batch",
            "--bootstrap-servers",
            infra.bootstrap,
            "--topic",
            avro_run.topic,
            "--gap",
            "5s",
            "--master",
            "local[2]",
            "--output",
            str(tmp_path),
            "--closed-only",
            "--value-format",
            "avro",
            "--schema-registry-url",
            infra.registry_url,
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "read as version 3\n" in out
    assert "records: 9 data, 2 control, 5 malformed" in out
    dave = _session("dave", LATE_CLICK[1], LATE_CLICK[1], 1)
    assert read_sessions(spark, str(tmp_path / "sessions")) == sorted([*EXPECTED, dave])
    errors = read_errors(spark, str(tmp_path / "errors"))
    assert [e.error for e in errors] == [
        reason for _, reason in _bad_records(avro_run.ids["v1"], avro_run.topic, 3)
    ]


def test_json_schema_values_read_as_json(spark: SparkSession, infra: Infra, tmp_path: Path) -> None:
    topic = _topic(infra.admin, "spark-json-schema-clicks")
    strings = {"type": "string"}
    json_schema = {
        "type": "object",
        "properties": {"user": strings, "page": strings, "ts": {"type": "integer"}},
        "required": ["user", "page", "ts"],
    }
    serializer = JSONSerializer(json.dumps(json_schema), infra.registry)
    producer = infra.producer
    for user, offset in CLICKS:
        value = _serialize(serializer, topic, _click(user, offset))
        producer.produce(topic, key=user, value=value, timestamp=T + offset)
    schema_id = infra.registry.get_latest_version(f"{topic}-value").schema_id
    text = json.dumps(_click("eve", 0)).encode()
    other_id = b"\x00" + (schema_id + 1000).to_bytes(4, "big")
    producer.produce(topic, value=text, partition=0, timestamp=T + 100)
    producer.produce(topic, value=other_id + text, partition=0, timestamp=T + 101)
    assert producer.flush(30) == 0
    _produce_ticks(producer, topic)

    schema = InputSchema(value_format="json-schema", schema_registry_url=infra.registry_url)
    result = run_batch(
        spark,
        KafkaSource(infra.bootstrap, topic, schema=schema),
        GAP_MS,
        str(tmp_path / "sessions"),
        errors_path=str(tmp_path / "errors"),
        closed_only=True,
    )
    assert read_sessions(spark, result.sessions_path) == EXPECTED
    assert [e.error for e in read_errors(spark, str(tmp_path / "errors"))] == [
        "wrong magic byte 0x7B (a Schema Registry-framed value starts with 0x00)",
        f"unknown schema id {schema_id + 1000}",
    ]

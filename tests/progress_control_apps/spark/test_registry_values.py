"""Schema Registry-framed values without a broker: Spark's Kafka rows built by hand, decoded by
Spark's own from_avro with writer schemas given by hand; what each framing problem is called;
the schemas fetched from confluent-kafka's in-memory registry (``mock://``); and the options
that ask for them (InputSchema, CLI, env). The jobs against a real broker and registry are in
test_registry_jobs.py."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from progress_control.protocol import ControlMarker, ControlRecord
from progress_control_apps.spark import load_job_settings, parse_records
from progress_control_apps.spark.cli import build_parser, input_schema, main
from progress_control_apps.spark.input_schema import InputSchema
from progress_control_apps.spark.registry import (
    RegistryError,
    SubjectSchemas,
    ValueSchemas,
    WriterSchema,
    fetch_value_schemas,
    redacted_url,
)
from tests.helpers import unique_name

CLICK_V1: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "progress.control.test",
    "fields": [
        {"name": "user", "type": ["null", "string"]},
        {"name": "page", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
# v2: an optional field, a field with a default, and a time field as Avro's timestamp-millis.
CLICK_V2: dict[str, Any] = {
    **CLICK_V1,
    "fields": [
        *CLICK_V1["fields"],
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "channel", "type": "string", "default": "web"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
    ],
}
# Another writer's idea of a click: the user a long.
NUMERIC_USER: dict[str, Any] = {
    **CLICK_V1,
    "fields": [{"name": "user", "type": "long"}, *CLICK_V1["fields"][1:]],
}
V1_ID, V2_ID, NUMERIC_ID = 41, 42, 43
TOPIC = "clicks"
GOOD = {"user": "a", "page": "/x", "ts": 5}

AVRO = InputSchema(value_format="avro", schema_registry_url="mock://unused")
JSON_SCHEMA = InputSchema(value_format="json-schema")


def _subject(topic: str, *versions: tuple[int, dict[str, Any]]) -> SubjectSchemas:
    writers = tuple(
        WriterSchema(f"{topic}-value", n, schema_id, json.dumps(schema))
        for n, (schema_id, schema) in enumerate(versions, start=1)
    )
    return SubjectSchemas(f"{topic}-value", writers, writers[-1])


def _schemas(*versions: tuple[int, dict[str, Any]], kind: str = "avro") -> ValueSchemas:
    return ValueSchemas(kind, {TOPIC: _subject(TOPIC, *versions)})


def _avro(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return _framed(schema_id, out.getvalue())


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


RAW_SCHEMA = (
    "topic string, partition int, offset long, ms long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)
# A tick as a registry-framed topic gets them: null key, null value, the header.
TICK_HEADERS = ControlRecord(TOPIC, 0, 9_000, ControlMarker("t", 0), key=None).headers


class Tick:
    """A tick among the values given to :func:`_parse`."""


def _parse(
    spark: SparkSession,
    values: Sequence[bytes | tuple[str, bytes] | type[Tick] | None],
    schema: InputSchema,
    value_schemas: ValueSchemas | None,
) -> list[tuple[str | None, int, str | None, str | None, str | None]]:
    """(user, event time ms, page, error, control verdict) of each value (record timestamp 1000,
    topic ``clicks`` unless given as (topic, value)); :class:`Tick` is a tick at 9000."""
    rows = []
    for offset, value in enumerate(values):
        if value is Tick:
            rows.append((TOPIC, 0, offset, 9_000, None, None, TICK_HEADERS))
        elif isinstance(value, tuple):
            rows.append((value[0], 0, offset, 1_000, b"k", value[1], []))
        else:
            rows.append((TOPIC, 0, offset, 1_000, b"k", value, []))
    raw = spark.createDataFrame(rows, RAW_SCHEMA).select(
        "topic",
        "partition",
        "offset",
        sf.timestamp_millis("ms").alias("timestamp"),
        "key",
        "value",
        "headers",
    )
    parsed = parse_records(raw, schema=schema, value_schemas=value_schemas).orderBy("offset")
    return [
        (r["user"], r["ms"], r["page"], r["error"], r["control"])
        for r in parsed.select("*", sf.unix_millis("event_time").alias("ms")).collect()
    ]


def _error(reason: str) -> tuple[None, int, None, str, None]:
    return (None, 1_000, None, reason, None)


def test_avro_values_decode_with_the_schema_their_id_names(spark: SparkSession) -> None:
    schemas = _schemas((V1_ID, CLICK_V1), (V2_ID, CLICK_V2))
    values = [
        _avro(V1_ID, CLICK_V1, GOOD),
        _avro(V2_ID, CLICK_V2, {**GOOD, "referrer": "r", "channel": "app", "at": 7}),
        _avro(V1_ID, CLICK_V1, {**GOOD, "user": None}),
        # Another schema's bytes under v1's id: its long user is no union branch of v1's.
        _avro(V1_ID, NUMERIC_USER, {**GOOD, "user": 7}),
        b"{" + _avro(V1_ID, CLICK_V1, GOOD)[1:],  # JSON text, not framed
        b"\x00\x00\x00",
        _avro(99, CLICK_V1, GOOD),
        _framed(V1_ID, b"\xff" * 10 + b"\x01"),  # a varint longer than a long
        None,
        Tick,
    ]
    undecodable = "Avro payload does not decode with schema id 41 (clicks-value version 1, read as "
    assert _parse(spark, values, AVRO, schemas) == [
        ("a", 1_000, "/x", None, None),
        ("a", 1_000, "/x", None, None),
        _error("field 'user' is null"),
        _error(undecodable + "version 2)"),
        _error("wrong magic byte 0x7B (a Schema Registry-framed value starts with 0x00)"),
        _error("value is shorter than the 5-byte Schema Registry header"),
        _error("unknown schema id 99"),
        _error(undecodable + "version 2)"),
        _error("null value"),
        (None, 9_000, None, None, "accepted"),  # a tick with a null value and a null key
    ]


def test_avro_fields_are_checked_as_json_fields_are(spark: SparkSession) -> None:
    """Types by what the decoded value holds: a long is an integer, not a string; a v1 record
    read as v2 has v2's defaults; a timestamp-millis time field is epoch milliseconds."""
    numeric = _avro(NUMERIC_ID, NUMERIC_USER, {**GOOD, "user": 7})
    assert _parse(spark, [numeric], AVRO, _schemas((NUMERIC_ID, NUMERIC_USER))) == [
        _error("field 'user' must be a string, got BIGINT")
    ]
    values = [
        _avro(V1_ID, CLICK_V1, GOOD),
        _avro(V2_ID, CLICK_V2, {**GOOD, "referrer": None, "channel": "app", "at": 1_234}),
    ]
    by_channel = InputSchema(
        time_field="at",
        page_field="channel",
        value_format="avro",
        schema_registry_url="mock://unused",
    )
    evolved = _schemas((V1_ID, CLICK_V1), (V2_ID, CLICK_V2))
    assert _parse(spark, values, by_channel, evolved) == [
        ("a", 0, "web", None, None),  # v1: v2's defaults, at 0 (epoch)
        ("a", 1_234, "app", None, None),
    ]


def test_two_topics_read_with_their_own_subjects(spark: SparkSession) -> None:
    """Ids are the registry's, the reader the topic's: an id of the other topic's subject is
    unknown here."""
    schemas = ValueSchemas(
        "avro",
        {
            "a": _subject("a", (V1_ID, CLICK_V1)),
            "b": _subject("b", (V2_ID, CLICK_V2)),
        },
    )
    values = [
        ("a", _avro(V1_ID, CLICK_V1, GOOD)),
        ("b", _avro(V2_ID, CLICK_V2, {**GOOD, "at": 1})),
        ("b", _avro(V1_ID, CLICK_V1, GOOD)),
    ]
    assert _parse(spark, values, AVRO, schemas) == [
        ("a", 1_000, "/x", None, None),
        ("a", 1_000, "/x", None, None),
        _error("unknown schema id 41"),
    ]


def test_json_schema_values_are_json_after_the_header(spark: SparkSession) -> None:
    text = json.dumps(GOOD).encode()
    values = [
        _framed(7, text),
        _framed(8, text),
        text,
        _framed(7, b"not json"),
        _framed(7, b"[1]"),
        _framed(7, b"\xff"),
        _framed(7, json.dumps({**GOOD, "ts": "5"}).encode()),
        Tick,
    ]
    common = [
        _error("value is not valid JSON"),
        _error("value is not a JSON object"),
        _error("value is not UTF-8"),
        _error("field 'ts' must be an integer, got STRING"),
        (None, 9_000, None, None, "accepted"),
    ]
    wrong_magic = _error("wrong magic byte 0x7B (a Schema Registry-framed value starts with 0x00)")
    # Without a registry any id reads; with one, only the subject's.
    assert _parse(spark, values, JSON_SCHEMA, None) == [
        ("a", 1_000, "/x", None, None),
        ("a", 1_000, "/x", None, None),
        wrong_magic,
        *common,
    ]
    known = _schemas((7, {"type": "object"}), kind="json-schema")
    with_registry = InputSchema(value_format="json-schema", schema_registry_url="mock://unused")
    assert _parse(spark, values, with_registry, known) == [
        ("a", 1_000, "/x", None, None),
        _error("unknown schema id 8"),
        wrong_magic,
        *common,
    ]


def test_an_unknown_id_fails_the_query_when_asked_to(spark: SparkSession) -> None:
    failing = InputSchema(
        value_format="avro", schema_registry_url="mock://unused", on_unknown_schema_id="fail"
    )
    schemas = _schemas((V1_ID, CLICK_V1))
    # Nothing to look up is no reason to fail: ticks, unframed and short values, known ids.
    fine = [_avro(V1_ID, CLICK_V1, GOOD), b"{}", b"\x00", b"", None, Tick]
    assert [row[3] for row in _parse(spark, fine, failing, schemas)] == [
        None,
        "wrong magic byte 0x7B (a Schema Registry-framed value starts with 0x00)",
        "value is shorter than the 5-byte Schema Registry header",
        "value is shorter than the 5-byte Schema Registry header",
        "null value",
        None,
    ]
    with pytest.raises(PySparkException, match="unknown schema id 99"):
        _parse(spark, [*fine, _avro(99, CLICK_V1, GOOD)], failing, schemas)


# -- the schemas from a registry (confluent-kafka's in-memory one) -------------------------------


def _registry() -> tuple[str, SchemaRegistryClient]:
    url = f"mock://{unique_name('registry')}"
    return url, SchemaRegistryClient.new_client({"url": url})


def test_every_version_of_the_subject_is_fetched_and_the_latest_is_the_reader() -> None:
    url, client = _registry()
    first = client.register_schema("clicks-value", Schema(json.dumps(CLICK_V1), "AVRO"))
    second = client.register_schema("clicks-value", Schema(json.dumps(CLICK_V2), "AVRO"))
    other = client.register_schema("shared", Schema(json.dumps(NUMERIC_USER), "AVRO"))
    schema = InputSchema(value_format="avro", schema_registry_url=url)

    fetched = fetch_value_schemas(schema, "clicks", client)
    assert fetched is not None
    subject = fetched.subjects["clicks"]
    assert [(w.version, w.schema_id) for w in subject.versions] == [(1, first), (2, second)]
    assert subject.reader == subject.versions[1]
    assert json.loads(subject.versions[0].schema) == CLICK_V1
    assert fetched.describe() == (
        f"clicks-value: version 1 (id {first}), version 2 (id {second}), read as version 2"
    )
    # --value-subject: one subject for every topic read.
    shared = InputSchema(value_format="avro", schema_registry_url=url, value_subject="shared")
    both = fetch_value_schemas(shared, "a,b", client)
    assert both is not None
    assert set(both.subjects) == {"a", "b"}
    assert both.subjects["a"] is both.subjects["b"]
    assert [w.schema_id for w in both.subjects["a"].versions] == [other]
    # No registry needed: JSON, and JSON Schema without a URL.
    assert fetch_value_schemas(InputSchema(), "clicks", client) is None
    assert fetch_value_schemas(JSON_SCHEMA, "clicks", client) is None


def test_schemas_the_job_cannot_read_fail_at_start() -> None:
    url, client = _registry()
    schema = InputSchema(value_format="avro", schema_registry_url=url)
    with pytest.raises(RegistryError, match=r"subject 'absent-value' .* has no version"):
        fetch_value_schemas(schema, "absent", client)
    client.register_schema("json-value", Schema('{"type": "object"}', "JSON"))
    with pytest.raises(RegistryError, match=r"version 1 .* is a JSON schema, not AVRO"):
        fetch_value_schemas(schema, "json", client)
    client.register_schema("text-value", Schema('"string"', "AVRO"))
    with pytest.raises(RegistryError, match="is not an Avro record"):
        fetch_value_schemas(schema, "text", client)


def test_registry_credentials_are_never_shown() -> None:
    assert redacted_url("https://user:s3cret@sr.example:8081/x") == "https://***@sr.example:8081/x"
    assert redacted_url("http://sr:8081") == "http://sr:8081"
    with_secret = InputSchema(value_format="avro", schema_registry_url="https://u:s3cret@h")
    assert "s3cret" not in with_secret.describe()
    assert with_secret.describe().startswith("value: avro, Schema Registry-framed; user: ")


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"value_format": "protobuf"}, "value_format: one of json, avro, json-schema"),
        ({"value_format": "avro"}, "value_format 'avro' needs schema_registry_url"),
        ({"on_unknown_schema_id": "skip"}, "on_unknown_schema_id: one of error, fail"),
        ({"value_format": "avro", "schema_registry_url": "u", "value_subject": ""}, "subject"),
    ],
)
def test_input_schema_rejects_bad_value_options(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InputSchema(**kwargs)


def test_value_options_from_the_cli_and_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["--bootstrap-servers", "b", "--topic", "clicks", "--gap", "5s", "--output", "o"]
    args = build_parser().parse_args(
        ["batch", *base, "--value-format", "avro", "--schema-registry-url", "http://sr:8081"]
    )
    schema = input_schema(args)
    assert (schema.value_format, schema.schema_registry_url, schema.value_subject) == (
        "avro",
        "http://sr:8081",
        None,
    )
    assert schema.value_subjects("clicks,views") == {
        "clicks": "clicks-value",
        "views": "views-value",
    }
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT", "avro")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_SCHEMA_REGISTRY_URL", "https://u:s3cret@sr")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_VALUE_SUBJECT", "events")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_ON_UNKNOWN_SCHEMA_ID", "fail")
    from_env = load_job_settings().input_schema()
    assert from_env == InputSchema(
        value_format="avro",
        schema_registry_url="https://u:s3cret@sr",
        value_subject="events",
        on_unknown_schema_id="fail",
    )
    assert from_env.value_subjects("clicks,views") == {"clicks": "events", "views": "events"}
    # The command line wins, option by option.
    overridden = input_schema(
        build_parser().parse_args(["batch", *base, "--value-format", "json-schema"]), from_env
    )
    assert (overridden.value_format, overridden.value_subject) == ("json-schema", "events")


def test_bad_value_options_stop_the_job_before_spark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["batch", "--bootstrap-servers", "b", "--topic", "t", "--gap", "5s", "--output", "o"]
    assert main([*base, "--value-format", "avro"]) == 2
    assert "value_format 'avro' needs schema_registry_url" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main([*base, "--value-format", "protobuf"])
    assert exited.value.code == 2
    assert "invalid choice: 'protobuf'" in capsys.readouterr().err
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT", "xml")
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT" in err
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT", "avro")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_SCHEMA_REGISTRY_URL", "not a url: s3cret")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_ON_UNKNOWN_SCHEMA_ID", "retry")
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "PROGRESS_CONTROL_SPARK_INPUT_ON_UNKNOWN_SCHEMA_ID" in err
    assert "s3cret" not in err


def test_a_subject_the_registry_lacks_stops_the_job_at_start(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _client = _registry()
    argv = ["batch", "--bootstrap-servers", "b", "--topic", "t", "--gap", "5s", "--output", "o"]
    assert main([*argv, "--value-format", "avro", "--schema-registry-url", url]) == 2
    err = capsys.readouterr().err
    assert f"subject 't-value' of the registry at {url} has no version" in err

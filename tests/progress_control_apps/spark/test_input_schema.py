"""The input schema: where the user and the event time of a data record come from, and which
fields it must carry, for the stream, batch and reconcile jobs alike.

One topic (written once, module fixture) holds clicks keyed by user whose value names the user
``uid``, the page ``url`` and the event time ``at``, with record timestamps that disagree with
``at`` (each click 6 s after the last: under the record timestamp, every click is a session of
its own), plus records malformed under some schemas and not others. The streaming job reads it
with the user from the key and the time from ``at``; batch runs read it under the other schemas.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from progress_control.protocol import ControlMarker, ControlRecord
from progress_control_apps.spark import (
    KafkaSource,
    MalformedRecord,
    Session,
    SessionizationStream,
    StreamConfig,
    load_job_settings,
    parse_records,
    read_errors,
    read_sessions,
    run_batch,
)
from progress_control_apps.spark.cli import build_parser, input_schema, main
from progress_control_apps.spark.input_schema import DEFAULT_INPUT_SCHEMA, MAX_EPOCH_MS, InputSchema
from progress_control_apps.spark.source import ERROR_COLUMNS
from tests.helpers import unique_name, wait_for

GAP_MS = 5_000
T = (int(time.time()) - 600) * 1000  # ten minutes ago, whole seconds
RECORD_T = T + 30_000  # the record timestamps of the clicks: 6 s apart from here

CLICKS = [("u1", 0), ("u2", 500), ("u1", 1_000), ("u1", 2_000), ("u2", 9_000)]  # (user, at - T)
# (key, value, error with the user from the key, error with the user from "uid"); time from "at",
# page "url". The record timestamps are T+100+i.
NOT_UTF8 = b"\xff\xfe"
ODD: list[tuple[bytes | None, dict[str, object], str, str]] = [
    (None, {"url": "/", "at": T + 100}, "null key (the user)", "missing field 'uid'"),
    (b"u3", {"uid": "u3", "url": "/"}, "missing field 'at'", "missing field 'at'"),
    (
        b"u3",
        {"uid": "u3", "url": "/", "at": "1714557600000"},
        "field 'at' must be an integer (epoch milliseconds), got STRING",
        "field 'at' must be an integer (epoch milliseconds), got STRING",
    ),
    (
        b"u3",
        {"uid": "u3", "url": "/", "at": -1},
        f"field 'at' is not an epoch millisecond from 0 to {MAX_EPOCH_MS}",
        f"field 'at' is not an epoch millisecond from 0 to {MAX_EPOCH_MS}",
    ),
    (b"u3", {"uid": "u3", "at": T + 100}, "missing field 'url'", "missing field 'url'"),
    (NOT_UTF8, {"url": "/", "at": T + 100}, "key (the user) is not UTF-8", "missing field 'uid'"),
]
TICK_MS = T + 20_000  # after every window end under "at" (at most T+9s + GAP_MS)

BY_KEY_AND_AT = InputSchema(user_field=None, time_field="at", page_field="url", integer_fields=())
BY_KEY_AND_RECORD = InputSchema(user_field=None, page_field=None, integer_fields=())


def _session(user: str, start: int, end: int, events: int) -> Session:
    return Session(user, start, end, events, start, end + GAP_MS)


BY_AT = sorted(
    [
        _session("u1", T, T + 2_000, 3),
        _session("u2", T + 500, T + 500, 1),
        _session("u2", T + 9_000, T + 9_000, 1),
    ]
)
# Under the record timestamp: every click alone (6 s apart > GAP_MS), and the four u3 records
# whose only problem was their value's "at" or "url", which this schema does not read.
BY_RECORD = sorted(
    [
        _session(user, RECORD_T + 6_000 * i, RECORD_T + 6_000 * i, 1)
        for i, (user, _) in enumerate(CLICKS)
    ]
    + [_session("u3", T + 101, T + 104, 4)]
)


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    name = unique_name("spark-schema")
    for future in admin.create_topics([NewTopic(name, 2, 1)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i, (user, at) in enumerate(CLICKS):
        value = json.dumps({"uid": user, "url": f"/p{i}", "at": T + at})
        producer.produce(name, key=user, value=value, timestamp=RECORD_T + 6_000 * i)
    for i, (key, odd, _, _) in enumerate(ODD):
        producer.produce(name, key=key, value=json.dumps(odd), partition=0, timestamp=T + 100 + i)
    assert producer.flush(30) == 0
    return name


def _ticks(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(2):
        marker = ControlMarker("schema-test", sequence=partition)
        producer.produce(**ControlRecord(topic, partition, TICK_MS, marker).produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(30) == 0


@pytest.mark.broker
@pytest.mark.skipif(
    os.environ.get("PROGRESS_CONTROL_LONG_TESTS") != "1",
    reason="long form only (a Spark stream of its own, ~1 min): the batch tests check the same "
    "parsing, the streaming suite the watermark",
)
def test_stream_with_the_user_from_the_key_and_the_time_from_a_field(
    spark: SparkSession, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    config = StreamConfig(
        KafkaSource(kafka_bootstrap, topic, schema=BY_KEY_AND_AT),
        GAP_MS,
        str(tmp_path / "out"),
        str(tmp_path / "ckpt"),
        trigger_interval_ms=250,
    )
    with SessionizationStream(spark, config) as job:
        job.process_all_available()
        _ticks(kafka_bootstrap, topic)
        sessions = job.wait_for_sessions(lambda s: len(s) >= len(BY_AT), timeout_s=60)
        errors = wait_for(
            lambda: e if len(e := job.errors()) >= len(ODD) else None, message="errors output"
        )
        metrics = wait_for(
            lambda: m if (m := job.metrics()).control_records == 2 else None, message="ticks"
        )
    # Event time from "at": the record timestamps (6 s apart) would have split u1's session.
    assert sessions == BY_AT
    assert metrics.watermark_ms == TICK_MS
    assert (metrics.data_records, metrics.malformed_records) == (len(CLICKS), len(ODD))
    assert [(e.key, e.error) for e in errors] == [(key, error) for key, _, error, _ in ODD]
    # The errors output keeps the record timestamp (a malformed record has no other time).
    assert [e.timestamp_ms for e in errors] == [T + 100 + i for i in range(len(ODD))]


@pytest.mark.broker
def test_batch_under_other_schemas(
    spark: SparkSession,
    kafka_bootstrap: str,
    topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The user from the key, the time from the record: every click alone, and the u3 records
    # are valid (nothing of their value is read).
    source = KafkaSource(kafka_bootstrap, topic, schema=BY_KEY_AND_RECORD)
    by_record = run_batch(
        spark, source, GAP_MS, str(tmp_path / "record"), errors_path=str(tmp_path / "record-e")
    )
    assert read_sessions(spark, by_record.sessions_path) == BY_RECORD
    errors = read_errors(spark, str(tmp_path / "record-e"))
    assert [e.error for e in errors] == ["null key (the user)", "key (the user) is not UTF-8"]

    # Custom field names from the command line: the user from "uid", the time from "at".
    common = ["--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--gap", "5s"]
    schema = ["--user-field", "uid", "--time-field", "at", "--page-field", "url"]
    out = tmp_path / "fields"
    assert main(["batch", *common, *schema, "--no-integer-fields", "--output", str(out)]) == 0
    assert "sessions: 3 ->" in capsys.readouterr().out
    assert read_sessions(spark, str(out / "sessions")) == BY_AT
    errors = read_errors(spark, str(out / "errors"))
    assert [(e.key, e.error) for e in errors] == [(key, error) for key, _, _, error in ODD]

    # The defaults read none of it, and say why: what the user report saw on `sessions`.
    default = run_batch(
        spark,
        KafkaSource(kafka_bootstrap, topic),
        GAP_MS,
        str(tmp_path / "default"),
        errors_path=str(tmp_path / "default-e"),
    )
    assert (default.sessions, default.data_records) == (0, 0)
    assert default.malformed_records == len(CLICKS) + len(ODD)
    errors = read_errors(spark, str(tmp_path / "default-e"))
    assert {e.error for e in errors} == {"missing field 'user'"}


# -- parsing without a broker: Spark's Kafka rows built by hand ---------------------------------

RAW_SCHEMA = (
    "topic string, partition int, offset long, ms long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)


def _parse(
    spark: SparkSession, rows: Sequence[tuple[bytes | None, bytes | None, int]], schema: InputSchema
) -> list[tuple[str | None, int, str | None, str | None]]:
    """(user, event time ms, page, error) of each (key, value, record timestamp ms)."""
    frame = spark.createDataFrame(
        [("t", 0, i, ms, key, value, []) for i, (key, value, ms) in enumerate(rows)], RAW_SCHEMA
    )
    raw = frame.select(
        "topic",
        "partition",
        "offset",
        sf.timestamp_millis("ms").alias("timestamp"),  # not via the local time zone
        "key",
        "value",
        "headers",
    )
    parsed = parse_records(raw, schema=schema).orderBy("offset")
    return [
        (r["user"], r["ms"], r["page"], r["error"])
        for r in parsed.select("*", sf.unix_millis("event_time").alias("ms")).collect()
    ]


def test_default_schema_reads_as_it_always_did(spark: SparkSession) -> None:
    assert KafkaSource("b", "t").schema == DEFAULT_INPUT_SCHEMA == InputSchema()
    assert InputSchema("user", None, "page", ("ts",)) == DEFAULT_INPUT_SCHEMA
    good = b'{"user": "a", "page": "/x", "ts": 5, "extra": [1]}'
    rows = [
        (b"k", good, 1_000),  # time: the record timestamp, not ts
        (None, good, 1_000),  # the key is not read
        (b"k", b'{"user": "a", "page": "/x", "ts": 5.5}', 1_000),
        (b"k", b'{"user": "a", "page": "/x", "ts": "5"}', 1_000),
        (b"k", b'{"user": "a", "ts": 5}', 1_000),
        (b"k", b'{"user": null, "page": "/x", "ts": 5}', 1_000),
        (b"k", good, -1),
        (b"k", b"[1]", 1_000),
        (b"k", b"\xff", 1_000),
    ]
    assert _parse(spark, rows, InputSchema()) == [
        ("a", 1_000, "/x", None),
        ("a", 1_000, "/x", None),
        (None, 1_000, None, "field 'ts' must be an integer, got DECIMAL(2,1)"),
        (None, 1_000, None, "field 'ts' must be an integer, got STRING"),
        (None, 1_000, None, "missing field 'page'"),
        (None, 1_000, None, "field 'user' is null"),
        (None, -1, None, "negative record timestamp"),
        (None, 1_000, None, "value is not a JSON object"),
        (None, 1_000, None, "value is not UTF-8"),
    ]


def test_field_names_and_time_fields(spark: SparkSession) -> None:
    schema = InputSchema("user.id", "it's", "a b", ("n",))
    rows: list[tuple[bytes | None, bytes | None, int]] = [
        (None, b'{"user.id": "a", "it\'s": 7, "a b": "p", "n": 1}', 99),
        (None, b'{"user": {"id": "a"}, "it\'s": 7, "a b": "p", "n": 1}', 99),
        (None, b'{"user.id": "a", "it\'s": 1e3, "a b": "p", "n": 1}', 99),
        (None, b'{"user.id": "a", "it\'s": %d, "a b": "p", "n": 1}' % (MAX_EPOCH_MS + 1), 99),
        (None, b'{"user.id": "a", "it\'s": %d, "a b": "p", "n": 1}' % MAX_EPOCH_MS, 99),
        (None, b'{"user.id": "a", "it\'s": 99999999999999999999, "a b": "p", "n": 1}', 99),
    ]
    out_of_range = f"field 'it's' is not an epoch millisecond from 0 to {MAX_EPOCH_MS}"
    assert _parse(spark, rows, schema) == [
        ("a", 7, "p", None),
        (None, 99, None, "missing field 'user.id'"),  # a dotted name is one field, not a path
        (None, 99, None, "field 'it's' must be an integer (epoch milliseconds), got DOUBLE"),
        (None, 99, None, out_of_range),
        ("a", MAX_EPOCH_MS, "p", None),
        (None, 99, None, "field 'it's' must be an integer (epoch milliseconds), got DECIMAL(20,0)"),
    ]
    # The user from the key; nothing else read but a JSON object value.
    keyed = InputSchema(None, None, None, ())
    keyed_rows = [(b"bob", b"{}", 5), (b"", b"{}", 5), (None, b"{}", 5), (b"bob", b"null", 5)]
    assert _parse(spark, keyed_rows, keyed) == [
        ("bob", 5, None, None),
        ("", 5, None, None),
        (None, 5, None, "null key (the user)"),
        (None, 5, None, "value is not a JSON object"),
    ]


def test_errors_output_columns_are_unchanged() -> None:
    assert ERROR_COLUMNS == ("topic", "partition", "offset", "event_time", "error", "key", "value")
    assert MalformedRecord.__slots__ == (
        "topic",
        "partition",
        "offset",
        "timestamp_ms",
        "error",
        "key",
        "value",
    )


# -- pure: the schema, its options and settings ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"user_field": ""}, "user_field: a field name is a non-empty string"),
        ({"time_field": "a'b\"c"}, "time_field: a field name holds ' or \", not both"),
        ({"integer_fields": ("ts", "")}, "integer_fields: a field name is a non-empty string"),
    ],
)
def test_input_schema_rejects_bad_names(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InputSchema(**kwargs)  # type: ignore[arg-type]


def test_input_schema_describes_itself() -> None:
    assert InputSchema().describe() == (
        "user: value field 'user'; event time: record timestamp; "
        "also required: page (string), ts (integer)"
    )
    assert BY_KEY_AND_RECORD.describe() == "user: record key; event time: record timestamp"
    assert InputSchema(integer_fields=["a", "b"]).integer_fields == ("a", "b")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        InputSchema(integer_fields="ts")  # type: ignore[arg-type]


def _cli_schema(*options: str) -> InputSchema:
    argv = ["batch", "--bootstrap-servers", "b", "--topic", "t", "--gap", "1s", "--output", "o"]
    return input_schema(
        build_parser().parse_args([*argv, *options]), load_job_settings().input_schema()
    )


def test_cli_options_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cli_schema() == InputSchema()
    assert _cli_schema(
        "--user-from-key",
        "--time-field",
        "at",
        "--no-page-field",
        "--integer-field",
        "a",
        "--integer-field",
        "b",
    ) == InputSchema(None, "at", None, ("a", "b"))
    assert _cli_schema("--user-field", "uid", "--page-field", "url", "--no-integer-fields") == (
        InputSchema("uid", None, "url", ())
    )
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_USER_FROM_KEY", "true")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_TIME_FIELD", "at")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_PAGE_FIELD", "")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_INTEGER_FIELDS", "a, b")
    assert _cli_schema() == InputSchema(None, "at", None, ("a", "b"))
    # Each option wins over its variable.
    assert _cli_schema("--user-field", "uid", "--time-from-record", "--page-field", "p") == (
        InputSchema("uid", None, "p", ("a", "b"))
    )


def test_cli_rejects_bad_schema_options(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["stream", "--bootstrap-servers", "b", "--topic", "t", "--gap", "1s"]
    argv += ["--output", "o", "--checkpoint", "c"]
    for bad, message in [
        (["--user-field", ""], "argument --user-field: a field name is a non-empty string"),
        (["--user-field", "u", "--user-from-key"], "not allowed with argument --user-field"),
        (["--time-field", "a", "--time-from-record"], "not allowed with argument --time-field"),
    ]:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, *bad])
        assert message in capsys.readouterr().err
    text = build_parser().parse_args  # the help of every job shows the schema options
    for job in ("stream", "batch", "reconcile"):
        with pytest.raises(SystemExit):
            text([job, "--help"])
        shown = capsys.readouterr().out
        assert "input schema:" in shown
        assert "--user-from-key" in shown
        assert "--time-field NAME" in shown


def test_invalid_schema_env_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_INPUT_INTEGER_FIELDS", "a'\"b")
    argv = ["batch", "--bootstrap-servers", "b:9092", "--topic", "t", "--gap", "5s"]
    assert main([*argv, "--output", "o"]) == 2
    err = capsys.readouterr().err
    assert "env PROGRESS_CONTROL_SPARK_INPUT_INTEGER_FIELDS" in err
    assert "holds ' or \", not both" in err


def test_the_stream_command_stops_cleanly_on_sigterm_and_sigint() -> None:
    """Signals set an event the command's wait loop checks, then the handlers are restored."""
    from progress_control_apps.spark.cli import _stop_signals

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with _stop_signals() as stop:
            assert not stop.is_set()
            os.kill(os.getpid(), sig)
            assert stop.wait(5)
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

"""Spark sessionization jobs against a real broker and a real Spark (one session per module).

The streaming scenario runs once (module fixture) and several tests check what it observed:
- the same events without control records close no session, however long the job runs;
- control records with later timestamps, and nothing else, close every session;
- control records never reach the output, malformed values go to the errors output, counted.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from progress_control.protocol import ControlMarker, ControlRecord
from progress_control.settings import ConfigurationError
from progress_control.trust import (
    ControlRecordValidator,
    SigningKey,
    TrustPolicy,
    Verdict,
    parse_keys,
    sign,
)
from progress_control_apps.spark import (
    BatchRange,
    DifferenceKind,
    KafkaSource,
    MalformedRecord,
    RuntimeSession,
    Session,
    SessionizationStream,
    StreamConfig,
    StreamMetrics,
    batch_sessions,
    load_job_settings,
    parse_duration_ms,
    parse_instant_ms,
    read_sessions,
    reconcile,
    reconcile_topics,
    run_batch,
    sessionize,
)
from progress_control_apps.spark.batch import read_range
from progress_control_apps.spark.cli import build_parser, main
from progress_control_apps.spark.output import committed_files
from progress_control_apps.spark.reconcile import parse_runtime_session
from progress_control_apps.spark.sessionize import collect_sessions
from progress_control_apps.spark.source import moves_time, parse_records
from progress_control_apps.spark.stream import SESSIONS_SCHEMA
from progress_control_apps.spark.trust import RejectionLog, RejectionSample, with_control_verdict
from tests.helpers import unique_name, wait_for

GAP_MS = 5_000
PARTITIONS = 2
# Event time: ten minutes ago, whole seconds (recent enough that retention never deletes it).
T = (int(time.time()) - 600) * 1000

# Every session is still open at the last event (T+3.5s): its window ends at its last event
# + GAP_MS, after T+3.5s. Without ticks the watermark stops at T+3.5s and no session may close.
CLICKS = [  # (user, offset from T in ms); no two events of a user exactly GAP_MS apart
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
MALFORMED: list[tuple[bytes | None, str]] = [  # (value, expected error), no control header
    (b"not json", "value is not valid JSON"),
    (b'{"user": 7, "page": "/x", "ts": 1}', "field 'user' must be a string, got BIGINT"),
    (b'{"user": "dave", "page": "/x"}', "missing field 'ts'"),
    (None, "null value"),
]
TICK_MS = T + 20_000  # after every session's window end (at most T+3.5s + GAP_MS)


def _session(user: str, start: int, end: int, events: int) -> Session:
    return Session(user, T + start, T + end, events, T + start, T + end + GAP_MS)


EXPECTED = sorted(
    [
        _session("alice", 0, 2_000, 3),
        _session("bob", 500, 3_000, 3),
        _session("carol", 1_500, 3_500, 2),
    ]
)


@pytest.fixture(scope="module")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture(scope="module")
def producer(kafka_bootstrap: str) -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    yield producer
    producer.flush(30)


def _topic(admin: AdminClient, prefix: str, partitions: int = PARTITIONS) -> str:
    name = unique_name(prefix)
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    return name


def _produce_clicks(producer: Producer, topic: str) -> None:
    for user, offset in CLICKS:
        ts = T + offset
        value = json.dumps({"user": user, "page": f"/p{offset}", "ts": ts})
        producer.produce(topic, key=user, value=value, timestamp=ts)
    for i, (bad, _) in enumerate(MALFORMED):
        producer.produce(topic, key=b"bad", value=bad, partition=0, timestamp=T + 100 + i)
    # A broken marker: never data, never time; skipped and counted as a malformed control record.
    producer.produce(
        topic,
        key=b"__progress_control__",
        value=None,
        partition=1,
        timestamp=T + 200,
        headers=[("progress-control", b"\x01\x00")],
    )
    assert producer.flush(30) == 0


def _produce_ticks(producer: Producer, topic: str, timestamp_ms: int) -> None:
    for partition in range(PARTITIONS):
        marker = ControlMarker("spark-test", sequence=partition)
        producer.produce(**ControlRecord(topic, partition, timestamp_ms, marker).produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(30) == 0


def _read_topic(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[str, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("read")})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[tuple[str, str]] = []

    def enough() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            found.append(((msg.key() or b"").decode(), (msg.value() or b"").decode()))
        return len(found) >= count

    try:
        wait_for(enough, timeout_s=30, interval_s=0, message=f"{count} records on {topic}")
    finally:
        consumer.close()
    return found


@dataclass(frozen=True)
class StreamRun:
    """What the streaming scenario observed."""

    topic: str
    sessions_before_ticks: list[Session]
    active_before_ticks: bool
    metrics_before_ticks: StreamMetrics
    sessions: list[Session]
    errors: list[MalformedRecord]
    metrics: StreamMetrics
    kafka_output: list[tuple[str, str]]
    output_dir: Path


@pytest.fixture(scope="module")
def stream_run(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    producer: Producer,
    tmp_path_factory: pytest.TempPathFactory,
) -> StreamRun:
    topic = _topic(admin, "spark-clicks")
    output_topic = _topic(admin, "spark-sessions-out", partitions=1)
    _produce_clicks(producer, topic)
    work = tmp_path_factory.mktemp("stream")
    config = StreamConfig(
        source=KafkaSource(kafka_bootstrap, topic),
        gap_ms=GAP_MS,
        output_dir=str(work / "out"),
        checkpoint_dir=str(work / "checkpoints"),
        trigger_interval_ms=250,
        output_topic=output_topic,
    )
    with SessionizationStream(spark, config) as job:
        job.process_all_available()
        # Spark reports a watermark moved by a batch in the progress of the batch after it.
        metrics_before = wait_for(
            lambda: (
                m if (m := job.metrics()).data_records == len(CLICKS) and m.watermark_ms else None
            ),
            message="the data batch's metrics and the watermark it moved",
        )
        # No ticks: the watermark stops at the last record's timestamp, before every window
        # end, so nothing may close however many triggers pass. Watch for a while.
        deadline = time.monotonic() + 3.0
        before = job.sessions()
        while not before and time.monotonic() < deadline:
            time.sleep(0.25)
            before = job.sessions()
        active_before = job.is_active

        _produce_ticks(producer, topic, TICK_MS)
        sessions = job.wait_for_sessions(lambda s: len(s) >= len(EXPECTED), timeout_s=60)
        errors = wait_for(
            lambda: e if len(e := job.errors()) >= len(MALFORMED) else None,
            message="the errors output",
        )
        # The progress that reports the moved watermark can reach the listener after the
        # sessions it closed reached the sink.
        metrics = wait_for(
            lambda: (
                m
                if (m := job.metrics()).control_records == PARTITIONS
                and m.watermark_ms != metrics_before.watermark_ms
                else None
            ),
            message="control records counted and the watermark they moved",
        )
        kafka_output = _read_topic(kafka_bootstrap, output_topic, 1, len(EXPECTED))
        assert job.is_active
    return StreamRun(
        topic=topic,
        sessions_before_ticks=before,
        active_before_ticks=active_before,
        metrics_before_ticks=metrics_before,
        sessions=sessions,
        errors=errors,
        metrics=metrics,
        kafka_output=kafka_output,
        output_dir=work / "out",
    )


# -- streaming, against the broker ----------------------------------------------------------


@pytest.mark.broker
def test_sessions_close_on_control_records_and_not_without(stream_run: StreamRun) -> None:
    assert stream_run.active_before_ticks
    assert stream_run.metrics_before_ticks.watermark_ms == LAST_EVENT_MS  # no ticks yet
    assert stream_run.sessions_before_ticks == []
    # Only control records were produced after that, and every session closed.
    assert stream_run.sessions == EXPECTED
    assert stream_run.metrics.watermark_ms == TICK_MS


@pytest.mark.broker
def test_control_records_never_reach_the_output(stream_run: StreamRun) -> None:
    assert {s.user for s in stream_run.sessions} == {"alice", "bob", "carol"}
    assert sum(s.events for s in stream_run.sessions) == len(CLICKS)
    assert stream_run.metrics.control_records == PARTITIONS
    assert stream_run.metrics.data_records == len(CLICKS)
    assert all(e.error != "" and e.timestamp_ms != TICK_MS for e in stream_run.errors)
    # The Kafka sink: the same sessions, in the streams runtime's JSON format.
    from_kafka = sorted((key, json.loads(value)) for key, value in stream_run.kafka_output)
    assert from_kafka == sorted(
        (s.user, {"user": s.user, "start": s.start_ms, "end": s.end_ms, "count": s.events})
        for s in EXPECTED
    )


@pytest.mark.broker
def test_malformed_values_go_to_the_errors_output_and_are_counted(stream_run: StreamRun) -> None:
    on_partition_0 = [e for e in stream_run.errors if e.partition == 0]
    assert [(e.value, e.error) for e in on_partition_0] == MALFORMED
    assert [e.key for e in on_partition_0] == [b"bad"] * len(MALFORMED)
    # The broken marker is not in the errors output: a control record that fails validation is
    # skipped and counted, never handed to the bad-record path.
    assert [e for e in stream_run.errors if e.partition == 1] == []
    assert stream_run.metrics.rejected_control_records == {"malformed": 1}
    assert all(e.topic == stream_run.topic for e in stream_run.errors)
    assert stream_run.metrics.malformed_records == len(MALFORMED)
    # The job kept running: it processed the ticks that came after the bad records.
    assert stream_run.sessions == EXPECTED


@pytest.mark.broker
def test_committed_files_leave_out_crash_leftovers(
    spark: SparkSession, stream_run: StreamRun
) -> None:
    """What a job killed mid-batch leaves in its output folder, planted in a real run's: a file
    a task had just opened (0 bytes) and a complete one of the batch that never committed (its
    rows, which the restarted batch writes again)."""
    folder = stream_run.output_dir / "sessions"
    committed = committed_files(folder)
    assert committed
    assert all(p.parent == folder and p.name.startswith("part-") for p in committed)
    (folder / "part-00000-0-leftover-c000.snappy.parquet").write_bytes(b"")
    donor = max(committed, key=lambda p: p.stat().st_size)
    shutil.copy(donor, folder / "part-00001-0-leftover-c000.snappy.parquet")

    assert committed_files(folder) == committed
    # Spark's reader of the folder reads the log, and so does a reader given committed_files.
    assert read_sessions(spark, str(folder)) == EXPECTED
    given = spark.read.schema(SESSIONS_SCHEMA).parquet(*(str(p) for p in committed))
    assert collect_sessions(given) == EXPECTED
    # A reader that lists the folder reads the uncommitted rows too (Spark skips the 0-byte
    # file; pyarrow and DuckDB fail on it).
    listed = sorted(str(p) for p in folder.glob("part-*.parquet"))
    assert len(listed) == len(committed) + 2
    doubled = collect_sessions(spark.read.schema(SESSIONS_SCHEMA).parquet(*listed))
    assert len(doubled) > len(EXPECTED)


# -- batch and reconciliation, against the broker ---------------------------------------------


@pytest.mark.broker
def test_batch_matches_the_stream(
    spark: SparkSession, kafka_bootstrap: str, stream_run: StreamRun, tmp_path: Path
) -> None:
    source = KafkaSource(kafka_bootstrap, stream_run.topic)
    result = run_batch(
        spark,
        source,
        GAP_MS,
        str(tmp_path / "sessions"),
        errors_path=str(tmp_path / "errors"),
        closed_only=True,
    )
    assert read_sessions(spark, result.sessions_path) == stream_run.sessions == EXPECTED
    assert (result.sessions, result.data_records, result.control_records) == (3, 8, 2)
    assert result.malformed_records == len(MALFORMED)
    assert result.rejected_control_records == {"malformed": 1}
    assert result.max_event_time_ms == TICK_MS
    errors = spark.read.parquet(str(tmp_path / "errors")).orderBy("partition", "offset")
    assert [r["error"] for r in errors.collect()] == [m[1] for m in MALFORMED]

    # A time range: the records from T+1.8s on (ticks included).
    later = run_batch(
        spark, source, GAP_MS, str(tmp_path / "later"), BatchRange(start_time_ms=T + 1_800)
    )
    assert read_sessions(spark, later.sessions_path) == [
        _session("alice", 2_000, 2_000, 1),
        _session("bob", 2_500, 3_000, 2),
        _session("carol", 3_500, 3_500, 1),
    ]
    # And up to T+2.2s (exclusive): the first part of every session, no ticks.
    earlier = run_batch(
        spark, source, GAP_MS, str(tmp_path / "earlier"), BatchRange(end_time_ms=T + 2_200)
    )
    assert read_sessions(spark, earlier.sessions_path) == [
        _session("alice", 0, 2_000, 3),
        _session("bob", 500, 500, 1),
        _session("carol", 1_500, 1_500, 1),
    ]
    assert earlier.control_records == 0
    # An offset range that ends before the ticks: nothing is closed yet.
    before_ticks = json.dumps(
        {stream_run.topic: {str(p): n for p, n in _end_offsets(kafka_bootstrap, stream_run.topic)}}
    )
    open_only = run_batch(
        spark,
        source,
        GAP_MS,
        str(tmp_path / "open"),
        BatchRange(ending_offsets=before_ticks),
        closed_only=True,
    )
    assert open_only.sessions == 0
    assert open_only.control_records == 0


def _end_offsets(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """Each partition's end offset minus the one tick the scenario wrote last to it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("offsets")})
    try:
        return [
            (p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] - 1)
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _produce_runtime_sessions(
    producer: Producer, topic: str, sessions: list[RuntimeSession]
) -> None:
    for s in sessions:
        value = {"user": s.user, "start": s.start_ms, "end": s.end_ms, "count": s.events}
        producer.produce(topic, key=s.user, value=json.dumps(value), timestamp=s.end_ms)
    # The runtime's progress propagation writes control records to its output topics too.
    marker = ControlMarker("runtime", sequence=0)
    producer.produce(**ControlRecord(topic, 0, TICK_MS, marker).produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(30) == 0


@pytest.mark.broker
def test_reconciliation_with_the_runtime_sessions_topic(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    producer: Producer,
    stream_run: StreamRun,
    *,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime = [RuntimeSession(s.user, s.start_ms, s.end_ms, s.events) for s in EXPECTED]
    events = KafkaSource(kafka_bootstrap, stream_run.topic)

    correct = _topic(admin, "runtime-sessions", partitions=1)
    _produce_runtime_sessions(producer, correct, runtime)
    report = reconcile_topics(spark, events, correct, GAP_MS)
    assert report.equal, report.summary()
    assert (report.matched, report.runtime_sessions, report.spark_sessions) == (3, 3, 3)

    # Tampered: bob's count is off by one and carol's session is missing.
    tampered = _topic(admin, "runtime-sessions-bad", partitions=1)
    bob = next(s for s in runtime if s.user == "bob")
    bad = [s for s in runtime if s.user not in ("bob", "carol")]
    bad.append(RuntimeSession(bob.user, bob.start_ms, bob.end_ms, bob.events + 1))
    _produce_runtime_sessions(producer, tampered, bad)
    report = reconcile_topics(spark, events, tampered, GAP_MS)
    assert not report.equal
    assert report.matched == 1
    assert sorted((d.kind, d.user) for d in report.differences) == [
        (DifferenceKind.COUNT_MISMATCH, "bob"),
        (DifferenceKind.MISSING_IN_RUNTIME, "carol"),
    ]
    assert "runtime counted 4 events, Spark 3" in report.summary()

    # The command line: exit status 0 when equal, 1 with the differences printed.
    common = ["--bootstrap-servers", kafka_bootstrap, "--topic", stream_run.topic, "--gap", "5s"]
    assert main(["reconcile", *common, "--sessions-topic", correct]) == 0
    assert main(["reconcile", *common, "--sessions-topic", tampered]) == 1
    out = capsys.readouterr().out
    assert out.startswith("EQUAL")
    assert "DIFFERENT" in out
    assert "count-mismatch user='bob'" in out


# -- control-record trust: validated before they move time -------------------------------------

KEY = SigningKey("spark-k1", b"a shared secret of 32 bytes long")
OTHER_KEY = SigningKey("spark-k9", b"a key the job was never given!!")
FORGED_MS = int(time.time() * 1000) + 55 * 60_000  # well-formed, any producer can write it
LATE_CLICK_MS = T + 4_000  # alice, on time: after the watermark (T+3.5s), within her gap


def _produce_tick(
    producer: Producer,
    topic: str,
    partition: int,
    timestamp_ms: int,
    header: bytes | None = None,
    *,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
) -> None:
    """A control record with the given marker bytes (default: a valid v1 marker)."""
    value = ControlMarker("spark-test", partition).encode() if header is None else header
    producer.produce(
        topic,
        key=b"__progress_control__",
        value=None,
        partition=partition,
        timestamp=timestamp_ms,
        headers=list(headers or [("progress-control", value)]),
    )


def _signed(topic: str, partition: int, timestamp_ms: int, key: SigningKey, seq: int) -> bytes:
    return sign(ControlMarker("signer", seq), topic, partition, timestamp_ms, key).encode()


def _click(producer: Producer, topic: str, user: str, at: int) -> None:
    value = json.dumps({"user": user, "page": "/late", "ts": at})
    producer.produce(topic, key=user, value=value, timestamp=at)


def _run_until_closed(
    spark: SparkSession,
    config: StreamConfig,
    producer: Producer,
    send_rejected: Callable[[], int],
    send_valid: Callable[[], None],
) -> tuple[StreamMetrics, list[Session], list[Session], StreamMetrics]:
    """Start the job on the clicks, send the ticks that must be skipped (returns how many), wait
    until they are counted and an on-time click after them is processed, then send the valid
    ticks and wait for every session. Returns the metrics and sessions before the valid ticks,
    and the final sessions and metrics."""
    with SessionizationStream(spark, config) as job:
        job.process_all_available()
        expected_rejections = send_rejected()
        assert producer.flush(30) == 0
        # An on-time click after the bad ticks: had one of them moved the watermark, it would be
        # late (dropped) and every session would already be closed.
        _click(producer, config.source.topic, "alice", LATE_CLICK_MS)
        assert producer.flush(30) == 0
        before = wait_for(
            lambda: (
                m
                if (m := job.metrics()).control_records_skipped >= expected_rejections
                and m.data_records == len(CLICKS) + 1
                and (m.watermark_ms or 0) >= LATE_CLICK_MS
                else None
            ),
            timeout_s=60,
            message="the skipped ticks counted and the on-time click's watermark",
        )
        sessions_before = job.sessions()
        assert job.is_active
        send_valid()
        assert producer.flush(30) == 0
        sessions = job.wait_for_sessions(lambda s: len(s) >= len(EXPECTED), timeout_s=60)
        after = wait_for(
            lambda: m if ((m := job.metrics()).watermark_ms or 0) >= TICK_MS else None,
            timeout_s=60,
            message="the valid ticks' watermark",
        )
        assert job.is_active
    return before, sessions_before, sessions, after


EXPECTED_WITH_LATE_CLICK = sorted(
    [
        _session("alice", 0, LATE_CLICK_MS - T, 4),
        _session("bob", 500, 3_000, 3),
        _session("carol", 1_500, 3_500, 2),
    ]
)


@dataclass(frozen=True)
class TrustRun:
    topic: str
    before: StreamMetrics
    sessions_before: list[Session]
    sessions: list[Session]
    after: StreamMetrics
    logged: list[str]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def forged_run(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    producer: Producer,
    tmp_path_factory: pytest.TempPathFactory,
) -> TrustRun:
    """Default trust policy: a forged tick 55 min ahead, negative-timestamp and malformed ticks
    arrive while every session is open; then valid ticks at TICK_MS."""
    topic = _topic(admin, "spark-forged")
    _produce_clicks(producer, topic)
    work = tmp_path_factory.mktemp("forged")
    config = StreamConfig(
        KafkaSource(kafka_bootstrap, topic),
        GAP_MS,
        str(work / "out"),
        str(work / "ckpt"),
        trigger_interval_ms=250,
    )

    def rejected() -> int:
        for partition in range(PARTITIONS):
            _produce_tick(producer, topic, partition, FORGED_MS)  # future-timestamp
        _produce_tick(producer, topic, 0, -5)  # negative-timestamp
        _produce_tick(producer, topic, 1, TICK_MS, b"\x02garbage")  # malformed
        valid = ControlMarker("spark-test", 9).encode()
        two = [("progress-control", valid), ("progress-control", valid)]
        _produce_tick(producer, topic, 0, TICK_MS, headers=two)  # malformed: two headers
        return PARTITIONS + 3 + 1  # and the broken marker _produce_clicks wrote

    handler = _Collect()
    logging.getLogger("progress_control_apps.spark.trust").addHandler(handler)
    try:
        before, sessions_before, sessions, after = _run_until_closed(
            spark, config, producer, rejected, lambda: _produce_ticks(producer, topic, TICK_MS)
        )
    finally:
        logging.getLogger("progress_control_apps.spark.trust").removeHandler(handler)
    return TrustRun(topic, before, sessions_before, sessions, after, handler.messages)


@pytest.mark.broker
def test_forged_future_tick_does_not_move_the_watermark(forged_run: TrustRun) -> None:
    before = forged_run.before
    assert before.rejected_control_records["future-timestamp"] == PARTITIONS
    # The watermark is the on-time click's, not the forged tick's; nothing closed.
    assert before.watermark_ms == LATE_CLICK_MS
    assert before.max_event_time_ms == LATE_CLICK_MS
    assert forged_run.sessions_before == []
    # Valid ticks then close every session, the on-time click included, and the watermark is
    # theirs: it never went past them (a watermark never moves back).
    assert forged_run.sessions == EXPECTED_WITH_LATE_CLICK
    assert forged_run.after.watermark_ms == TICK_MS
    assert forged_run.after.control_records == PARTITIONS


@pytest.mark.broker
def test_negative_and_malformed_ticks_are_skipped_counted_and_logged_once(
    forged_run: TrustRun,
) -> None:
    assert forged_run.after.rejected_control_records == {
        "future-timestamp": PARTITIONS,
        "negative-timestamp": 1,
        "malformed": 3,
    }
    # Not data either: no session and no errors-output row came from a control record.
    assert forged_run.after.data_records == len(CLICKS) + 1
    assert forged_run.after.malformed_records == len(MALFORMED)
    logged = [m for m in forged_run.logged if "skipped a control record" in m]
    # Once per source and reason: both future ticks come from 'spark-test'.
    assert len([m for m in logged if "future-timestamp" in m]) == 1
    assert len([m for m in logged if "negative-timestamp" in m]) == 1
    # Malformed markers have no readable source: one line for all three, as in Python.
    assert [m for m in logged if ": malformed" in m] == [
        m for m in logged if ": malformed" in m and "source '?'" in m
    ]
    assert len([m for m in logged if ": malformed" in m]) == 1


@pytest.fixture(scope="module")
def signed_run(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    producer: Producer,
    tmp_path_factory: pytest.TempPathFactory,
) -> TrustRun:
    """A verification key: unsigned, tampered and unknown-key ticks (all later than the valid
    ones, within the skew) arrive while every session is open; then signed ticks at TICK_MS."""
    topic = _topic(admin, "spark-signed")
    _produce_clicks(producer, topic)
    work = tmp_path_factory.mktemp("signed")
    policy = TrustPolicy(verification_keys={KEY.key_id: KEY.secret})
    config = StreamConfig(
        KafkaSource(kafka_bootstrap, topic),
        GAP_MS,
        str(work / "out"),
        str(work / "ckpt"),
        trigger_interval_ms=250,
        trust=policy,
    )
    later = TICK_MS + 60_000

    def rejected() -> int:
        _produce_tick(producer, topic, 0, later)  # unsigned (v1)
        # Tampered: signed for TICK_MS, re-dated; and signed for the other partition.
        _produce_tick(producer, topic, 1, later, _signed(topic, 1, TICK_MS, KEY, 1))
        _produce_tick(producer, topic, 0, later, _signed(topic, 1, later, KEY, 2))
        _produce_tick(producer, topic, 1, later, _signed(topic, 1, later, OTHER_KEY, 3))
        return 4 + 1  # and the broken marker _produce_clicks wrote

    def valid() -> None:
        for partition in range(PARTITIONS):
            header = _signed(topic, partition, TICK_MS, KEY, 10 + partition)
            _produce_tick(producer, topic, partition, TICK_MS, header)

    before, sessions_before, sessions, after = _run_until_closed(
        spark, config, producer, rejected, valid
    )
    return TrustRun(topic, before, sessions_before, sessions, after, [])


@pytest.mark.broker
def test_with_a_key_only_signed_ticks_move_the_watermark(signed_run: TrustRun) -> None:
    assert signed_run.sessions_before == []
    assert signed_run.before.watermark_ms == LATE_CLICK_MS
    assert signed_run.sessions == EXPECTED_WITH_LATE_CLICK
    # The skipped ticks were dated a minute after the signed ones: had any counted, the
    # watermark would be there.
    assert signed_run.after.watermark_ms == TICK_MS
    assert signed_run.after.control_records == PARTITIONS
    assert signed_run.after.rejected_control_records == {
        "unsigned": 1,
        "bad-signature": 2,
        "unknown-key": 1,
        "malformed": 1,
    }


def _latest_rows_moving_time(spark: SparkSession, source: KafkaSource) -> str:
    """The rows that set a batch's event time, latest first (a failure's context: once in a
    few runs on four test workers, an unverified batch's event time was the wall clock)."""
    parsed = parse_records(read_range(spark, source, BatchRange()), None, source.schema)
    rows = parsed.where(moves_time()).orderBy(sf.desc("event_time")).limit(5).collect()
    return "\n".join(str(row.asDict()) for row in rows)


@pytest.mark.broker
def test_batch_applies_the_same_rules(
    spark: SparkSession,
    kafka_bootstrap: str,
    forged_run: TrustRun,
    signed_run: TrustRun,
    tmp_path: Path,
) -> None:
    forged = run_batch(
        spark,
        KafkaSource(kafka_bootstrap, forged_run.topic),
        GAP_MS,
        str(tmp_path / "forged"),
        closed_only=True,
    )
    assert read_sessions(spark, forged.sessions_path) == EXPECTED_WITH_LATE_CLICK
    assert forged.max_event_time_ms == TICK_MS
    assert forged.rejected_control_records == forged_run.after.rejected_control_records
    assert (forged.control_records, forged.data_records) == (PARTITIONS, len(CLICKS) + 1)

    policy = TrustPolicy(verification_keys={KEY.key_id: KEY.secret})
    source = KafkaSource(kafka_bootstrap, signed_run.topic)
    signed = run_batch(
        spark, source, GAP_MS, str(tmp_path / "signed"), closed_only=True, trust=policy
    )
    assert read_sessions(spark, signed.sessions_path) == EXPECTED_WITH_LATE_CLICK
    assert signed.max_event_time_ms == TICK_MS
    assert signed.rejected_control_records == signed_run.after.rejected_control_records
    # Without the key, the same topic's unsigned and tampered ticks are plain v1-style ticks
    # (a v2 reader without keys does not verify): they count, a minute later.
    unverified = run_batch(spark, source, GAP_MS, str(tmp_path / "unverified"))
    assert unverified.max_event_time_ms == TICK_MS + 60_000, _latest_rows_moving_time(spark, source)
    assert unverified.rejected_control_records == {"malformed": 1}


@pytest.mark.broker
def test_key_material_is_redacted_from_query_plans(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy = TrustPolicy(verification_keys={KEY.key_id: KEY.secret})
    topic = _topic(admin, "spark-plan")
    sessions = batch_sessions(spark, KafkaSource(kafka_bootstrap, topic), GAP_MS, trust=policy)
    sessions.explain(extended=True)
    plan = capsys.readouterr().out
    assert "sha2" in plan
    assert "redacted" in plan
    inner = bytes(b ^ 0x36 for b in KEY.secret.ljust(64, b"\0")).hex().upper()
    assert inner not in plan.upper()


# -- control-record trust: Spark's verdicts are the Python validator's --------------------------


HEADERS_TYPE = "headers array<struct<key:string,value:binary>>"  # Spark's Kafka source


def _trust_cases(now_ms: int) -> list[tuple[str, int, int, list[tuple[str, bytes | None]]]]:
    """Seeded records with the control header: valid, signed, tampered, truncated, padded,
    re-versioned, random bytes, invalid UTF-8, null, duplicated; timestamps around every limit
    (never within a minute of the skew limit, where the two clocks may differ)."""
    rnd = random.Random(15)  # noqa: S311 - test data, not cryptography
    keys = [KEY, OTHER_KEY, SigningKey("long", b"k" * 100)]
    cases = []
    for _ in range(300):
        topic = rnd.choice(["t", "clicks-ü", "x" * 60])
        part = rnd.choice([0, 1, 7, 2**31 - 2])
        ts = rnd.choice([now_ms - 1_000, 0, 1, -5, -1, now_ms + 200_000, now_ms + 400_000])
        marker = ControlMarker(
            rnd.choice(["a", "spark-test", "üüü", "z" * 255]), rnd.choice([0, 1, 12_345, 2**64 - 1])
        )
        signed = sign(marker, topic, part, max(ts, 0), rnd.choice(keys)).encode()
        kind = rnd.randrange(10)
        raw: bytes | None
        if kind == 0:
            raw = marker.encode()
        elif kind in (1, 2):
            raw = signed
        elif kind == 3:  # re-dated or moved to another partition
            raw = rnd.choice(
                [
                    sign(marker, topic, part, max(ts, 0) + 1, KEY).encode(),
                    sign(marker, topic, part + 1, max(ts, 0), KEY).encode(),
                ]
            )
        elif kind == 4:
            raw = signed[: rnd.randrange(len(signed))]
        elif kind == 5:
            raw = rnd.choice([marker.encode(), signed]) + b"\0" * rnd.randrange(1, 3)
        elif kind == 6:
            raw = bytes([rnd.choice([0, 1, 2, 3, 255])]) + signed[1:]
        elif kind == 7:
            raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(60)))
        elif kind == 8:
            bad = rnd.choice([b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"a\x80"])
            prefix = b"\x00" * 7 + b"\x05"
            raw = rnd.choice(
                [
                    b"\x01" + prefix + bytes([len(bad)]) + bad,
                    b"\x02" + prefix + b"\x01a" + bytes([len(bad)]) + bad + b"\0" * 32,
                ]
            )
        else:
            raw = None
        headers = [("progress-control", raw)]
        if rnd.random() < 0.05:
            headers.append(("progress-control", marker.encode()))
        elif rnd.random() < 0.1:
            headers.insert(0, ("other", b"1"))
        cases.append((topic, part, ts, headers))
    return cases


def test_spark_verdicts_equal_the_python_validator(spark: SparkSession) -> None:
    now = int(time.time() * 1000)
    cases = _trust_cases(now)
    rows = [
        (topic, part, ts, [{"key": k, "value": v} for k, v in headers])
        for topic, part, ts, headers in cases
    ]
    schema = "topic string, partition int, ms long, " + HEADERS_TYPE
    frame = spark.createDataFrame(rows, schema).select(
        "*", sf.timestamp_millis("ms").alias("timestamp")
    )
    long_key = b"k" * 100  # longer than SHA-256's block: HMAC hashes it first
    policies = [
        TrustPolicy(),
        TrustPolicy(verification_keys=parse_keys(f"{KEY.key_id}:{KEY.secret.decode()}")),
        TrustPolicy(verification_keys={"long": long_key, KEY.key_id: KEY.secret}),
        TrustPolicy(max_skew_ms=0, allowed_sources=frozenset({"a", "üüü"})),
        TrustPolicy(
            max_skew_ms=2**63,
            verification_keys={"long": long_key},
            allowed_sources=frozenset({"spark-test"}),
        ),
    ]
    seen: set[str] = set()
    for policy in policies:
        checked = with_control_verdict(frame, policy)
        spark_side = [row["control"] for row in checked.select("control").collect()]
        validator = ControlRecordValidator(policy)
        python_side = [validator.check(t, p, ts, h).value for t, p, ts, h in cases]
        assert spark_side == python_side
        seen |= set(python_side)
    assert seen == {v.value for v in Verdict}  # every branch was exercised


def test_a_row_without_the_header_has_no_verdict(spark: SparkSession) -> None:
    schema = (
        "topic string, partition int, ts timestamp, headers array<struct<key:string,value:binary>>"
    )
    frame = spark.createDataFrame(
        [("t", 0, None, None), ("t", 0, None, []), ("t", 0, None, [{"key": "x", "value": b"1"}])],
        schema,
    )
    checked = with_control_verdict(frame, TrustPolicy(), timestamp="ts")
    rows = checked.select("control", "control_source").collect()
    assert [(r["control"], r["control_source"]) for r in rows] == [(None, None)] * 3


def test_rejection_log_logs_once_per_source_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    log = RejectionLog("test")
    samples = [
        RejectionSample("future-timestamp", "s1", "t", 0),
        RejectionSample("future-timestamp", "s1", "t", 1),
        RejectionSample("unsigned", "s1", "t", 0),
    ]
    with caplog.at_level(logging.WARNING, logger="progress_control_apps.spark.trust"):
        log.report(samples)
        log.report(samples)
    assert len(caplog.records) == 2


# -- settings: env or a secrets file, never the command line -----------------------------------


def test_settings_from_env_and_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secrets = tmp_path / "keys"
    secrets.write_text("k2:another secret of 16+ bytes\n")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_MAX_CONTROL_SKEW_MS", "60000")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_CONTROL_VERIFICATION_KEYS", "k1:0123456789abcdef")
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_CONTROL_VERIFICATION_KEYS_FILE", str(secrets))
    monkeypatch.setenv("PROGRESS_CONTROL_SPARK_CONTROL_ALLOWED_SOURCES", "sidecar-a, sidecar-b")
    policy = load_job_settings().trust_policy()
    assert policy.max_skew_ms == 60_000
    assert dict(policy.verification_keys) == {
        "k1": b"0123456789abcdef",
        "k2": b"another secret of 16+ bytes",
    }
    assert policy.allowed_sources == frozenset({"sidecar-a", "sidecar-b"})
    assert (
        load_job_settings(
            control_verification_keys=None,
            control_verification_keys_file=None,
            control_allowed_sources=None,
        )
        .trust_policy()
        .verification_keys
        == {}
    )


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("CONTROL_VERIFICATION_KEYS", "k1-no-colon-secret-value", "keys are written as id:secret"),
        ("CONTROL_VERIFICATION_KEYS", "k1:short", "at least 16 bytes"),
        ("CONTROL_VERIFICATION_KEYS_FILE", "/nonexistent/keys", "cannot read"),
        ("MAX_CONTROL_SKEW_MS", "-1", "greater than or equal to 0"),
    ],
)
def test_invalid_settings_fail_fast_naming_the_setting(
    env: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(f"PROGRESS_CONTROL_SPARK_{env}", value)
    with pytest.raises(ConfigurationError) as failure:
        load_job_settings()
    text = str(failure.value)
    assert f"env PROGRESS_CONTROL_SPARK_{env}" in text
    assert message in text
    if env == "CONTROL_VERIFICATION_KEYS":
        assert value not in text  # a secret is never echoed
    # The command line checks them before Spark starts.
    argv = ["batch", "--bootstrap-servers", "b:9092", "--topic", "t", "--gap", "5s"]
    assert main([*argv, "--output", "o"]) == 2
    assert f"PROGRESS_CONTROL_SPARK_{env}" in capsys.readouterr().err


# -- the session boundary ----------------------------------------------------------------------


def test_an_event_exactly_one_gap_later_joins_the_session(spark: SparkSession) -> None:
    """Spark merges session windows that touch, like the runtime's inclusive sessions."""
    times = [T, T + 1_000, T + 1_000 + GAP_MS]
    events = spark.createDataFrame([("erin", t) for t in times], "user string, ms long").select(
        "user", sf.timestamp_millis("ms").alias("event_time")
    )
    rows = sessionize(events, GAP_MS).collect()
    assert [(r["events"], r["session_end"] - r["session_start"]) for r in rows] == [
        (3, timedelta(milliseconds=1_000 + GAP_MS))
    ]
    runtime = [RuntimeSession("erin", T, T + 1_000 + GAP_MS, 3)]
    spark_side = [RuntimeSession("erin", T, T + 1_000 + GAP_MS, int(rows[0]["events"]))]
    assert reconcile(runtime, spark_side, GAP_MS).equal


@pytest.mark.broker
def test_stream_boundary_edge_is_reported_as_a_boundary_split(
    spark: SparkSession,
    kafka_bootstrap: str,
    admin: AdminClient,
    producer: Producer,
    tmp_path: Path,
) -> None:
    """The one boundary difference: a tick exactly at ``last + gap`` closes the Spark session; a
    click at that same time then starts a new one (not late: it is *at* the watermark). A batch
    over the same records, like the runtime, has one session."""
    topic = _topic(admin, "spark-boundary", partitions=1)
    source = KafkaSource(kafka_bootstrap, topic)
    config = StreamConfig(
        source, GAP_MS, str(tmp_path / "out"), str(tmp_path / "ckpt"), trigger_interval_ms=200
    )

    def click(at: int) -> None:
        value = json.dumps({"user": "zoe", "page": "/", "ts": at})
        producer.produce(topic, key="zoe", value=value, partition=0, timestamp=at)
        assert producer.flush(30) == 0

    def tick(at: int, sequence: int) -> None:
        marker = ControlMarker("spark-boundary", sequence)
        producer.produce(**ControlRecord(topic, 0, at, marker).produce_kwargs())  # type: ignore[arg-type]
        assert producer.flush(30) == 0

    with SessionizationStream(spark, config) as job:
        click(T)
        tick(T + GAP_MS, 0)
        first = job.wait_for_sessions(lambda s: len(s) == 1, timeout_s=60)
        click(T + GAP_MS)
        tick(T + 3 * GAP_MS, 1)
        streamed = job.wait_for_sessions(lambda s: len(s) == 2, timeout_s=60)
    assert first == [_session("zoe", 0, 0, 1)]
    assert streamed == [_session("zoe", 0, 0, 1), _session("zoe", GAP_MS, GAP_MS, 1)]

    batch = run_batch(spark, source, GAP_MS, str(tmp_path / "batch"))
    assert read_sessions(spark, batch.sessions_path) == [_session("zoe", 0, GAP_MS, 2)]

    runtime = [RuntimeSession("zoe", T, T + GAP_MS, 2)]
    report = reconcile(runtime, streamed, GAP_MS)
    assert [d.kind for d in report.differences] == [DifferenceKind.BOUNDARY_SPLIT]
    assert "same event total" in report.differences[0].detail


# -- pure logic -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("30s", 30_000),
        ("500ms", 500),
        ("1.5s", 1_500),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1 day", 86_400_000),
        ("0", 0),
        (" 10 seconds ", 10_000),
    ],
)
def test_parse_duration(text: str, millis: int) -> None:
    assert parse_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["30", "30x", "s", "-1s", "1.0001s", ""])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_ms(text)


def test_parse_instant() -> None:
    assert parse_instant_ms("1714557600000") == 1_714_557_600_000
    assert parse_instant_ms("2024-05-01T10:00:00Z") == 1_714_557_600_000
    assert parse_instant_ms("2024-05-01T12:00:00+02:00") == 1_714_557_600_000
    assert parse_instant_ms("2024-05-01T10:00:00") == 1_714_557_600_000  # naive = UTC
    with pytest.raises(ValueError, match="point in time"):
        parse_instant_ms("yesterday")


def _rs(user: str, start: int, end: int, events: int) -> RuntimeSession:
    return RuntimeSession(user, start, end, events)


def test_reconcile_equal_ignores_duplicate_runtime_records() -> None:
    sessions = [_rs("a", 0, 10, 2), _rs("b", 5, 5, 1)]
    report = reconcile([*sessions, sessions[0]], sessions, gap_ms=100)
    assert report.equal
    assert (report.matched, report.duplicates_ignored) == (2, 1)
    assert report.summary().startswith("EQUAL")


def test_reconcile_lists_every_kind_of_difference() -> None:
    runtime = [
        _rs("a", 0, 10, 2),  # Spark counted 3
        _rs("b", 0, 10, 2),  # Spark has nothing for b
        _rs("c", 0, 250, 3),  # Spark: [0,50] + [150,250], 100 apart = gap: boundary split
        _rs("d", 0, 40, 2),  # Spark: [0, 60]: different bounds
    ]
    spark = [
        _rs("a", 0, 10, 3),
        _rs("c", 0, 50, 2),
        _rs("c", 150, 250, 1),
        _rs("d", 0, 60, 3),
        _rs("e", 7, 9, 2),  # nothing for e in the runtime
    ]
    report = reconcile(runtime, spark, gap_ms=100)
    kinds = {d.user: d.kind for d in report.differences}
    assert kinds == {
        "a": DifferenceKind.COUNT_MISMATCH,
        "b": DifferenceKind.MISSING_IN_SPARK,
        "c": DifferenceKind.BOUNDARY_SPLIT,
        "d": DifferenceKind.BOUNDS_MISMATCH,
        "e": DifferenceKind.MISSING_IN_RUNTIME,
    }
    assert report.matched == 0
    split = next(d for d in report.differences if d.user == "c")
    assert split.runtime == runtime[2]
    assert len(split.spark) == 2
    assert "exactly 100 ms after" in split.detail


def test_a_split_not_exactly_one_gap_apart_is_a_bounds_mismatch() -> None:
    report = reconcile([_rs("c", 0, 260, 3)], [_rs("c", 0, 50, 2), _rs("c", 160, 260, 1)], 100)
    assert [d.kind for d in report.differences] == [DifferenceKind.BOUNDS_MISMATCH]


def test_parse_runtime_session() -> None:
    value = b'{"user": "a", "start": 1, "end": 5, "count": 2}'
    assert parse_runtime_session(b"a", value) == RuntimeSession("a", 1, 5, 2)
    # Without "user" (the runtime's plain session counts), the key names the user.
    assert parse_runtime_session(b"k", b'{"start": 1, "end": 5, "count": 2}') == RuntimeSession(
        "k", 1, 5, 2
    )
    # The README's topology: the user in the key, the count named "clicks".
    readme = b'{"start": 1, "end": 5, "clicks": 2}'
    assert parse_runtime_session(b"k", readme) == RuntimeSession("k", 1, 5, 2)
    for bad in [
        None,
        b"nope",
        b"[1]",
        b'{"user": "a", "start": true, "end": 5, "count": 2}',
        b'{"user": "a", "start": 1, "end": "5", "count": 2}',
        b'{"user": "a", "start": 9, "end": 5, "count": 2}',
        b'{"user": "a", "start": 1, "end": 5, "count": 0}',
        b'{"user": "a", "start": 1, "end": 5, "count": null, "clicks": 2}',
        b'{"user": "a", "start": 1, "end": 5}',
    ]:
        assert parse_runtime_session(b"a", bad) is None


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--gap", "30x", "argument --gap: not a duration: '30x'"),
        ("--gap", "0s", "argument --gap: must be longer than 0"),
        ("--trigger", "soon", "argument --trigger: not a duration"),
        ("--max-offsets-per-trigger", "-5", "argument --max-offsets-per-trigger: must be positive"),
        ("--conf", "ui=off", "argument --conf: Spark settings start with 'spark.'"),
        ("--kafka-option", "novalue", "argument --kafka-option: expected KEY=VALUE"),
    ],
)
def test_cli_rejects_bad_options_naming_them(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--output", "o"]
    argv += ["--checkpoint", "c", "--gap", "30s", option, value]
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_parses_a_stream_job() -> None:
    argv = ["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--gap", "30s"]
    argv += ["--output", "o", "--checkpoint", "c", "--conf", "spark.executor.memory=2g"]
    argv += ["--kafka-option", "kafka.security.protocol=SSL", "--watermark-delay", "2s"]
    args = build_parser().parse_args(argv)
    assert (args.gap, args.watermark_delay, args.trigger) == (30_000, 2_000, 1_000)
    assert dict(args.conf) == {"spark.executor.memory": "2g"}
    assert dict(args.kafka_option) == {"kafka.security.protocol": "SSL"}


def test_normal_operation_messages_are_quiet(spark: SparkSession, tmp_path: Path) -> None:
    """ "Falling behind" and a stopped idle query's "Failed to cancel job group" are not logged
    (the stop itself lands between micro-batches: SessionizationStream.stop)."""
    from progress_control_apps.spark.session import QUIET_LOGGERS, _log4j2_file_config

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    for name, level in QUIET_LOGGERS.items():
        assert str(log4j.LogManager.getLogger(name).getLevel()) == level.upper()
    config = _log4j2_file_config(tmp_path / "spark.log").read_text()
    for name in QUIET_LOGGERS:
        assert f".name = {name}\n" in config

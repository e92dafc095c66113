"""Repartitioning with progress propagation, and bad input, against the real broker."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from interceptor import Producer as InstrumentedProducer
from progress_control.protocol import is_control_record
from streams_runtime import (
    App,
    BadRecordError,
    SessionWindows,
    StreamsBuilder,
    until_window_closes,
)
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker


def test_ticks_cross_the_repartition_topic(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    clicks, sessions = create_topic("clicks", partitions=2), create_topic("sessions")
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(clicks)
        .select_key(lambda _page, click: click["user"])  # keyed by page upstream
        .group_by_key()  # repartitions by user
        .windowed_by(SessionWindows(gap_ms=1500))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, n))
        .to(sessions)
    )
    app = run_app(builder, application_id=unique_name("repartition"), progress_interval_ms=200)
    producer = InstrumentedProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "progress.control.start.ms": 300,
            "progress.control.backoff.ms": 300,
            "progress.control.backoff.exponential": False,
            "progress.control.max.records": 40,
        }
    )
    for i, user in enumerate(["ann", "ben", "ann", "cid", "ben", "ann"]):
        now = int(time.time() * 1000)
        producer.produce(clicks, key=f"/page/{i}", value=json.dumps({"user": user}), timestamp=now)
        time.sleep(0.02)
    producer.flush(10)

    reader = reader_for(sessions, 1)

    def counts() -> dict[str, int]:
        return {
            (m.key() or b"").decode(): json.loads(m.value() or b"0")
            for m in reader.read()
            if m.value() is not None
        }

    # No new data after the burst: only ticks on the input move time, through the
    # repartition topic, to the aggregation.
    assert wait_for(lambda: len(counts()) == 3 and counts(), timeout_s=30) == {
        "ann": 3,
        "ben": 2,
        "cid": 1,
    }
    repartition = next(t for t in app.topology.repartition_topics)
    ticks = reader_for(repartition, 2).ticks()
    assert ticks, "the runtime propagated stream time into the repartition topic"
    producer.close()


@pytest.fixture
def bad_input(create_topic: Callable[..., str], kafka_bootstrap: str) -> tuple[str, str]:
    """An input topic with good and bad records: bad JSON, a user-function failure, a negative
    timestamp."""
    source, sink = create_topic("numbers"), create_topic("doubled")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    values = [b'{"x": 1}', b"not json", b'{"x": 2}', b'{"y": 3}', b'{"x": 4}']
    for value in values:
        producer.produce(source, key=b"k", value=value, headers=[("trace", b"t-1")])
    producer.produce(source, key=b"k", value=b'{"x": 5}', timestamp=-5)
    producer.flush(10)
    return source, sink


def doubling(source: str, sink: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.stream(source).map_values(lambda v: v["x"] * 2).to(sink)
    return builder


def test_dead_letter_keeps_the_original_bytes(
    bad_input: tuple[str, str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
) -> None:
    source, sink = bad_input
    app_id = unique_name("dlq")
    app = run_app(doubling(source, sink), application_id=app_id, bad_record_policy="dead-letter")
    output = reader_for(sink, 1)
    assert wait_for(lambda: [m.value() for m in output.read()] or None) == [b"2", b"4", b"8"]
    dlq = reader_for(f"{app_id}-dlq", 1)
    letters = wait_for(lambda: len(dlq.read()) >= 3 and dlq.records)
    by_reason = {dict(m.headers() or [])["pc-dlq-reason"].decode(): m for m in letters}
    assert sorted(by_reason) == ["deserialization", "negative-timestamp", "processing"]
    expected = {
        "deserialization": (1, b"not json"),
        "processing": (3, b'{"y": 3}'),
        "negative-timestamp": (5, b'{"x": 5}'),
    }
    for reason, (offset, value) in expected.items():
        letter = by_reason[reason]
        headers = dict(letter.headers() or [])
        assert letter.value() == value  # the original bytes
        assert letter.key() == b"k"
        assert headers["pc-dlq-topic"] == source.encode()
        assert headers["pc-dlq-offset"] == str(offset).encode()
    assert dict(by_reason["processing"].headers() or [])["trace"] == b"t-1"  # headers kept
    assert b"KeyError" in dict(by_reason["processing"].headers() or [])["pc-dlq-error"]
    assert app.metrics.total("streams_bad_records", action="dead-lettered") == 3


def test_log_and_skip_counts(
    bad_input: tuple[str, str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
) -> None:
    source, sink = bad_input
    app = run_app(doubling(source, sink), bad_record_policy="log-and-skip")
    output = reader_for(sink, 1)
    assert wait_for(lambda: [m.value() for m in output.read()] or None) == [b"2", b"4", b"8"]
    assert app.metrics.total("streams_bad_records", action="skipped") == 3


def test_fail_stops_without_losing_the_bad_record(
    bad_input: tuple[str, str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = bad_input
    app_id = unique_name("fail")
    app = run_app(doubling(source, sink), application_id=app_id, bad_record_policy="fail")
    wait_for(lambda: app.state == "ERROR", timeout_s=30)
    assert isinstance(app.error, BadRecordError)
    assert app.error.record.offset == 1
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": app_id})
    try:
        [committed] = consumer.committed([TopicPartition(source, 0)], timeout=10)
    finally:
        consumer.close()
    # Everything before the bad record is committed; the bad record itself is not.
    assert committed.offset == 1


def test_control_records_never_reach_user_code(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("mixed"), create_topic("seen")
    seen: list[object] = []
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.stream(source).peek(lambda k, v: seen.append((k, v))).to(sink)
    app = run_app(builder, progress_propagation=False, metrics_port=0)
    producer = InstrumentedProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "progress.control.start.ms": 100,
            "progress.control.backoff.ms": 100,
            "progress.control.backoff.exponential": False,
            "progress.control.max.records": 5,
        }
    )
    producer.produce(source, key="a", value=b'{"n": 1}')
    producer.flush(10)
    wait_for(lambda: app.metrics.total("streams_control_records") >= 5, timeout_s=20)
    assert seen == [("a", {"n": 1})]
    assert not any(is_control_record(m) for m in reader_for(sink, 1).read())
    producer.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{app.metrics_port}/metrics") as response:
        text = response.read().decode()
    assert 'streams_records_processed_total{task="0_0"} 1.0' in text
    assert "streams_control_records_total" in text

"""Seed scenario against the real broker: session windows with suppress-until-window-closes emit
each session exactly once after the gap, driven only by control records from the interceptor."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.sessions_app import session_counts
from interceptor import Producer as InstrumentedProducer
from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker

GAP_MS = 2000


def session_topology(source: str, sink: str) -> StreamsBuilder:
    return session_counts(source, sink, GAP_MS, value_serde=Json())


def produce_clicks(producer: Any, topic: str, clicks: dict[str, int]) -> int:
    """Each user clicks ``n`` times, 50 ms apart, stamped with wall-clock time; returns the
    timestamp of the last click."""
    last = 0
    for user, n in clicks.items():
        for _ in range(n):
            last = int(time.time() * 1000)
            producer.produce(topic, key=user, value=json.dumps({"page": "/"}), timestamp=last)
            time.sleep(0.05)
    producer.flush(10)
    return last


def sessions_of(reader: TopicReader) -> list[tuple[str, dict[str, int]]]:
    return [
        ((m.key() or b"").decode(), json.loads(m.value() or b"null"))
        for m in reader.read()
        if m.value() is not None
    ]


def test_sessions_close_on_ticks_alone(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    clicks, sessions = create_topic("clicks", partitions=3), create_topic("sessions")
    run_app(session_topology(clicks, sessions))
    producer = InstrumentedProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "progress.control.start.ms": 300,
            "progress.control.backoff.ms": 300,
            "progress.control.backoff.exponential": False,
            "progress.control.max.records": 40,
        }
    )
    expected = {"alice": 3, "bob": 2, "carol": 4, "dave": 1}
    last = produce_clicks(producer, clicks, expected)
    reader = reader_for(sessions, 1)
    # No session can be final before stream time passes its end by the gap.
    assert sessions_of(reader) == [] or time.time() * 1000 >= last + GAP_MS

    def all_sessions() -> list[tuple[str, dict[str, int]]] | None:
        sessions = sessions_of(reader)
        return sessions if len(sessions) >= len(expected) else None

    found = wait_for(all_sessions, timeout_s=30, message="every session emitted")
    emitted_at = time.time() * 1000
    assert emitted_at >= last + GAP_MS
    assert {user: value["count"] for user, value in found} == expected
    # Exactly once: nothing more after further ticks.
    time.sleep(1.5)
    assert len(sessions_of(reader)) == len(expected)
    for _, value in found:
        assert value["end"] - value["start"] <= 50 * 4 + 500
    producer.close()


def test_no_ticks_no_sessions(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    clicks, sessions = create_topic("clicks", partitions=3), create_topic("sessions")
    app = run_app(session_topology(clicks, sessions))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    last = produce_clicks(producer, clicks, {"alice": 2, "bob": 2})
    reader = reader_for(sessions, 1)
    wait_for(
        lambda: (
            app.metrics.registry.get_sample_value(
                "streams_records_processed_total", {"task": "0_0"}
            )
            is not None
        ),
        message="records processed",
    )
    # Well past the gap on the wall clock, but stream time has not moved: nothing is final.
    wait_for(lambda: time.time() * 1000 > last + 2 * GAP_MS, timeout_s=10)
    assert sessions_of(reader) == []

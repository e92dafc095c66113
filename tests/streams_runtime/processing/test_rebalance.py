"""Rebalances against the real broker: a second instance joins mid-stream and the first leaves;
revoked tasks are committed and closed, their state moves through the changelogs, and the
exactly-once output still equals the ground truth."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from harness.sessions_app import session_counts
from progress_control.protocol import ControlMarker, ControlRecord
from streams_runtime import App
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.test_restart import (
    GAP_MS,
    expected_sessions,
    generate_events,
    read_sessions,
)

pytestmark = pytest.mark.broker

PARTITIONS = 4


def test_instances_join_and_leave_mid_stream(
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    source, sink = create_topic("events", partitions=PARTITIONS), create_topic("sessions")
    events = generate_events(6000, seed=3)
    settings = {
        "application_id": unique_name("rebalance"),
        "bootstrap_servers": kafka_bootstrap,
        "processing_guarantee": "exactly_once",
    }
    first = App(session_counts(source, sink, GAP_MS), state_dir=tmp_path / "a", **settings)
    second = App(session_counts(source, sink, GAP_MS), state_dir=tmp_path / "b", **settings)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})

    def produce(part: list[tuple[str, int]]) -> None:
        for key, ts in part:
            producer.produce(source, key=key, value=b"\0" * 8, timestamp=ts)
        producer.flush(10)

    def tasks(app: App) -> float:
        return app.metrics.registry.get_sample_value("streams_active_tasks") or 0

    third = len(events) // 3
    try:
        first.start()
        produce(events[:third])
        wait_for(lambda: tasks(first) == PARTITIONS, timeout_s=60, message="first owns all")
        second.start()
        wait_for(
            lambda: tasks(first) + tasks(second) == PARTITIONS and tasks(second) > 0,
            timeout_s=60,
            message="tasks shared after the second instance joined",
        )
        produce(events[third : 2 * third])
        time.sleep(1)
        first.close()
        wait_for(lambda: tasks(second) == PARTITIONS, timeout_s=60, message="second owns all")
        produce(events[2 * third :])
        end = max(ts for _, ts in events) + 10 * GAP_MS
        for partition in range(PARTITIONS):
            tick = ControlRecord(source, partition, end, ControlMarker("test", partition))
            producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        producer.flush(10)
        expected = expected_sessions(events)
        reader = reader_for(sink, 1)
        wait_for(lambda: set(read_sessions(reader)) >= set(expected), timeout_s=90, interval_s=0.5)
        assert read_sessions(reader) == expected
        assert first.error is None
        assert second.error is None
    finally:
        first.close()
        second.close()

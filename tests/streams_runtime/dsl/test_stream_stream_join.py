"""Windowed stream-stream joins against the real broker: the join buffers (each side's window store
and the shared outer buffer) survive a restart, restored from their changelogs (memory) or
reopened (SQLite). That unjoined results come out on ticks alone is
tests/streams_runtime/topologies/test_joins_driver.py (the driver)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from streams_runtime import App, JoinWindows, StreamsBuilder
from streams_runtime.serdes import String
from tests.conformance.broker_runs import ProcessedCheck
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker

BASE_MS = (int(time.time()) - 3600) * 1000  # an hour back: ticks are not ahead of the clock
WINDOWS = JoinWindows.of_time_difference(1_000, 500)

Out = tuple[str | None, str | None, int]


def joins(left: str, right: str, left_out: str, outer_out: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    a, b = builder.stream(left), builder.stream(right)

    def pair(x: str | None, y: str | None) -> str:
        return f"{x}|{y}"

    a.left_join(b, pair, WINDOWS).to(left_out)
    a.outer_join(b, pair, WINDOWS).to(outer_out)
    return builder


def produce(bootstrap: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, at in records:
        producer.produce(topic, value.encode(), key.encode(), 0, timestamp=BASE_MS + at)
    assert producer.flush(10) == 0


def tick(bootstrap: str, topic: str, at: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    marker = ControlMarker("test", at)
    producer.produce(**ControlRecord(topic, 0, BASE_MS + at, marker).produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(10) == 0


def data(reader: TopicReader) -> list[Out]:
    return [
        (
            None if m.key() is None else (m.key() or b"").decode(),
            None if m.value() is None else (m.value() or b"").decode(),
            m.timestamp()[1] - BASE_MS,
        )
        for m in reader.read()
        if not is_control_record(m)
    ]


@pytest.mark.parametrize("engine", ["memory", "sqlite", "rocksdb"])
def test_join_buffers_survive_a_restart(
    engine: str,
    *,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    left, right, left_out, outer_out = (create_topic(n) for n in ("l", "r", "lo", "oo"))
    settings = {
        "application_id": unique_name("join-restart"),
        "state_engine": engine,
        "state_dir": tmp_path / "state",
    }
    first = run_app(joins(left, right, left_out, outer_out), **settings)
    produce(kafka_bootstrap, left, [("k", "a", 10_000), ("j", "b", 10_100)])
    produce(kafka_bootstrap, right, [("m", "y", 10_050)])
    check = ProcessedCheck(kafka_bootstrap, str(settings["application_id"]), [left, right])
    try:
        wait_for(check, timeout_s=30, interval_s=0.2, message="the first app to commit")
    finally:
        check.close()
    first.close()
    run_app(joins(left, right, left_out, outer_out), **settings)
    # k joins the restored left buffer; j and m never find a partner and come out on a tick.
    produce(kafka_bootstrap, right, [("k", "x", 10_900)])
    tick(kafka_bootstrap, left, 20_000)
    outer_reader, left_reader = reader_for(outer_out, 1), reader_for(left_out, 1)
    wait_for(lambda: len(data(outer_reader)) >= 3, message="every outer join result")
    time.sleep(0.5)
    assert sorted(data(outer_reader), key=str) == sorted(
        [("k", "a|x", 10_900), ("j", "b|None", 10_100), ("m", "None|y", 10_050)], key=str
    )
    assert sorted(data(left_reader), key=str) == [("j", "b|None", 10_100), ("k", "a|x", 10_900)]

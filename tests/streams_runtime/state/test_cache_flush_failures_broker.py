"""User code below a cached aggregation raises on one key while the record cache flushes at a
commit, against the real broker, for each store kind: under ``log-and-skip`` that key's update
is skipped and counted, and every other key of the same flush still comes out (the pure logic is
test_cache_flush_failures.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from progress_control.protocol import is_control_record
from streams_runtime import App, SessionWindows, StreamsBuilder, TimeWindows
from streams_runtime.serdes import String
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker

KEYS = ["a", "b", "c", "d"]
BAD = "b"
BASE_MS = (int(time.time()) - 3600) // 60 * 60_000


def _unless_bad(key: Any, value: str) -> tuple[str, str]:
    name = getattr(key, "key", key)  # windowed or not
    if name == BAD:
        raise ValueError(f"user code cannot take {name}")
    return name, value


def _topology(kind: str, source: str, out: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    grouped = builder.stream(source).group_by_key()
    latest: Any
    if kind == "key-value":
        latest = grouped.reduce(lambda _old, new: new, name="latest")
    elif kind == "window":
        latest = grouped.windowed_by(TimeWindows.of_size(60_000)).reduce(
            lambda _old, new: new, name="latest"
        )
    else:
        latest = grouped.windowed_by(SessionWindows.with_inactivity_gap(60_000)).reduce(
            lambda _old, new: new, name="latest"
        )
    latest.to_stream().map(_unless_bad).to(out)
    return builder


@pytest.mark.parametrize("kind", ["key-value", "window", "session"])
def test_a_key_that_fails_below_the_cache_loses_no_other_key_of_its_flush(
    kind: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, out = create_topic("flushed-in"), create_topic("flushed-out")
    app = run_app(
        _topology(kind, source, out),
        bad_record_policy="log-and-skip",
        statestore_cache_max_bytes=1 << 20,
        commit_interval_ms=1_000,  # one flush takes all four keys
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n, key in enumerate(KEYS):
        producer.produce(source, b"v", key.encode(), timestamp=BASE_MS + n)
    assert producer.flush(10) == 0
    reader = reader_for(out, 1)

    def keys() -> list[str]:
        return sorted((m.key() or b"").decode() for m in reader.read() if not is_control_record(m))

    assert wait_for(lambda: keys() if len(keys()) >= 3 else None, timeout_s=60) == ["a", "c", "d"]
    assert wait_for(lambda: app.metrics.total("streams_bad_records") or None, timeout_s=30) == 1
    assert app.state == "RUNNING"

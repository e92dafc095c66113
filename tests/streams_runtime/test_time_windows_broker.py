"""Time windows against the real broker: a windowed store and its suppression buffer survive a
restart (both state engines, restored from their changelogs). That a final result comes out on
control records alone is tests/streams_runtime/topologies/test_time_windows_driver.py (the
driver)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from streams_runtime import App, StateEngine, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker

# An hour back (no control record ahead of the wall clock), on a whole minute: windows of 2 s
# start at BASE_MS + multiples of 2000.
BASE_MS = (int(time.time()) // 60 - 60) * 60_000
WINDOWS = TimeWindows.of_size(2_000, grace=500)


def _produce(bootstrap: str, topic: str, records: list[tuple[str | None, int]]) -> None:
    """``(key, at)`` data records (``key`` ``None``: a control record) at ``BASE_MS + at``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for n, (key, at) in enumerate(records):
        if key is None:
            marker = ControlMarker("time-windows-test", n + at)
            producer.produce(**ControlRecord(topic, 0, BASE_MS + at, marker).produce_kwargs())
        else:
            producer.produce(topic, b"{}", key.encode(), 0, timestamp=BASE_MS + at)
    assert producer.flush(10) == 0


def _topology(source: str, updates: str, finals: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    counts = builder.stream(source).group_by_key().windowed_by(WINDOWS).count(name="counts")

    def row(w: Any, n: int) -> tuple[str, dict[str, int]]:
        return w.key, {"start": w.start - BASE_MS, "end": w.end - BASE_MS, "n": n}

    counts.to_stream().map(row).to(updates)
    counts.suppress(until_window_closes(), name="final").to_stream().map(row).to(finals)
    return builder


def _rows(messages: list[Message]) -> list[tuple[str, dict[str, int], int]]:
    """Data records as (key, value, timestamp relative to ``BASE_MS``)."""
    return [
        ((m.key() or b"").decode(), json.loads(m.value() or b"null"), m.timestamp()[1] - BASE_MS)
        for m in messages
        if not is_control_record(m)
    ]


@pytest.mark.parametrize("engine", [StateEngine.MEMORY, StateEngine.SQLITE])
def test_windows_and_final_results_survive_a_restart(  # noqa: PLR0917 (pytest fixtures)
    engine: StateEngine,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    source, updates, finals = (create_topic(n) for n in ("clicks", "updates", "finals"))
    app_id = unique_name("time-windows")
    first = run_app(
        _topology(source, updates, finals),
        application_id=app_id,
        state_engine=engine,
        state_dir=tmp_path / "first",
    )
    _produce(kafka_bootstrap, source, [("a", 100), ("a", 300), ("b", 1500)])
    update_reader = reader_for(updates, 1)
    wait_for(lambda: len(_rows(update_reader.read())) >= 3, message="updates before the restart")
    first.close()

    # A new state directory: the window store and the suppression buffer come back from their
    # changelogs. a's window goes on counting; b's final result keeps its timestamp.
    run_app(
        _topology(source, updates, finals),
        application_id=app_id,
        state_engine=engine,
        state_dir=tmp_path / "second",
    )
    _produce(kafka_bootstrap, source, [("a", 700), (None, 2500)])
    output = reader_for(finals, 1)
    found = wait_for(
        lambda: sorted(_rows(output.read())) if len(_rows(output.read())) >= 2 else None,
        message="final results after the restart",
    )
    assert found == [
        ("a", {"start": 0, "end": 2000, "n": 3}, 700),
        ("b", {"start": 0, "end": 2000, "n": 1}, 1500),
    ]
    assert _rows(update_reader.read())[-1] == ("a", {"start": 0, "end": 2000, "n": 3}, 700)

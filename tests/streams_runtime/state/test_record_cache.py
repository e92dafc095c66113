"""The record cache against the broker: with it on, a table aggregation and a windowed one
forward fewer intermediate updates and the same final results, at least once and exactly
once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord
from streams_runtime import (
    App,
    SessionWindows,
    SlidingWindows,
    StateEngine,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.queries.results import QueryError
from streams_runtime.serdes import Integer, Json, String
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.processors.test_tables_broker import produce, updates

KEYS = ("a", "b", "c", "d")
PER_KEY = 50

broker = pytest.mark.broker


def _final_counts(reader: TopicReader) -> list[tuple[Any, Any, int]]:
    """Every update, once each key's count is final."""
    decode: Callable[[bytes], Any] = Integer().deserialize
    found: list[tuple[Any, Any, int]] = []

    def done() -> bool:
        found[:] = updates(reader.read(), decode)  # read() returns everything so far
        return {key: value for key, value, _ in found} == dict.fromkeys(KEYS, PER_KEY)

    wait_for(done, timeout_s=60, message="final counts")
    return found


@broker
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_cache_forwards_fewer_updates_and_the_same_final_counts(
    guarantee: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source = create_topic("clicks")
    records = [(KEYS[i % len(KEYS)], i, 1000 + i) for i in range(PER_KEY * len(KEYS))]
    produce(kafka_bootstrap, source, records)
    outputs: dict[int, list[tuple[Any, Any, int]]] = {}
    for cache_bytes in (0, 10 * 1024 * 1024):
        sink = create_topic("counts")
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
        builder.stream(source).group_by_key().count(name="counts").to_stream().to(sink)
        run_app(
            builder,
            processing_guarantee=guarantee,
            commit_interval_ms=1000,
            statestore_cache_max_bytes=cache_bytes,
        )
        outputs[cache_bytes] = _final_counts(reader_for(sink, 1))
    uncached, cached = outputs[0], outputs[10 * 1024 * 1024]
    assert len(uncached) == len(records)
    assert len(cached) < len(uncached) / 4
    # Every key's updates still come in order, and the last one is stamped as without a cache.
    for key in KEYS:
        counts = [value for k, value, _ in cached if k == key]
        assert counts == sorted(counts)
        assert [u for u in cached if u[0] == key][-1] == [u for u in uncached if u[0] == key][-1]


@broker
def test_queries_read_through_the_cache(
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    # A commit interval far longer than the test: nothing is flushed, yet queries see every
    # count, as Kafka Streams' queries read through its cache.
    source = create_topic("clicks")
    records = [(KEYS[i % len(KEYS)], i, 1000 + i) for i in range(PER_KEY * len(KEYS))]
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.stream(source).group_by_key().count(name="counts")
    app = run_app(builder, commit_interval_ms=600_000, statestore_cache_max_bytes=10 * 1024 * 1024)
    produce(kafka_bootstrap, source, records)

    def counted() -> bool:
        assert app.queries is not None
        try:
            return all(app.queries.get_local("counts", key).value == PER_KEY for key in KEYS)
        except QueryError:  # not running as active yet
            return False

    wait_for(counted, timeout_s=60, message="every count answered from the cache")


# Windowed: an hour back (no tick ahead of the wall clock; changelog retention keeps it), on a
# whole minute, so windows of 1 s start at BASE_MS + multiples of 1000.
BASE_MS = (int(time.time()) // 60 - 60) * 60_000
WINDOWS = TimeWindows.of_size(1_000, grace=200)


def _windowed_topology(source: str, updates: str, finals: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    counts = builder.stream(source).group_by_key().windowed_by(WINDOWS).count(name="counts")

    def row(w: Any, n: int) -> tuple[str, list[int]]:
        return w.key, [w.start - BASE_MS, n]

    counts.to_stream().map(row).to(updates)
    counts.suppress(until_window_closes(), name="final").to_stream().map(row).to(finals)
    return builder


def _windowed_rows(reader: TopicReader) -> list[tuple[Any, Any, int]]:
    return [(k, v, ts - BASE_MS) for k, v, ts in updates(reader.read())]


def _wait_for_rows(reader: TopicReader, count: int, message: str) -> list[tuple[Any, Any, int]]:
    found: list[tuple[Any, Any, int]] = []

    def enough() -> bool:
        found[:] = _windowed_rows(reader)
        return len(found) >= count

    wait_for(enough, timeout_s=60, message=message)
    return found


@broker
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_windowed_cache_forwards_fewer_updates_and_the_same_final_results(
    guarantee: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source = create_topic("clicks")
    # 4 keys over 3 s of event time, a little out of order; the last record closes every window.
    records = [(KEYS[i % 4], i, BASE_MS + 100 + 14 * i - 40 * (i % 3)) for i in range(200)]
    records.append(("z", 0, BASE_MS + 60_000))
    outputs = {}
    for cache_bytes in (0, 10 * 1024 * 1024):  # both apps run at once
        sinks = create_topic("updates"), create_topic("finals")
        run_app(
            _windowed_topology(source, *sinks),
            processing_guarantee=guarantee,
            commit_interval_ms=500,
            statestore_cache_max_bytes=cache_bytes,
        )
        outputs[cache_bytes] = tuple(reader_for(sink, 1) for sink in sinks)
    produce(kafka_bootstrap, source, records)
    expected_finals = 4 * 3
    finals = {
        cache: _wait_for_rows(readers[1], expected_finals, f"finals with a {cache} bytes cache")
        for cache, readers in outputs.items()
    }
    uncached = _wait_for_rows(outputs[0][0], len(records), "updates without a cache")
    cached = _windowed_rows(outputs[10 * 1024 * 1024][0])  # flushed before the finals
    assert sorted(finals[0]) == sorted(finals[10 * 1024 * 1024])
    assert len(finals[0]) == expected_finals
    assert len(uncached) == len(records)  # one update per record (every window takes them)
    assert len(cached) < len(uncached) / 2
    # The last update of every window is the same, with or without the cache.
    last = {(k, v[0]): (v, ts) for k, v, ts in uncached}
    assert {(k, v[0]): (v, ts) for k, v, ts in cached} == last


@broker
def test_cached_windows_and_final_results_survive_a_restart(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    source, update_sink, final_sink = (create_topic(n) for n in ("clicks", "updates", "finals"))
    app_id = unique_name("cached-windows")
    cache = {"statestore_cache_max_bytes": 10 * 1024 * 1024, "state_engine": StateEngine.SQLITE}
    first = run_app(
        _windowed_topology(source, update_sink, final_sink),
        application_id=app_id,
        state_dir=tmp_path / "first",
        **cache,
    )
    produce(kafka_bootstrap, source, [("a", 0, BASE_MS + 100), ("a", 0, BASE_MS + 300)])
    produce(kafka_bootstrap, source, [("b", 0, BASE_MS + 1100)])
    update_reader = reader_for(update_sink, 1)
    _wait_for_rows(update_reader, 2, "the flushed updates before the restart")
    first.close()
    # A new state directory: the window store (written through the cache) and the suppression
    # buffer come back from their changelogs; a's window goes on counting.
    run_app(
        _windowed_topology(source, update_sink, final_sink),
        application_id=app_id,
        state_dir=tmp_path / "second",
        **cache,
    )
    produce(kafka_bootstrap, source, [("a", 0, BASE_MS + 700), ("z", 0, BASE_MS + 60_000)])
    finals = _wait_for_rows(reader_for(final_sink, 1), 2, "final results after the restart")
    assert sorted(finals) == [("a", [0, 3], 700), ("b", [1000, 1], 1100)]


# Windows closed on time with the cache on (docs/runtime/windows.md, "When final results come
# out"): every kind, behind a stream-table join and a repartition topic.
CLOSING_WINDOWS: dict[str, Any] = {
    "tumbling": TimeWindows.of_size(1_000, grace=200),
    "hopping": TimeWindows.of_size(1_000, grace=200).advance_by(500),
    "sliding": SlidingWindows.of_time_difference(1_000, grace=200),
    "session": SessionWindows(gap_ms=1_000, grace_ms=200),
}


def _joined_finals(clicks: str, users: str, sinks: dict[str, str]) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    by_page = (
        builder.stream(clicks)
        .join(builder.table(users), lambda click, user: {**click, "tier": user["tier"]})
        .select_key(lambda _user, click: click["page"])
        .group_by_key()
    )
    for kind, windows in CLOSING_WINDOWS.items():
        (
            by_page.windowed_by(windows)
            .count(name=f"counts-{kind}")
            .suppress(until_window_closes(), name=f"finals-{kind}")
            .to_stream()
            .map(lambda w, n: (w.key, [w.start - BASE_MS, w.end - BASE_MS, n]))
            .to(sinks[kind])
        )
    return builder


# The final results of the clicks at 100 and 300 (relative to BASE_MS), closed at 5000.
CLOSED_FINALS = {
    "tumbling": [("home", [0, 1_000, 2], 300)],
    "hopping": [("home", [-500, 500, 2], 300), ("home", [0, 1_000, 2], 300)],
    "sliding": [
        ("home", [-900, 100, 1], 100),
        ("home", [-700, 300, 2], 300),
        ("home", [101, 1_101, 1], 300),
    ],
    "session": [("home", [100, 300, 2], 300)],
}


def _assert_finals(
    sinks: dict[str, str], reader_for: Callable[[str, int], TopicReader], message: str
) -> None:
    for kind, sink in sinks.items():
        reader = reader_for(sink, 1)
        found: list[Any] = []

        def out(reader: TopicReader = reader, found: list[Any] = found, kind: str = kind) -> bool:
            found[:] = [(k, v, ts - BASE_MS) for k, v, ts in updates(reader.read())]
            return len(found) >= len(CLOSED_FINALS[kind])

        wait_for(out, timeout_s=30, message=f"{kind}: {message}")
        assert found == CLOSED_FINALS[kind], kind


def _start_joined_finals(
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    **settings: object,
) -> tuple[str, dict[str, str]]:
    """Run :func:`_joined_finals` with the cache on and a commit interval far longer than the
    test, users u1 and u2 in its table; returns the clicks topic and the sinks per window kind."""
    clicks, users = create_topic("clicks"), create_topic("users")
    sinks = {kind: create_topic(f"finals-{kind}") for kind in CLOSING_WINDOWS}
    run_app(
        _joined_finals(clicks, users, sinks),
        commit_interval_ms=600_000,
        statestore_cache_max_bytes=10 * 1024 * 1024,
        **settings,
    )
    produce(kafka_bootstrap, users, [("u1", {"tier": 1}, BASE_MS), ("u2", {"tier": 2}, BASE_MS)])
    return clicks, sinks


@broker
def test_windows_closed_by_data_come_out_long_before_a_commit(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    # Cache on, a commit interval far longer than the test, and no ticks (nor the early commit
    # they bring): only the record that closes the windows can get their final results out.
    # Kafka Streams would hold them until its next commit.
    clicks, sinks = _start_joined_finals(
        create_topic, run_app, kafka_bootstrap, progress_propagation=False
    )
    at = [100, 300, 5_000]  # the last one closes every window of the first two
    produce(
        kafka_bootstrap,
        clicks,
        [(f"u{i % 2 + 1}", {"page": "home"}, BASE_MS + t) for i, t in enumerate(at)],
    )
    _assert_finals(sinks, reader_for, "final results before any commit")


@broker
def test_windows_closed_by_a_tick_behind_a_repartition_come_out_long_before_a_commit(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    # The same, closed by a control record on the clicks: its time crosses the join, and the
    # repartition topic as the runtime's own tick, which waits for the upstream task's commit
    # (of a task gone quiet: at once, not at the end of its commit interval).
    clicks, sinks = _start_joined_finals(create_topic, run_app, kafka_bootstrap)
    produce(
        kafka_bootstrap,
        clicks,
        [("u1", {"page": "home"}, BASE_MS + 100), ("u2", {"page": "home"}, BASE_MS + 300)],
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    tick = ControlRecord(clicks, 0, BASE_MS + 5_000, ControlMarker("test-input", 0))
    producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(10) == 0
    _assert_finals(sinks, reader_for, "final results on a tick, before any commit")

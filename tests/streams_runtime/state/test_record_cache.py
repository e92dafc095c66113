"""The record cache against the broker: with it on, a table aggregation and a windowed one
forward fewer intermediate updates and the same final results, at least once and exactly
once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams_runtime import App, StateEngine, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.queries.results import QueryError
from streams_runtime.serdes import Integer, Json, String
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.processors.test_tables import produce, updates

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

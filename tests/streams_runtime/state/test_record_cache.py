"""The record cache against the broker: with it on, a table aggregation forwards fewer
intermediate updates and the same final results, at least once and exactly once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams_runtime import App, StreamsBuilder
from streams_runtime.queries.results import QueryError
from streams_runtime.serdes import Integer, Json, String
from tests.helpers import TopicReader, wait_for
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

"""The driver's store views read ranges as Kafka Streams' read-only stores do (and as ``App``'s
range queries answer): key ranges, prefixes and their descending twins of a table's store, a
key's windows and every key's windows of a window store, a key's sessions of a session store,
on every engine, with the native core and the chain."""

from __future__ import annotations

import pytest

from streams_runtime import SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Bytes, Integer, String
from streams_runtime.testing import TopologyTestDriver

ENGINES = ("memory", "sqlite", "rocksdb")
WALL_CLOCK = 1_000_000_000_000


def _builder() -> StreamsBuilder:
    return StreamsBuilder(default_key_serde=String(), default_value_serde=String())


@pytest.mark.parametrize("state_engine", ENGINES)
def test_a_table_store_reads_key_ranges_in_key_order(state_engine: str) -> None:
    builder = _builder()
    builder.table("prices", store_name="prices")
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, state_engine=state_engine
    ) as driver:
        prices = driver.create_input_topic("prices", String(), String())
        for n, key in enumerate(["tea", "coffee", "cocoa", "water", "co", "juice"]):
            prices.pipe_input(key, str(n), timestamp=n)
        prices.pipe_input("juice", None, timestamp=9)  # deleted: in no range
        store = driver.get_key_value_store("prices")
        assert store.range("co", "tea") == [
            ("co", "4"),
            ("cocoa", "2"),
            ("coffee", "1"),
            ("tea", "0"),
        ]
        assert store.reverse_range("co", "tea") == [
            ("tea", "0"),
            ("coffee", "1"),
            ("cocoa", "2"),
            ("co", "4"),
        ]
        assert store.range(None, "cocoa") == [("co", "4"), ("cocoa", "2")]
        assert store.range("tea", None) == [("tea", "0"), ("water", "3")]
        assert store.range("tea", "co") == []  # reversed bounds: nothing
        assert store.range("d", "j") == []
        assert [k for k, _ in store.all()] == ["co", "cocoa", "coffee", "tea", "water"]
        assert [k for k, _ in store.reverse_all()] == ["water", "tea", "coffee", "cocoa", "co"]
        assert store.prefix_scan("co") == [("co", "4"), ("cocoa", "2"), ("coffee", "1")]
        assert store.prefix_scan("coc") == [("cocoa", "2")]
        assert store.prefix_scan(b"w", prefix_serde=Bytes()) == [("water", "3")]
        assert store.prefix_scan("x") == []


@pytest.mark.parametrize("native_core", [True, False])
@pytest.mark.parametrize("state_engine", ENGINES)
def test_a_window_store_reads_a_keys_windows_and_every_keys(
    state_engine: str, native_core: bool
) -> None:
    builder = _builder()
    (
        builder.stream("clicks")
        .group_by_key()
        .windowed_by(TimeWindows.of_size(10_000, grace=60_000))
        .count(name="per-10s")
        .suppress(until_window_closes())
        .to_stream()
        .to("counts", value_serde=Integer())
    )
    with TopologyTestDriver(
        builder,
        initial_wall_clock_time_ms=WALL_CLOCK,
        state_engine=state_engine,
        native_core=native_core,
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        for key, ts in [("b", 1_000), ("a", 2_000), ("a", 12_000), ("c", 15_000), ("a", 25_000)]:
            clicks.pipe_input(key, "x", timestamp=ts)
        clicks.pipe_input("b", "x", timestamp=3_000)
        store = driver.get_window_store("per-10s")
        assert store.fetch_range("a", 0, 20_000) == [(0, 1), (10_000, 1), (20_000, 1)]  # inclusive
        assert store.fetch_range("a", 1, 19_999) == [(10_000, 1)]  # by start, not overlap
        assert store.fetch_range("a", 20_000, 0) == []
        assert store.fetch_all(0, 10_000) == [
            ("a", 0, 1),
            ("b", 0, 2),
            ("a", 10_000, 1),
            ("c", 10_000, 1),
        ]
        assert store.fetch_all(20_000, 30_000) == [("a", 20_000, 1)]
        assert store.fetch_all(30_000, 0) == []


@pytest.mark.parametrize("native_core", [True, False])
@pytest.mark.parametrize("state_engine", ENGINES)
def test_a_session_store_reads_a_keys_sessions_by_end(state_engine: str, native_core: bool) -> None:
    builder = _builder()
    (
        builder.stream("clicks")
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=5_000, grace_ms=60_000))
        .count(name="sessions")
        .suppress(until_window_closes())
        .to_stream()
        .to("counts", value_serde=Integer())
    )
    with TopologyTestDriver(
        builder,
        initial_wall_clock_time_ms=WALL_CLOCK,
        state_engine=state_engine,
        native_core=native_core,
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        for ts in (1_000, 2_000, 20_000, 40_000, 42_000):
            clicks.pipe_input("alice", "x", timestamp=ts)
        clicks.pipe_input("bob", "x", timestamp=3_000)
        store = driver.get_session_store("sessions")
        everything = [(1_000, 2_000, 2), (20_000, 20_000, 1), (40_000, 42_000, 2)]
        assert store.fetch("alice") == everything
        assert store.backward_fetch("alice") == everything[::-1]
        # Ending at or after 10 s, starting at or before 40 s.
        assert store.find_sessions("alice", 10_000, 40_000) == everything[1:]
        assert store.backward_find_sessions("alice", 10_000, 40_000) == everything[1:][::-1]
        assert store.fetch("carol") == []

"""``Table.suppress(until_time_limit(...))`` on the ``TopologyTestDriver`` (Kafka Streams'
``KTableSuppressProcessor`` with ``untilTimeLimit``): the latest update per key comes out once
the wait passed since the key's first buffered update, in stream time that data *and ticks*
move; bounded buffers emit early or stop the app; deletes are suppressed too; ticks through a
repartition release it as well. The processor alone (its store, restore, byte count, progress
hold) is tests/streams_runtime/processors/test_suppression_logic.py."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import (
    BufferConfig,
    StreamsBuilder,
    StreamsError,
    TopologyError,
    until_time_limit,
    until_window_closes,
)
from streams_runtime.serdes import Integer, Json, String
from streams_runtime.testing import TestOutputTopic, TopologyTestDriver
from streams_runtime.windows import TimeWindows

Out = tuple[Any, Any, int]


def _suppressed(config: BufferConfig, wait_ms: int = 1000, **kwargs: Any) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream("readings")
        .to_table(store_name="latest")
        .suppress(until_time_limit(wait_ms, config), **kwargs)
        .to_stream()
        .to("calm")
    )
    return builder


def _records(output: TestOutputTopic[Any, Any]) -> list[Out]:
    return [(r.key, r.value, r.timestamp) for r in output.read_records()]


def test_a_tick_releases_the_latest_update_after_the_wait() -> None:
    with TopologyTestDriver(_suppressed(BufferConfig.unbounded())) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("a", 1, timestamp=1000, headers=[("h", b"1")])
        source.pipe_input("a", 2, timestamp=1500, headers=[("h", b"2")])
        source.pipe_input("b", 10, timestamp=1800)
        assert _records(calm) == []
        source.pipe_tick(1999)  # a's wait ends at 2000 (its first update + 1000)
        assert _records(calm) == []
        source.pipe_tick(2000)  # ticks alone move stream time: a comes out, b still waits
        [a] = calm.read_records()
        assert (a.key, a.value, a.timestamp, a.headers) == ("a", 2, 1500, [("h", b"2")])
        source.pipe_input("a", 3, timestamp=2100)  # a new buffering of a: waits to 3100
        source.pipe_tick(2800)
        assert _records(calm) == [("b", 10, 1800)]
        source.pipe_tick(3100)
        assert _records(calm) == [("a", 3, 2100)]


def test_progress_below_the_suppression_is_held_back_by_the_wait() -> None:
    with TopologyTestDriver(_suppressed(BufferConfig.unbounded())) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("a", 1, timestamp=0)
        source.pipe_tick(999)  # promises nothing below: a, buffered at 0, may still come
        assert calm.read_ticks() == []
        driver.advance_wall_clock_time(60_000)  # the runtime's next tick is due
        source.pipe_tick(5000)
        assert _records(calm) == [("a", 1, 0)]
        # Whatever is still buffered was first updated after 5000 - 1000.
        assert [t.timestamp for t in calm.read_ticks()] == [5000 - 1000 - 1]


def test_data_moves_stream_time_too_and_keys_come_out_in_buffer_time_order() -> None:
    with TopologyTestDriver(_suppressed(BufferConfig.unbounded(), wait_ms=100)) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("b", 1, timestamp=0)
        source.pipe_input("a", 1, timestamp=10)
        source.pipe_input("b", 2, timestamp=50)  # b keeps its place (buffered at 0)
        source.pipe_input("c", 1, timestamp=500)  # stream time 500: b then a
        assert _records(calm) == [("b", 2, 50), ("a", 1, 10)]


def test_deletes_are_suppressed_and_forwarded() -> None:
    with TopologyTestDriver(_suppressed(BufferConfig.unbounded(), wait_ms=0)) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("a", 1, timestamp=0)  # no wait: out at once
        source.pipe_input("a", None, timestamp=5)
        assert _records(calm) == [("a", 1, 0), ("a", None, 5)]


def test_a_full_buffer_emits_early_the_keys_buffered_longest() -> None:
    with TopologyTestDriver(_suppressed(BufferConfig.max_records(2))) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("a", 1, timestamp=0)
        source.pipe_input("b", 1, timestamp=10)
        source.pipe_input("a", 2, timestamp=20)  # still two keys
        assert _records(calm) == []
        source.pipe_input("c", 1, timestamp=30)  # three: a (buffered first) goes early
        assert _records(calm) == [("a", 2, 20)]


def test_a_byte_bound_counts_keys_values_and_context() -> None:
    # One buffered key "a" with value 1 (JSON b"1") and no headers: 8 + 1 + 1 + 20 bytes.
    with TopologyTestDriver(_suppressed(BufferConfig.max_bytes(30))) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        calm = driver.create_output_topic("calm", String(), Json())
        source.pipe_input("a", 1, timestamp=0)
        assert _records(calm) == []
        source.pipe_input("b", 1, timestamp=1)  # 60 bytes: a goes early
        assert _records(calm) == [("a", 1, 0)]


def test_a_full_buffer_that_shuts_down_stops_the_app() -> None:
    config = BufferConfig.max_records(1).shut_down_when_full()
    with TopologyTestDriver(_suppressed(config, name="calm-readings")) as driver:
        source = driver.create_input_topic("readings", String(), Json())
        source.pipe_input("a", 1, timestamp=0)
        with pytest.raises(StreamsError, match=r"calm-readings buffer exceeded .* \[2/1\] records"):
            source.pipe_input("b", 1, timestamp=1)


def test_ticks_through_a_repartition_release_a_grouped_count() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream("clicks")
        .group_by(lambda _k, v: v["page"])
        .count()
        .suppress(until_time_limit(1000, BufferConfig.max_records(100)), name="settled")
        .to_stream()
        .to("settled-counts", value_serde=Integer())
    )
    with TopologyTestDriver(builder, progress_interval_ms=100) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        counts = driver.create_output_topic("settled-counts", String(), Integer())
        for at in (0, 100, 200):
            clicks.pipe_input("u", {"page": "home"}, timestamp=at)
        assert _records(counts) == []
        # The tick crosses the repartition topic as the runtime's own tick, written once the
        # commit that covers it is in and its interval passed.
        driver.advance_wall_clock_time(1000)
        clicks.pipe_tick(1500)
        driver.advance_wall_clock_time(1000)
        clicks.pipe_tick(1501)
        assert _records(counts) == [("home", 3, 200)]


def test_until_window_closes_is_for_windowed_tables() -> None:
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="windowed table"):
        builder.table("t").suppress(until_window_closes())


def test_a_suppressed_table_is_not_read_through_by_a_join() -> None:
    builder = StreamsBuilder()
    table = builder.table("t").suppress(until_time_limit(10, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="suppressed table"):
        builder.stream("s").join(table, lambda a, b: (a, b))


def test_a_windowed_table_suppressed_until_a_time_limit() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream("clicks")
        .group_by_key()
        .windowed_by(TimeWindows.of_size(1000))
        .count()
        .suppress(until_time_limit(500, BufferConfig.unbounded()))
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.start}", n))
        .to("windowed-counts", value_serde=Integer())
    )
    with TopologyTestDriver(builder) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        counts = driver.create_output_topic("windowed-counts", String(), Integer())
        clicks.pipe_input("u", 1, timestamp=100)
        clicks.pipe_input("u", 1, timestamp=300)
        clicks.pipe_tick(599)
        assert _records(counts) == []
        clicks.pipe_tick(600)  # the window's first update (100) + 500
        assert _records(counts) == [("u@0", 2, 300)]

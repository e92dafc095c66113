"""The runtime's ``TopologyTestDriver`` (pure in-process: no broker, no JVM): the features a
topology's test relies on, on every state engine and on both the native core and the chain.
That it computes what Kafka Streams computes is tests/conformance/test_driver_conformance.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from progress_control.trust import ControlRecordSource, SigningKey
from streams_runtime import (
    BadRecordError,
    JoinWindows,
    SessionWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.serdes import Integer, SessionWindowedSerde, String, TimeWindowedSerde
from streams_runtime.testing import TestRecord, TopologyTestDriver
from streams_runtime.windowed import Windowed

ENGINES = ("memory", "sqlite", "rocksdb")
WALL_CLOCK = 1_000_000_000_000
SESSIONS = SessionWindows(gap_ms=5_000, grace_ms=0)


def _builder() -> StreamsBuilder:
    return StreamsBuilder(default_key_serde=String(), default_value_serde=String())


def _session_counts(*, repartition: bool = False) -> StreamsBuilder:
    builder = _builder()
    clicks = builder.stream("clicks")
    if repartition:  # keyed by page: through a repartition topic
        clicks = clicks.select_key(lambda _user, page: page)
    (
        clicks.group_by_key()
        .windowed_by(SESSIONS)
        .count(name="counts")
        .suppress(until_window_closes())
        .to_stream()
        .to("sessions", value_serde=Integer())
    )
    return builder


@pytest.fixture(params=[(e, n) for e in ENGINES for n in (True, False)], ids=str)
def engine(request: pytest.FixtureRequest) -> dict[str, object]:
    state_engine, native_core = request.param
    return {"state_engine": state_engine, "native_core": native_core}


def test_a_tick_closes_sessions_and_the_runtime_ticks_its_output(
    engine: dict[str, object],
) -> None:
    with TopologyTestDriver(
        _session_counts(), initial_wall_clock_time_ms=WALL_CLOCK, **engine
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        sessions = driver.create_output_topic("sessions", SessionWindowedSerde(String()), Integer())
        clicks.pipe_input("alice", "home", timestamp=1_000)
        clicks.pipe_input("alice", "cart", timestamp=3_000)
        clicks.pipe_input("bob", "home", timestamp=4_000)
        assert sessions.is_empty()  # suppressed until their sessions close
        assert driver.get_session_store("counts").fetch("alice") == [(1_000, 3_000, 2)]

        clicks.pipe_tick(20_000)  # no data for a while: time passes all the same
        assert sessions.read_key_values() == [
            (Windowed("alice", 1_000, 3_000), 2),
            (Windowed("bob", 4_000, 4_000), 1),
        ]
        # The runtime promises its readers: nothing more below 15 s (20 s - the gap).
        [tick] = sessions.read_ticks()
        assert (tick.partition, tick.timestamp, tick.key) == (0, 14_999, b"__progress_control__")
        assert tick.marker.source_id == "streams:topology-test-driver:topology-test-driver"


def test_ticks_pass_a_repartition_topic_and_close_windows_after_it(
    engine: dict[str, object],
) -> None:
    with TopologyTestDriver(
        _session_counts(repartition=True), initial_wall_clock_time_ms=WALL_CLOCK, **engine
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        sessions = driver.create_output_topic("sessions", SessionWindowedSerde(String()), Integer())
        clicks.pipe_input("alice", "home", timestamp=1_000)
        clicks.pipe_input("bob", "home", timestamp=2_000)
        clicks.pipe_tick(30_000)
        assert sessions.read_key_values() == [(Windowed("home", 1_000, 2_000), 2)]
        repartition = next(t for t in driver.produced_topic_names() if t.endswith("-repartition"))
        # The tick went through the repartition topic as the runtime's own tick.
        through = driver.create_output_topic(repartition, String(), String())
        assert [t.timestamp for t in through.read_ticks()] == [29_999]
        assert through.read_key_values() == [("home", "home"), ("home", "home")]


def test_ticks_come_at_most_once_per_progress_interval_of_wall_clock_time() -> None:
    with TopologyTestDriver(
        _session_counts(), initial_wall_clock_time_ms=WALL_CLOCK, progress_interval_ms=1_000
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        sessions = driver.create_output_topic("sessions", SessionWindowedSerde(String()), Integer())
        clicks.pipe_tick(10_000)
        clicks.pipe_tick(20_000)
        assert [t.timestamp for t in sessions.read_ticks()] == [4_999]
        driver.advance_wall_clock_time(timedelta(seconds=1))
        assert [t.timestamp for t in sessions.read_ticks()] == [14_999]


def test_tumbling_windows_and_the_window_store(engine: dict[str, object]) -> None:
    builder = _builder()
    (
        builder.stream("clicks")
        .group_by_key()
        .windowed_by(TimeWindows.of_size(10_000))
        .count(name="per-10s")
        .to_stream()
        .to("counts", value_serde=Integer())
    )
    with TopologyTestDriver(builder, initial_wall_clock_time_ms=WALL_CLOCK, **engine) as driver:
        clicks = driver.create_input_topic(
            "clicks", String(), String(), start_timestamp_ms=0, auto_advance_ms=4_000
        )
        counts = driver.create_output_topic(
            "counts", TimeWindowedSerde(String(), 10_000), Integer()
        )
        clicks.pipe_key_values([("a", "x"), ("a", "y"), ("a", "z"), ("b", "x")])  # 0, 4, 8, 12 s
        assert [(w.key, w.start, n) for w, n in counts.read_key_values()] == [
            ("a", 0, 1),
            ("a", 0, 2),
            ("a", 0, 3),
            ("b", 10_000, 1),
        ]
        store = driver.get_window_store("per-10s")
        assert store.fetch("a", 0) == 3
        assert store.fetch_range("a", 0, 20_000) == [(0, 3)]
        assert store.all() == [("a", 0, 3), ("b", 10_000, 1)]


def test_a_table_store_and_emit_on_change() -> None:
    builder = _builder()
    builder.table("prices", store_name="prices").to_stream().to("changes")
    with TopologyTestDriver(builder, initial_wall_clock_time_ms=WALL_CLOCK) as driver:
        prices = driver.create_input_topic("prices", String(), String())
        changes = driver.create_output_topic("changes", String(), String())
        prices.pipe_input("tea", "3", timestamp=1)
        prices.pipe_input("tea", "3", timestamp=2)  # the same value again: not forwarded
        prices.pipe_input("coffee", "4", timestamp=3)
        prices.pipe_input("coffee", None, timestamp=4)
        assert changes.read_records() == [
            TestRecord("tea", "3", 1, []),
            TestRecord("coffee", "4", 3, []),
            TestRecord("coffee", None, 4, []),
        ]
        store = driver.get_key_value_store("prices")
        assert store.get("tea") == "3"
        assert store.get_with_timestamp("tea") == ("3", 2)
        assert store.all() == [("tea", "3")]


def test_an_idling_join_waits_for_wall_clock_time() -> None:
    builder = _builder()
    left, right = builder.stream("left"), builder.stream("right")
    left.join(right, lambda a, b: f"{a}+{b}", JoinWindows.of_time_difference(1_000)).to("joined")
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, max_task_idle_ms=500
    ) as driver:
        lefts = driver.create_input_topic("left", String(), String())
        rights = driver.create_input_topic("right", String(), String())
        joined = driver.create_output_topic("joined", String(), String())
        lefts.pipe_input("k", "a", timestamp=100)  # the right input is empty: wait 500 ms
        # Both inputs have a record: "a" is processed (the right side has nothing yet), then
        # the left input is empty and "b" waits in its turn.
        rights.pipe_input("k", "b", timestamp=200)
        assert joined.is_empty()
        driver.advance_wall_clock_time(499)
        assert joined.is_empty()
        driver.advance_wall_clock_time(1)
        assert joined.read_values() == ["a+b"]


def test_bad_records_meet_the_policy() -> None:
    builder = _builder()
    builder.stream("numbers", value_serde=Integer()).map_values(
        lambda n: n * 2, value_serde=Integer()
    ).to("doubled")
    with TopologyTestDriver(
        builder, initial_wall_clock_time_ms=WALL_CLOCK, bad_record_policy="dead-letter"
    ) as driver:
        driver.pipe_raw("numbers", b"k", b"not a long", 1)
        numbers = driver.create_input_topic("numbers", String(), Integer())
        numbers.pipe_input("k", 21, timestamp=2)
        assert driver.create_output_topic("doubled", String(), Integer()).read_values() == [42]
        dead = driver.create_output_topic("topology-test-driver-dlq", String(), String())
        assert dead.read_record().value == "not a long"
    with (
        TopologyTestDriver(builder, initial_wall_clock_time_ms=WALL_CLOCK) as driver,
        pytest.raises(BadRecordError),
    ):
        driver.pipe_raw("numbers", b"k", b"not a long", 1)


def test_ticks_the_trust_policy_rejects_move_no_time() -> None:
    key = SigningKey("k1", b"s" * 32)
    with TopologyTestDriver(
        _session_counts(),
        initial_wall_clock_time_ms=WALL_CLOCK,
        control_verification_keys="k1:" + "s" * 32,
    ) as driver:
        clicks = driver.create_input_topic("clicks", String(), String())
        sessions = driver.create_output_topic("sessions", SessionWindowedSerde(String()), Integer())
        clicks.pipe_input("alice", "home", timestamp=1_000)
        clicks.pipe_tick(20_000)  # unsigned
        assert sessions.is_empty()
        assert _rejected(driver, "unsigned") == 1
        clicks.pipe_tick(20_000, source=ControlRecordSource("signed", signing_key=key))
        assert sessions.read_key_values() == [(Windowed("alice", 1_000, 1_000), 1)]


def _rejected(driver: TopologyTestDriver, reason: str) -> float:
    value = driver.metrics.registry.get_sample_value(
        "streams_control_records_rejected_total", {"reason": reason}
    )
    return value or 0.0


def test_unknown_topics_and_stores_are_named() -> None:
    with TopologyTestDriver(_session_counts()) as driver:
        with pytest.raises(ValueError, match="unknown input topic 'click'; the topology reads"):
            driver.create_input_topic("click", String(), String())
        with pytest.raises(KeyError, match="the topology's stores are"):
            driver.get_key_value_store("nope")
        with pytest.raises(TypeError, match="is a session store"):
            driver.get_key_value_store("counts")
    with pytest.raises(RuntimeError, match="closed"):
        driver.advance_wall_clock_time(1)

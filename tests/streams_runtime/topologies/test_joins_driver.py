"""Windowed stream-stream joins on the ``TopologyTestDriver``: unjoined results of left and outer
joins come out on ticks alone, exactly when their window closes (Kafka Streams would wait for a
later data record). Their buffers' restart is tests/streams_runtime/dsl/test_stream_stream_join.py,
on the broker."""

from __future__ import annotations

from streams_runtime import JoinWindows, StreamsBuilder
from streams_runtime.serdes import String
from streams_runtime.testing import TopologyTestDriver

WINDOWS = JoinWindows.of_time_difference(1_000, 500)


def _joins() -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    a, b = builder.stream("l"), builder.stream("r")

    def pair(x: str | None, y: str | None) -> str:
        return f"{x}|{y}"

    a.left_join(b, pair, WINDOWS).to("lo")
    a.outer_join(b, pair, WINDOWS).to("oo")
    return builder


def test_unjoined_results_come_out_on_ticks_alone() -> None:
    with TopologyTestDriver(_joins()) as driver:
        left = driver.create_input_topic("l", String(), String())
        right = driver.create_input_topic("r", String(), String())
        left_out = driver.create_output_topic("lo", String(), String())
        outer_out = driver.create_output_topic("oo", String(), String())
        left.pipe_input("k", "a", timestamp=10_000)
        left.pipe_input("j", "b", timestamp=10_100)
        right.pipe_input("j", "x", timestamp=10_200)
        right.pipe_input("m", "y", timestamp=10_300)
        # Joined at once; the unjoined ones wait for their window to close.
        assert left_out.read_records()[0].value == "b|x"
        assert outer_out.read_key_values() == [("j", "b|x")]
        # k closes once 10000 + 1000 + 500 < stream time; m (right side) once 10300 + 1500 < it.
        right.pipe_tick(11_500)
        assert outer_out.is_empty()
        right.pipe_tick(11_501)
        assert [(r.key, r.value, r.timestamp) for r in outer_out.read_records()] == [
            ("k", "a|None", 10_000)
        ]
        left.pipe_tick(11_800)
        assert outer_out.is_empty()
        left.pipe_tick(11_801)
        assert [(r.key, r.value, r.timestamp) for r in outer_out.read_records()] == [
            ("m", "None|y", 10_300)
        ]
        assert left_out.read_key_values() == [("k", "a|None")]

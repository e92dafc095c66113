"""Time windows on the ``TopologyTestDriver``: a tumbling window's suppressed final result comes
out on control records alone, exactly when its end plus grace is reached (the restart of its
stores is tests/streams_runtime/test_time_windows_broker.py, on the broker)."""

from __future__ import annotations

from typing import Any

from streams_runtime import StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Json, String
from streams_runtime.testing import TopologyTestDriver

WINDOWS = TimeWindows.of_size(2_000, grace=500)


def _topology() -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    counts = builder.stream("clicks").group_by_key().windowed_by(WINDOWS).count(name="counts")

    def row(w: Any, n: int) -> tuple[str, dict[str, int]]:
        return w.key, {"start": w.start, "end": w.end, "n": n}

    counts.to_stream().map(row).to("updates")
    counts.suppress(until_window_closes(), name="final").to_stream().map(row).to("finals")
    return builder


def test_a_tumbling_window_closes_on_ticks_alone() -> None:
    with TopologyTestDriver(_topology()) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        updates = driver.create_output_topic("updates", String(), Json())
        finals = driver.create_output_topic("finals", String(), Json())
        for key, at in [("a", 100), ("b", 1500), ("a", 900), ("a", 2100)]:
            clicks.pipe_input(key, {}, timestamp=at)
        assert updates.queue_size() == 4
        # Stream time 2100, then ticks only: [0, 2000) closes at end + grace = 2500, not before.
        clicks.pipe_tick(2300)
        clicks.pipe_tick(2499)
        assert finals.is_empty()
        clicks.pipe_tick(2500)
        # One final result per key, stamped with the window's latest record; [2000, 4000) open.
        assert [(r.key, r.value, r.timestamp) for r in finals.read_records()] == [
            ("a", {"start": 0, "end": 2000, "n": 2}, 900),
            ("b", {"start": 0, "end": 2000, "n": 1}, 1500),
        ]
        clicks.pipe_tick(4500)
        assert [(r.key, r.value, r.timestamp) for r in finals.read_records()] == [
            ("a", {"start": 2000, "end": 4000, "n": 1}, 2100)
        ]

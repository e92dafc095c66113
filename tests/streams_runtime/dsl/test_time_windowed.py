"""Time- and sliding-windowed aggregations in the DSL: their window stores, queryable stores and
windowed key serdes."""

from __future__ import annotations

import pytest

from streams_runtime import SlidingWindows, StreamsBuilder, TimeWindows, Windowed
from streams_runtime.serdes import Integer, String, TimeWindowedSerde, ValueAndTimestamp


@pytest.mark.parametrize(
    ("windows", "retention", "size"),
    [
        (TimeWindows.of_size(1_000, grace=200), 1_200, 1_000),
        (TimeWindows.of_size(1_000).advance_by(250), 1_000, 1_000),
        (SlidingWindows.of_time_difference(1_000, grace=200), 2_200, 1_000),
    ],
)
def test_windowed_count_keeps_a_window_store_and_writes_time_windowed_keys(
    windows: TimeWindows | SlidingWindows, retention: int, size: int
) -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    table = builder.stream("clicks").group_by_key().windowed_by(windows).count(name="counts")
    stream = table.to_stream()
    stream.to("out")
    [sub] = builder.build("app").subtopologies
    [spec] = sub.stores
    assert (spec.name, spec.kind, spec.retention_ms) == ("counts", "window", retention)
    queryable = builder.build("app").queryable_stores["counts"]
    assert queryable.kind == "window"
    # Queries read the aggregate out of the stored ValueAndTimestamp.
    stored = ValueAndTimestamp(Integer().serialize(7) or b"", 123).to_bytes()
    assert queryable.value_serde.deserialize(stored) == 7
    assert isinstance(stream.key_serde, TimeWindowedSerde)
    assert stream.key_serde.window_size_ms == size
    assert stream.key_serde.deserialize(b"k" + (5).to_bytes(8, "big")) == Windowed("k", 5, 5 + size)

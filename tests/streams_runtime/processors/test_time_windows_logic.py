"""Time- and sliding-window aggregation and their suppression, as pure logic (no broker): the
windows a record updates, its timestamps and headers, the lateness boundaries and the final
results, each worked out by hand from Kafka Streams' ``KStreamWindowAggregate`` and
``KStreamSlidingWindowAggregate``."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import SlidingWindows, TimeWindows, Windowed
from streams_runtime.processors import (
    Processor,
    SlidingWindowAggregateProcessor,
    SuppressProcessor,
    TimeWindowAggregateProcessor,
)
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Integer, SerializationError, String, TimeWindowedSerde
from tests.streams_runtime.processors.memory_context import MemoryContext


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.out: list[tuple[str, int, int, Any, int]] = []
        self.headers: list[Headers | None] = []

    def process(self, record: Record[Any, Any]) -> None:
        w: Windowed[str] = record.key
        assert w.key is not None
        self.out.append((w.key, w.start, w.end, record.value, record.timestamp))
        self.headers.append(record.headers)

    def take(self) -> list[tuple[str, int, int, Any, int]]:
        out, self.out = self.out, []
        return out


def _count(windows: TimeWindows | SlidingWindows, *, suppress: bool = False) -> Any:
    """A count over ``windows`` (optionally suppressed) feeding a collector."""
    args: tuple[Any, ...] = ("counts", windows, String(), Integer())
    kwargs: dict[str, Any] = {
        "initializer": lambda: 0,
        "aggregator": lambda _k, _v, n: n + 1,
    }
    agg: Processor = (
        TimeWindowAggregateProcessor(*args, **kwargs)
        if isinstance(windows, TimeWindows)
        else SlidingWindowAggregateProcessor(*args, **kwargs)
    )
    context, sink = MemoryContext(), _Collect()
    last = agg
    if suppress:
        last = SuppressProcessor("final", windows, String(), Integer())
        agg.children.append(last)
        last.parents.append(agg)
    last.children.append(sink)
    sink.parents.append(last)
    for processor in (agg, last):
        processor.init(context)
    return agg, context, sink


def test_tumbling_windows_count_and_drop_records_once_end_plus_grace_passed() -> None:
    agg, context, sink = _count(TimeWindows.of_size(100, grace=10))
    agg.process(Record("a", "x", 50, [("id", b"1")]))
    agg.process(Record("a", "x", 60))
    assert sink.take() == [("a", 0, 100, 1, 50), ("a", 0, 100, 2, 60)]
    assert sink.headers[0] == [("id", b"1")]  # the causing record's headers
    agg.process(Record("a", "x", 109))  # window [100, 200); [0, 100) closes at 110
    agg.process(Record("a", "x", 40))  # 100 + 10 > 109: still on time, timestamp stays 60
    assert sink.take() == [("a", 100, 200, 1, 109), ("a", 0, 100, 3, 60)]
    agg.advance(110)
    agg.process(Record("a", "x", 99))  # 100 + 10 <= 110: late
    assert sink.take() == []
    assert context.dropped == ["late"]


def test_hopping_windows_take_a_record_in_every_window_containing_it() -> None:
    agg, _context, sink = _count(TimeWindows.of_size(100).advance_by(40))
    agg.process(Record("a", "x", 130))
    assert sink.take() == [("a", 40, 140, 1, 130), ("a", 80, 180, 1, 130), ("a", 120, 220, 1, 130)]
    agg.process(Record("a", "x", 139))  # stream time 139: [40, 140) still open
    agg.process(Record("a", "x", 140))  # [40, 140) closes (grace 0), [160, 260) opens
    assert [w[1:4] for w in sink.take()] == [
        (40, 140, 2),
        (80, 180, 2),
        (120, 220, 2),
        (80, 180, 3),
        (120, 220, 3),
    ]


def test_suppressed_time_windows_emit_once_closed_on_control_records() -> None:
    agg, _context, sink = _count(TimeWindows.of_size(100, grace=10), suppress=True)
    agg.process(Record("a", "x", 50))
    agg.process(Record("a", "x", 60))
    agg.advance(109)
    assert sink.take() == []
    agg.advance(110)  # end 100 + grace 10 <= 110
    assert sink.take() == [("a", 0, 100, 2, 60)]  # stamped with the window's latest record
    agg.advance(500)
    assert sink.take() == []


def test_sliding_windows_follow_kafka_streams() -> None:
    agg, _context, sink = _count(SlidingWindows.of_time_difference(10, grace=100))
    agg.process(Record("a", "x", 20))
    assert sink.take() == [("a", 10, 20, 1, 20)]  # its left window
    agg.process(Record("a", "x", 25))  # 20's right window, then 25's left window
    assert sink.take() == [("a", 21, 31, 1, 25), ("a", 15, 25, 2, 25)]
    agg.process(Record("a", "x", 22))  # out of order: latest window first, then new ones
    assert sink.take() == [
        ("a", 21, 31, 2, 25),
        ("a", 15, 25, 3, 25),
        ("a", 12, 22, 2, 22),
        ("a", 23, 33, 1, 25),
    ]


def test_sliding_windows_keep_early_records_in_the_first_window() -> None:
    agg, _context, sink = _count(SlidingWindows.of_time_difference(10))
    agg.process(Record("a", "x", 3))
    agg.process(Record("a", "x", 5))
    assert sink.take() == [("a", 0, 10, 1, 3), ("a", 4, 14, 1, 5), ("a", 0, 10, 2, 5)]


def test_sliding_windows_drop_late_records_and_null_values() -> None:
    agg, context, sink = _count(SlidingWindows.of_time_difference(10, grace=5), suppress=True)
    agg.process(Record("a", "x", 100))
    agg.process(Record("a", None, 100))
    agg.process(Record("a", "x", 84))  # 84 + 10 < 100 - 5: late, dropped whole
    agg.process(Record("a", "x", 85))  # on time, but its left window [75, 85] is closed
    assert context.dropped == ["null-value", "late", "late"]
    agg.process(Record("a", "x", 95))  # updates [90, 100], creates [85, 95] and [96, 106]
    agg.advance(110)  # [85, 95] and [90, 100] final; [96, 106] at 111
    assert sink.take() == [("a", 85, 95, 1, 95), ("a", 90, 100, 2, 100)]


def test_time_windowed_serde_writes_the_start_and_restores_the_end_from_the_size() -> None:
    serde = TimeWindowedSerde(String(), 100)
    data = serde.serialize(Windowed("k", 300, 400))
    assert data == b"k" + (300).to_bytes(8, "big")
    assert serde.deserialize(data) == Windowed("k", 300, 400)
    with pytest.raises(SerializationError):
        serde.deserialize(b"short")


def test_window_specifications() -> None:
    windows = TimeWindows.of_size(100, grace=10).advance_by(30)
    assert list(windows.window_starts(130)) == [60, 90, 120]
    assert list(windows.window_starts(10)) == [0]
    assert windows.retention_ms == 110
    assert windows.is_late(100, 110)
    assert not windows.is_late(100, 109)
    sliding = SlidingWindows.of_time_difference(10, grace=5)
    assert sliding.retention_ms == 25
    assert sliding.is_late(100, 106)
    assert not sliding.is_late(100, 105)
    assert sliding.is_final(100, 105)

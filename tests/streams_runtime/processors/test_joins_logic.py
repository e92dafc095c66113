"""Windowed stream-stream joins as pure logic (no broker): which records join, their timestamps
and headers, when unjoined records of left and outer joins come out (on data and on ticks), the
buffers' retention, duplicates, null keys and values, and what survives a restart; each worked
out by hand from Kafka Streams' ``KStreamKStreamJoin``."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import JoinWindows, StreamsBuilder
from streams_runtime.processors import (
    NO_PROGRESS,
    PassThroughProcessor,
    Processor,
    SourceProcessor,
    StreamStreamJoinProcessor,
)
from streams_runtime.processors.joins import decode_list, encode_list
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import String
from tests.streams_runtime.processors.memory_context import MemoryContext


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.out: list[tuple[Any, Any, int]] = []
        self.headers: list[Headers | None] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.out.append((record.key, record.value, record.timestamp))
        self.headers.append(record.headers)

    def take(self) -> list[tuple[Any, Any, int]]:
        out, self.out, self.headers = self.out, [], []
        return out


class _Join:
    """Both sides of a join wired as the DSL wires them: source -> side -> merge -> collector."""

    def __init__(
        self, kind: str, windows: JoinWindows, context: MemoryContext | None = None
    ) -> None:
        self.context = context or MemoryContext()
        self.sources = (SourceProcessor(String(), String()), SourceProcessor(String(), String()))
        outer = None if kind == "inner" else "outer-store"
        self.sides = tuple(
            StreamStreamJoinProcessor(
                left=left,
                outer=kind == "outer" or (left and kind == "left"),
                windows=windows,
                this_store="this-store" if left else "other-store",
                other_store="other-store" if left else "this-store",
                outer_store=outer,
                key_serde=String(),
                left_value_serde=String(),
                right_value_serde=String(),
                joiner=lambda a, b: f"{a}|{b}",
            )
            for left in (True, False)
        )
        merge, self.sink = PassThroughProcessor(), _Collect()
        for source, side in zip(self.sources, self.sides, strict=True):
            source.children, side.parents, side.children = [side], [source], [merge]
        merge.parents, merge.children, self.sink.parents = list(self.sides), [self.sink], [merge]
        for side in self.sides:
            side.init(self.context)

    def left(self, key: str | None, value: str | None, ts: int, tag: str = "") -> None:
        self.sides[0].process(Record(key, value, ts, [("id", tag.encode())] if tag else None))

    def right(self, key: str | None, value: str | None, ts: int, tag: str = "") -> None:
        self.sides[1].process(Record(key, value, ts, [("id", tag.encode())] if tag else None))

    def tick(self, ts: int, side: int = 0) -> None:
        self.sources[side].advance(ts)

    def take(self) -> list[tuple[Any, Any, int]]:
        return self.sink.take()


def test_list_encoding_round_trips() -> None:
    for values in ([], [b""], [b"a", b"", b"bc" * 300]):
        assert decode_list(encode_list(values)) == values


def test_inner_join_both_directions_stamped_with_the_larger_timestamp() -> None:
    j = _Join("inner", JoinWindows(before_ms=10, after_ms=20, grace_ms=0))
    j.left("k", "a", 100)
    assert j.take() == []
    j.right("k", "x", 120)  # 120 - 100 = 20 <= after
    j.right("k", "y", 121)  # beyond after
    j.right("k", "z", 90)  # 100 - 90 = 10 <= before
    assert j.take() == [("k", "a|x", 120), ("k", "a|z", 100)]
    j.left("k", "b", 111)  # right records from 101 to 131: x, y
    assert j.take() == [("k", "b|x", 120), ("k", "b|y", 121)]
    j.left("other", "c", 120)
    assert j.take() == []


def test_duplicates_of_one_key_and_timestamp_all_join_in_arrival_order() -> None:
    j = _Join("inner", JoinWindows.of_time_difference(5))
    j.left("k", "a1", 100)
    j.left("k", "a2", 100)
    j.right("k", "x", 100)
    assert j.take() == [("k", "a1|x", 100), ("k", "a2|x", 100)]
    j.right("k", "x", 100)  # a duplicate value too
    assert j.take() == [("k", "a1|x", 100), ("k", "a2|x", 100)]
    j.left("k", "b", 101)
    assert j.take() == [("k", "b|x", 101), ("k", "b|x", 101)]


def test_null_keys_and_values() -> None:
    inner = _Join("inner", JoinWindows.of_time_difference(5))
    inner.left(None, "a", 100)
    inner.left("k", None, 101)
    assert inner.take() == []
    assert inner.context.dropped == ["null-key", "null-value"]
    left = _Join("left", JoinWindows.of_time_difference(5))
    left.left(None, "a", 100, "n")  # KIP-962: the outer side forwards it at once
    left.right(None, "x", 101)  # the inner side of a left join drops it
    assert left.sink.headers == [[("id", b"n")]]
    assert left.take() == [(None, "a|None", 100)]
    outer = _Join("outer", JoinWindows.of_time_difference(5))
    outer.right(None, "x", 100)
    assert outer.take() == [(None, "None|x", 100)]


def test_left_join_emits_unjoined_records_once_their_window_closed() -> None:
    j = _Join("left", JoinWindows(before_ms=10, after_ms=20, grace_ms=5))
    j.left("k", "a", 100, "1")
    j.left("j", "b", 101, "2")
    j.right("j", "x", 110, "3")
    assert j.take() == [("j", "b|x", 110)]
    j.left("z", "c", 125, "4")  # 100 + 20 + 5 = 125: not closed yet
    assert j.take() == []
    j.left("z", "d", 126, "5")  # closed: emitted before d's own results, with d's headers
    assert j.sink.headers == [[("id", b"5")]]
    assert j.take() == [("k", "a|None", 100)]
    j.right("k", "y", 115)  # a joined a partner late: no second result for a alone
    assert j.take() == [("k", "a|y", 115)]


def test_unjoined_results_come_out_on_ticks_alone() -> None:
    j = _Join("outer", JoinWindows(before_ms=10, after_ms=20, grace_ms=5))
    j.right("n", "x", 100)  # closes once 100 + 10 + 5 < stream time
    j.left("k", "a", 100)  # closes once 100 + 20 + 5 < stream time
    j.right("m", "y", 112)  # closes once 127 < stream time
    assert j.take() == []
    j.tick(126, side=1)
    # Kafka Streams' store order: by timestamp, the right side before the left at one timestamp.
    assert j.sink.headers == [None, None]
    assert j.take() == [("n", "None|x", 100), ("k", "a|None", 100)]
    j.tick(127)
    assert j.take() == []
    # m closed, but a left tick scans only once the scan's lower bound (112, where it stopped)
    # plus the left side's after and grace is behind it (Kafka Streams' condition): at 138.
    j.tick(128)
    assert j.take() == []
    j.tick(128, side=1)  # the right side's after is before: 112 + 10 + 5 < 128
    assert j.take() == [("m", "None|y", 112)]


@pytest.mark.parametrize("trigger", ["left", "right"])
def test_which_side_triggers_decides_whether_a_closed_record_is_looked_at(trigger: str) -> None:
    # Kafka Streams' own example (before 2000, after 1000, grace 1000): L's window closed at
    # 53000, but a right record reaches only 2000 ahead, so at 53001 it does not scan; R, late
    # but within its own window, then joins L, and L never comes out alone. A left record at
    # 53001 does scan: L comes out alone first, then joined.
    j = _Join("left", JoinWindows(before_ms=2_000, after_ms=1_000, grace_ms=1_000))
    j.left("x1", "L", 51_000)
    getattr(j, trigger)("other", "o", 53_001)
    j.right("x1", "R", 51_500)
    alone = [("x1", "L|None", 51_000)] if trigger == "left" else []
    assert [r for r in j.take() if r[0] == "x1"] == [*alone, ("x1", "L|R", 51_500)]


def test_a_scan_stops_after_both_sides_had_an_open_record() -> None:
    # Symmetric windows (10, grace 0). Kafka Streams' scan stops at the first entry after both
    # sides had an open one and leaves its lower bound there, past the earliest open record: a
    # record that closes later waits until a scan is due from that bound.
    j = _Join("outer", JoinWindows(before_ms=10, after_ms=10, grace_ms=0))
    j.left("a", "1", 100)
    j.right("b", "2", 105)
    j.left("c", "3", 106)
    j.right("e", "4", 107)
    j.left("f", "5", 108)
    j.left("g", "6", 116)  # 100 + 10 < 116: a and b closed; c and e open; stops at f (108)
    assert j.take() == [("a", "1|None", 100), ("b", "None|2", 105)]
    j.left("h", "7", 117)  # c closed at 116, but 108 + 10 >= 117: no scan
    assert j.take() == []
    j.left("i", "8", 119)
    assert j.take() == [("c", "3|None", 106), ("e", "None|4", 107), ("f", "5|None", 108)]


def test_out_of_order_record_whose_window_ended_is_emitted_at_once() -> None:
    j = _Join("left", JoinWindows(before_ms=10, after_ms=20, grace_ms=50))
    j.left("k", "a", 200)
    j.left("k", "b", 179)  # 179 + 20 < 200: nothing may join it any more
    assert j.take() == [("k", "b|None", 179)]
    j.left("k", "c", 180)  # 180 + 20 = 200: still buffered
    assert j.take() == []


def test_buffers_are_read_only_within_retention() -> None:
    # retention = 10 + 10 + 5 = 25: the right buffer (observed 200) is read from 176 on
    j = _Join("inner", JoinWindows(before_ms=10, after_ms=10, grace_ms=5))
    j.right("k", "x", 170)
    j.right("k", "y", 176)
    j.right("m", "z", 200)
    j.left("k", "late", 175)
    assert j.take() == [("k", "late|y", 176)]


def test_progress_is_held_back_by_the_window_and_grace() -> None:
    inner = _Join("inner", JoinWindows(before_ms=10, after_ms=20, grace_ms=5))
    inner.tick(1000)
    assert inner.sides[0].control_progress() == 1000
    left = _Join("left", JoinWindows(before_ms=10, after_ms=20, grace_ms=5))
    assert left.sides[0].control_progress() == NO_PROGRESS
    left.tick(1000)
    # after the scan at 1000 every unjoined record still buffered is at least 1000 - 20 - 5
    assert left.sides[0].control_progress() == 975
    assert left.sides[1].control_progress() == 975
    left.left("k", "a", 1100)  # in order: scanned at 1100
    assert left.sides[0].control_progress() == 1075


@pytest.mark.parametrize("kind", ["left", "outer"])
def test_buffers_survive_a_restart(kind: str) -> None:
    windows = JoinWindows(before_ms=10, after_ms=20, grace_ms=5)
    j = _Join(kind, windows)
    j.left("k", "a", 100)
    j.right("m", "x", 100)
    j.left("k", "b", 110)
    j.take()
    # A new task on the same stores (what restore gives): buffers and unjoined records are back.
    again = _Join(kind, windows, j.context)
    again.right("k", "y", 112)
    assert again.take() == [("k", "a|y", 112), ("k", "b|y", 112)]
    again.tick(200)
    expected = [("m", "None|x", 100)] if kind == "outer" else []
    assert again.take() == expected


def test_dsl_names_nodes_and_stores_as_kafka_streams() -> None:
    builder = StreamsBuilder()
    left, right = builder.stream("l"), builder.stream("r")
    left.outer_join(right, lambda a, b: (a, b), JoinWindows.of_time_difference(5)).to("o")
    left.join(right, lambda a, b: (a, b), JoinWindows.of_time_difference(5)).to("i")
    (sub,) = builder.build("app").subtopologies
    stores = {s.name: (s.kind, s.retention_ms) for s in sub.stores}
    assert stores == {
        "KSTREAM-OUTERTHIS-0000000004-store": ("window", 10),
        "KSTREAM-OUTEROTHER-0000000005-store": ("window", 10),
        "KSTREAM-OUTERSHARED-0000000004-store": ("key_value", None),
        "KSTREAM-JOINTHIS-0000000010-store": ("window", 10),
        "KSTREAM-JOINOTHER-0000000011-store": ("window", 10),
    }
    with pytest.raises(TypeError, match="JoinWindows"):
        left.join(right, lambda a, b: a)  # type: ignore[call-overload]

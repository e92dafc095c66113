"""Grouped tables without a broker: the repartition topic's Change format (Kafka Streams'
``ChangedSerializer``), ``KTableRepartitionMap``'s records and ``KTableAggregate``'s
subtract-then-add with its timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime.processors import (
    Processor,
    TableChangeAggregateProcessor,
    TableRepartitionMapProcessor,
)
from streams_runtime.record import Record
from streams_runtime.serdes import Change, ChangedSerde, Integer, SerializationError, String
from tests.streams_runtime.processors.memory_context import MemoryContext


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, Any, int, Any]] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.seen.append((record.key, record.value, record.timestamp, record.old_value))


@pytest.mark.parametrize(
    ("change", "encoded"),
    [
        (Change("new", None), b"new\x01"),
        (Change(None, "old"), b"old\x00"),
        # new value's length as a zig-zag varint (3 -> 6), new, old, flag 2 (KIP-904)
        (Change("new", "old"), b"\x06newold\x02"),
        (Change("", "o"), b"\x00o\x02"),
        (Change("n" * 70, ""), b"\x8c\x01" + b"n" * 70 + b"\x02"),
    ],
)
def test_changes_are_written_as_kafka_streams_writes_them(
    change: Change[str], encoded: bytes
) -> None:
    serde = ChangedSerde(String())
    assert serde.serialize(change) == encoded
    assert serde.deserialize(encoded) == change


def test_a_change_without_values_cannot_be_written_and_versioned_flags_are_read() -> None:
    serde = ChangedSerde(String())
    with pytest.raises(SerializationError):
        serde.serialize(Change(None, None))
    # Kafka Streams' versioned-table flags 3-5 carry an is-latest byte before the flag.
    assert serde.deserialize(b"old\x01\x03") == Change(None, "old")
    assert serde.deserialize(b"\x02nold\x01\x05") == Change("n", "old")


def test_repartition_map_sends_the_old_value_first_or_both_in_one_record() -> None:
    select = TableRepartitionMapProcessor(lambda k, v: (v[0] if v != "-" else None, k))
    out = _Collect()
    select.children = [out]
    select.process(Record("k", "a1", 10, None, None))  # new row
    select.process(Record("k", "a2", 20, None, "a1"))  # same group: one record
    select.process(Record("k", "b1", 30, None, "a2"))  # moves: old group first
    select.process(Record("k", None, 40, None, "b1"))  # deleted
    select.process(Record("k", "-", 50, None, None))  # a null new key: nothing
    assert out.seen == [
        ("a", Change("k", None), 10, None),
        ("a", Change("k", "k"), 20, None),
        ("a", Change(None, "k"), 30, None),
        ("b", Change("k", None), 30, None),
        ("b", Change(None, "k"), 40, None),
    ]


def test_table_aggregate_subtracts_then_adds_with_kafka_streams_timestamps() -> None:
    context = MemoryContext()
    count = TableChangeAggregateProcessor(
        "counts",
        String(),
        Integer(),
        initializer=lambda: 0,
        aggregator=lambda _k, _v, n: n + 1,
        subtractor=lambda _k, _v, n: n - 1,
    )
    out = _Collect()
    count.children = [out]
    count.init(context)
    count.process(Record("g", Change("k1", None), 100))
    count.process(Record("g", Change("k2", None), 50))  # older: the aggregate's is later
    count.process(Record("g", Change(None, "k1"), 70))  # k1 leaves
    count.process(Record("g", Change("k2", "k2"), 90))  # same row, same group, not newer
    count.process(Record("g", Change(None, "k2"), 500))  # none left: 0, not a delete
    count.process(Record("h", Change(None, "k3"), 600))  # nothing to take out of: a delete
    assert out.seen == [
        ("g", 1, 100, None),
        ("g", 2, 100, 1),
        ("g", 1, 100, 2),
        ("g", 1, 100, 1),
        ("g", 0, 500, 1),
        ("h", None, 600, None),
    ]
    assert context.skips == []


def test_an_unchanged_aggregate_with_a_newer_timestamp_is_not_forwarded() -> None:
    context = MemoryContext()
    count = TableChangeAggregateProcessor(
        "counts",
        String(),
        Integer(),
        initializer=lambda: 0,
        aggregator=lambda _k, _v, n: n + 1,
        subtractor=lambda _k, _v, n: n - 1,
    )
    out = _Collect()
    count.children = [out]
    count.init(context)
    count.process(Record("g", Change("a", None), 100))
    count.process(Record("g", Change("a", "a"), 200))  # 1 -> 1, newer: emit-on-change
    count.process(Record("g", Change("b", None), 150))  # stamped with the kept 200
    assert out.seen == [("g", 1, 100, None), ("g", 2, 200, 1)]
    assert context.skips == ["counts"]

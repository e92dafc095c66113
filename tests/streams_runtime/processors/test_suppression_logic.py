"""``TimeLimitSuppressProcessor`` alone (Kafka Streams' ``KTableSuppressProcessor`` with
``untilTimeLimit``), on in-memory stores: its buffer survives a restart through its store
(value, old value, timestamp, headers and place), its byte count, null keys and the progress it
holds back. What it outputs in a topology is
tests/streams_runtime/topologies/test_suppress_time_limit_driver.py. Pure logic, no broker."""

from __future__ import annotations

from typing import Any

from streams_runtime.processors import NO_PROGRESS, Processor, SourceProcessor
from streams_runtime.processors.suppression import TimeLimitSuppressProcessor, _Buffered
from streams_runtime.record import Record
from streams_runtime.serdes import Json, String
from tests.streams_runtime.processors.memory_context import MemoryContext


class _Collect(Processor):
    keeps_order = True

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Record[Any, Any]] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.records.append(record)


def _suppression(
    context: MemoryContext, wait_ms: int = 100, **bounds: Any
) -> tuple[SourceProcessor, TimeLimitSuppressProcessor, _Collect]:
    source = SourceProcessor(String(), Json())
    suppress = TimeLimitSuppressProcessor(
        "buffer", String(), Json(), time_to_wait_ms=wait_ms, **bounds
    )
    out = _Collect()
    for parent, child in ((source, suppress), (suppress, out)):
        parent.children.append(child)
        child.parents.append(parent)
    suppress.init(context)
    return source, suppress, out


def test_the_buffer_is_restored_from_its_store_with_its_order_and_context() -> None:
    context = MemoryContext()
    _, suppress, out = _suppression(context)
    suppress.process(Record("b", {"v": 1}, 10, [("h", b"x"), ("none", None)], None))
    suppress.process(Record("a", 2, 20, None, 1))
    suppress.process(Record("b", {"v": 3}, 30, [("h", b"y")], {"v": 1}))
    size = suppress.buffered_bytes
    assert out.records == []

    # A new instance (a restart) reads the buffer back from the store.
    source, restored, out = _suppression(context)
    assert restored.buffered_bytes == size
    source.advance(119)  # b was buffered first (10): out at 110; a at 120
    assert [(r.key, r.value, r.timestamp, r.headers, r.old_value) for r in out.records] == [
        ("b", {"v": 3}, 30, [("h", b"y")], {"v": 1})
    ]
    source.advance(120)
    assert [(r.key, r.value, r.old_value) for r in out.records[1:]] == [("a", 2, 1)]
    assert context.kv["buffer"].count() == 0  # emitted keys are deleted from the store
    assert restored.buffered_bytes == 0


def test_encoding_round_trips_and_keeps_the_prior_value() -> None:
    buffered = _Buffered(5, 7, [("k", b"v"), ("n", None)], b"new", b"old", b"old")
    again = _Buffered.decode(buffered.encode())
    assert again == buffered
    assert again.prior is again.old  # counted once, as Kafka Streams does
    assert again.size(b"key") == buffered.size(b"key") == 8 + 3 + 3 + 3 + 20 + 2 + 1
    empty = _Buffered(1, 1, None, None, None, None)
    assert _Buffered.decode(empty.encode()) == empty


def test_a_null_key_is_dropped_and_counted() -> None:
    context = MemoryContext()
    _, suppress, out = _suppression(context, wait_ms=0)
    suppress.process(Record(None, 1, 10))
    assert out.records == []
    assert context.dropped == ["null-key"]


def test_control_time_is_held_back_by_the_wait() -> None:
    context = MemoryContext()
    source, suppress, _ = _suppression(context, wait_ms=100)
    assert suppress.control_progress() == NO_PROGRESS
    source.advance(50)
    assert suppress.control_progress() == NO_PROGRESS  # not yet 100 past anything
    source.advance(1000)
    assert suppress.control_progress() == 900

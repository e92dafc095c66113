"""The record cache without a broker: table processors over cached stores (Kafka Streams'
``ThreadCache``/``CachingKeyValueStore`` rules)."""

from __future__ import annotations

from typing import Any

from streams_runtime.processors import Processor
from streams_runtime.processors.grouped_tables import TableChangeAggregateProcessor
from streams_runtime.processors.tables import TableAggregateProcessor, TableSourceProcessor
from streams_runtime.record import Headers, Record, TopicPartitionId
from streams_runtime.serdes import Change, Integer, Json, String, ValueAndTimestamp
from streams_runtime.state import (
    ChangelogWriter,
    InMemoryKeyValueEngine,
    KeyValueStore,
    SourcePosition,
    TaskCaches,
    ThreadCache,
)
from streams_runtime.state.caching import ENTRY_OVERHEAD
from streams_runtime.state.changelog import decode_source
from tests.streams_runtime.processors.memory_context import MemoryContext
from tests.streams_runtime.state.record_sinks import ListSink

INPUT = TopicPartitionId("in", 0)


class CachedContext(MemoryContext):
    """A task context whose key-value stores are logged and go through a record cache."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.position = SourcePosition()
        self.sink = ListSink(sourced=True)  # every write here has a source
        self.caches = TaskCaches(ThreadCache(max_bytes), "0_0", self.position)

    def kv_store(self, name: str) -> KeyValueStore:
        if name not in self.kv:
            changelog = ChangelogWriter(self.sink, f"{name}-changelog", 0, self.position)
            self.kv[name] = KeyValueStore(name, 0, InMemoryKeyValueEngine(), changelog)
        return self.caches.kv_store(self.kv[name])

    def commit(self) -> None:
        self.caches.flush()
        for store in self.kv.values():
            assert store.changelog is not None
            store.changelog.flush()


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, Any, int, Any]] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.seen.append((record.key, record.value, record.timestamp, record.old_value))


def _counting(context: CachedContext) -> tuple[TableAggregateProcessor, _Collect]:
    count = TableAggregateProcessor(
        "counts", String(), Integer(), initializer=lambda: 0, aggregator=lambda k, v, a: a + 1
    )
    sink = _Collect()
    count.children = [sink]
    count.init(context)
    return count, sink


def _feed(context: CachedContext, processor: Processor, records: list[tuple[str, int]]) -> None:
    for offset, (key, ts) in enumerate(records, start=len(context.sink.sent) * 100):
        context.position.set(INPUT, offset)
        processor.process(Record(key, "x", ts, [("h", str(offset).encode())]))


def test_updates_within_a_commit_interval_reach_store_changelog_and_downstream_once() -> None:
    context = CachedContext(10 * 1024 * 1024)
    count, sink = _counting(context)
    for offset, (key, ts) in enumerate([("a", 10), ("b", 20), ("a", 5), ("a", 30), ("b", 25)]):
        context.position.set(INPUT, offset)
        count.process(Record(key, "x", ts, [("h", str(offset).encode())]))
    assert sink.seen == []
    assert context.kv["counts"].engine.get(b"a") is None  # not written yet
    assert context.kv_store("counts").get(b"a") is not None  # but read through the cache
    context.commit()
    # In order of each key's latest write; the timestamp is the aggregate's, the old value what
    # the store held before the interval.
    assert sink.seen == [("a", 3, 30, None), ("b", 2, 25, None)]
    assert context.sink.changes() == [
        (b"a", ValueAndTimestamp(Integer().serialize(3) or b"", 30).to_bytes(), 3),
        (b"b", ValueAndTimestamp(Integer().serialize(2) or b"", 25).to_bytes(), 4),
    ]
    context.position.set(INPUT, 5)
    count.process(Record("a", "x", 40))
    context.commit()
    assert sink.seen[-1] == ("a", 4, 40, 3)
    context.commit()  # nothing dirty: nothing again
    assert len(sink.seen) == 3


def test_forwarded_records_carry_the_latest_writes_headers() -> None:
    context = CachedContext(10 * 1024 * 1024)
    count, _ = _counting(context)
    seen: list[Headers | None] = []

    class _Headers(Processor):
        def process(self, record: Record[Any, Any]) -> None:
            seen.append(record.headers)

    count.children.append(_Headers())
    _feed(context, count, [("a", 1), ("a", 2)])
    context.commit()
    assert seen == [[("h", b"1")]]


def test_eviction_flushes_the_whole_store_cache_evicted_entry_first() -> None:
    # Room for two entries: the third key evicts the least recently used one.
    context = CachedContext(2 * (ENTRY_OVERHEAD + 26))
    count, sink = _counting(context)
    _feed(context, count, [("a", 1), ("b", 2), ("b", 3)])
    assert sink.seen == []
    _feed(context, count, [("c", 4)])
    # The put of "c" made it dirty before "a" was evicted: that flush takes it too.
    assert sink.seen == [("a", 1, 1, None), ("b", 2, 3, None), ("c", 1, 4, None)]
    assert context.kv["counts"].engine.get(b"b") is not None
    context.commit()
    assert len(sink.seen) == 3
    _feed(context, count, [("b", 5)])  # "b" was flushed, not evicted: still cached, clean
    context.commit()
    assert sink.seen[-1] == ("b", 3, 5, 2)


def test_a_delete_of_a_key_never_stored_is_neither_written_nor_forwarded() -> None:
    context = CachedContext(10 * 1024 * 1024)
    agg = TableChangeAggregateProcessor(
        "sums",
        String(),
        Integer(),
        initializer=lambda: 0,
        aggregator=lambda k, v, a: a + v,
        subtractor=lambda k, v, a: a - v,
    )
    sink = _Collect()
    agg.children = [sink]
    agg.init(context)
    context.position.set(INPUT, 0)
    agg.process(Record("k", Change(5, None), 1))
    # A reducer-like delete: the aggregate goes away within the same interval.
    agg._table.update(b"k", None, None, 2)  # type: ignore[union-attr]
    context.commit()
    assert sink.seen == []
    assert context.sink.changes() == []
    assert context.kv["sums"].engine.get(b"k") is None


def test_emit_on_change_applies_to_what_is_flushed() -> None:
    context = CachedContext(10 * 1024 * 1024)
    table = TableSourceProcessor("prices", String(), Json())
    sink = _Collect()
    table.children = [sink]
    table.init(context)
    context.position.set(INPUT, 0)
    table.process(Record("k", {"p": 1}, 10))
    context.commit()
    table.process(Record("k", {"p": 2}, 20))
    table.process(Record("k", {"p": 1}, 30))  # back to the stored value, newer: idempotent
    context.commit()
    assert sink.seen == [("k", {"p": 1}, 10, None)]
    assert context.skips == ["prices"]
    assert context.kv["prices"].engine.get(b"k") == ValueAndTimestamp(b'{"p":1}', 30).to_bytes()


def test_cache_size_zero_is_no_cache() -> None:
    context = CachedContext(0)
    count, sink = _counting(context)
    _feed(context, count, [("a", 1), ("a", 2)])
    assert sink.seen == [("a", 1, 1, None), ("a", 2, 2, 1)]
    assert type(context.kv_store("counts")) is KeyValueStore


def test_a_flush_that_dirties_a_downstream_cache_flushes_it_too() -> None:
    context = CachedContext(10 * 1024 * 1024)
    count, _ = _counting(context)
    table = TableSourceProcessor("downstream", String(), Integer())
    sink = _Collect()
    count.children = [table]
    table.children = [sink]
    table.init(context)
    _feed(context, count, [("a", 1), ("a", 2)])
    context.commit()
    assert sink.seen == [("a", 2, 2, None)]


def test_a_write_back_names_its_entries_input_and_leaves_the_position_alone() -> None:
    """The counts' write-back names the input of each key's latest write; the table the flush
    forwards to writes under the task's position (the last input taken, committed with it),
    which the flush does not move."""
    context = CachedContext(10 * 1024 * 1024)
    count, _ = _counting(context)
    table = TableSourceProcessor("downstream", String(), Integer())
    table.children = [_Collect()]
    count.children = [table]
    table.init(context)
    for offset, key in ((3, "a"), (4, "b"), (5, "c")):
        context.position.set(INPUT, offset)
        count.process(Record(key, "x", offset))
    context.position.set(INPUT, 6)
    count.process(Record("c", "x", 6))
    context.commit()
    assert (context.position.tp, context.position.offset) == (INPUT, 6)
    sent: dict[str, list[tuple[bytes | None, int]]] = {}
    for topic, _partition, key, _value, _ts, headers in context.sink.sent:
        assert headers is not None
        sent.setdefault(topic, []).append((key, decode_source(headers[0][1] or b"")[1]))
    assert sent["counts-changelog"] == [(b"a", 3), (b"b", 4), (b"c", 6)]
    assert sent["downstream-changelog"] == [(b"a", 6), (b"b", 6), (b"c", 6)]

"""Processors: the per-task instances of a topology's nodes.

Data flows through :meth:`Processor.process`; time flows through :meth:`Processor.advance`, which
a control record triggers at every processor reachable from its source. Time-driven processors
(session aggregation, suppression) keep their own observed stream time, the maximum timestamp of
what reached them, as Kafka Streams' processors do.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any, Protocol

from streams_runtime.record import Headers, Record, SourceRecord
from streams_runtime.serdes import Serde
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.state.changelog import session_changelog_key, split_session_changelog_key
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindow, SessionWindows, merge_sessions

__all__ = [
    "FilterProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "PassThroughProcessor",
    "PeekProcessor",
    "Processor",
    "ProcessorContext",
    "SessionAggregateProcessor",
    "SinkProcessor",
    "SourceProcessor",
    "StreamTableJoinProcessor",
    "SuppressProcessor",
    "TableSourceProcessor",
]

_PURGE_INTERVAL_S = 30.0  # expired sessions are removed at most this often (a full scan)


class ProcessorContext(Protocol):
    """What a task offers its processors."""

    @property
    def application_id(self) -> str: ...

    @property
    def stream_time(self) -> int: ...

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None: ...

    def kv_store(self, name: str) -> KeyValueStore: ...

    def session_store(self, name: str) -> SessionStore: ...

    def record_dropped(self, processor: str, reason: str) -> None: ...

    def suppress_buffer_size(self, processor: str, size: int) -> None: ...


class Processor:
    """Base processor: forwards records and time to its children."""

    name = "processor"

    def __init__(self) -> None:
        self.children: list[Processor] = []

    def init(self, context: ProcessorContext) -> None:
        """Called once per task before the first record, after state was restored."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)

    def forward(self, record: Record[Any, Any]) -> None:
        for child in self.children:
            child.process(record)

    def advance(self, timestamp: int) -> None:
        """Time passed to ``timestamp`` without data (a control record)."""
        for child in self.children:
            child.advance(timestamp)

    def flush(self) -> None:
        """Called before every commit."""


class PassThroughProcessor(Processor):
    name = "merge"


class SourceProcessor(Processor):
    """Deserializes source records; the task forwards them (and applies the bad-record policy to
    serde errors and to exceptions raised further down)."""

    name = "source"

    def __init__(self, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__()
        self._key_serde = key_serde
        self._value_serde = value_serde

    def deserialize(self, source: SourceRecord) -> Record[Any, Any]:
        return Record(
            self._key_serde.deserialize(source.key),
            self._value_serde.deserialize(source.value),
            source.timestamp,
            source.headers,
        )


class FilterProcessor(Processor):
    name = "filter"

    def __init__(self, predicate: Callable[[Any, Any], bool]) -> None:
        super().__init__()
        self._predicate = predicate

    def process(self, record: Record[Any, Any]) -> None:
        if self._predicate(record.key, record.value):
            self.forward(record)


class MapProcessor(Processor):
    name = "map"

    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__()
        self._mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        key, value = self._mapper(record.key, record.value)
        self.forward(Record(key, value, record.timestamp, record.headers))


class MapValuesProcessor(Processor):
    name = "map_values"

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        super().__init__()
        self._mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(
            Record(record.key, self._mapper(record.value), record.timestamp, record.headers)
        )


class PeekProcessor(Processor):
    name = "peek"

    def __init__(self, action: Callable[[Any, Any], None]) -> None:
        super().__init__()
        self._action = action

    def process(self, record: Record[Any, Any]) -> None:
        self._action(record.key, record.value)
        self.forward(record)


class SinkProcessor(Processor):
    """Serializes and sends to a topic; the producer partitions by key with murmur2."""

    name = "sink"

    def __init__(
        self, topic: str, key_serde: Serde[Any], value_serde: Serde[Any], *, internal: bool = False
    ) -> None:
        super().__init__()
        self.topic = topic
        self._internal = internal
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        if self._internal:
            self.topic = f"{context.application_id}-{self.topic}"

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        self._context.send(
            self.topic,
            self._key_serde.serialize(record.key),
            self._value_serde.serialize(record.value),
            record.timestamp,
            None,
        )


class TableSourceProcessor(Processor):
    """Materialises a topic as a table: the latest value per key; null values delete."""

    name = "table_source"

    def __init__(self, store_name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        if record.key is None:
            self._context.record_dropped(self._store_name, "null-key")
            return
        self._store.put(
            self._key_serde.serialize(record.key) or b"",
            self._value_serde.serialize(record.value),
            record.timestamp,
        )
        self.forward(record)


class StreamTableJoinProcessor(Processor):
    """Joins each stream record with the table's current value for its key."""

    name = "stream_table_join"

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        table_value_serde: Serde[Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._table_value_serde = table_value_serde
        self._joiner = joiner
        self._left = left
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        if record.key is None:
            self._context.record_dropped(self._store_name, "null-key")
            return
        raw = self._store.get(self._key_serde.serialize(record.key) or b"")
        table_value = self._table_value_serde.deserialize(raw)
        if table_value is None and not self._left:
            return
        joined = self._joiner(record.value, table_value)
        self.forward(Record(record.key, joined, record.timestamp, record.headers))


class SessionAggregateProcessor(Processor):
    """Session-window aggregation (Kafka Streams' ``KStreamSessionWindowAggregate``).

    A record at ``t`` merges with every session of its key where ``start - gap <= t <= end + gap``;
    it is late, dropped and counted when the merged session ends before
    ``stream time - grace - gap``. Merged-away sessions are deleted and forwarded as tombstones,
    the merged session as an update, both with the session's end as timestamp.
    """

    name = "session_aggregate"

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._windows = windows
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._initializer = initializer
        self._aggregator = aggregator
        self._merger = merger
        self._store: SessionStore | None = None
        self._context: ProcessorContext | None = None
        self.observed_stream_time = -1
        self._next_purge = time.monotonic() + _PURGE_INTERVAL_S

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.session_store(self._store_name)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        if record.key is None:
            self._context.record_dropped(self._store_name, "null-key")
            return
        t = record.timestamp
        self.observed_stream_time = max(self.observed_stream_time, t)
        gap = self._windows.gap_ms
        key_bytes = self._key_serde.serialize(record.key) or b""
        found = self._store.find_sessions(key_bytes, t - gap, t + gap)
        merged = merge_sessions(t, (SessionWindow(s, e) for s, e, _ in found))
        if self._windows.is_late(merged.end, self.observed_stream_time):
            self._context.record_dropped(self._store_name, "late")
            return
        aggregate = self._initializer()
        for start, end, raw in found:
            aggregate = self._merger(record.key, aggregate, self._value_serde.deserialize(raw))
            if (start, end) != (merged.start, merged.end):
                self._store.put(key_bytes, start, end, None, t)
                self.forward(Record(Windowed(record.key, start, end), None, end))
        aggregate = self._aggregator(record.key, record.value, aggregate)
        self._store.put(
            key_bytes, merged.start, merged.end, self._value_serde.serialize(aggregate), t
        )
        self.forward(Record(Windowed(record.key, merged.start, merged.end), aggregate, merged.end))

    def advance(self, timestamp: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        super().advance(timestamp)

    def flush(self) -> None:
        # Retention: remove sessions no accepted record can merge with any more, with
        # tombstones, so the compacted changelog forgets them too.
        assert self._store is not None
        now = time.monotonic()
        if self.observed_stream_time < 0 or now < self._next_purge:
            return
        self._next_purge = now + _PURGE_INTERVAL_S
        cutoff = self.observed_stream_time - self._windows.retention_ms
        expired = [(k, s, e) for k, s, e, _ in self._store.items() if e < cutoff]
        for key, start, end in expired:
            self._store.put(key, start, end, None, self.observed_stream_time)


class SuppressProcessor(Processor):
    """Suppress until window closes (Kafka Streams' ``KTableSuppressProcessor`` with final
    results): keeps the latest update of every session and forwards it once
    ``end + gap + grace <= observed stream time``. Tombstones (merged-away sessions) remove the
    session, so it is never emitted. The buffer is a changelogged store, so a restart neither
    loses nor repeats final results; control records advance the observed stream time too."""

    name = "suppress"

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._windows = windows
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None
        self._pending: dict[bytes, Record[Any, Any]] = {}
        self._by_end: list[tuple[int, bytes]] = []  # heap; may hold stale entries
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)
        for buffer_key, raw in self._store.items():
            key_bytes, start, end = split_session_changelog_key(buffer_key)
            windowed = Windowed(self._key_serde.deserialize(key_bytes), start, end)
            self._pending[buffer_key] = Record(windowed, self._value_serde.deserialize(raw), end)
            self._by_end.append((end, buffer_key))
        heapq.heapify(self._by_end)
        context.suppress_buffer_size(self._store_name, len(self._pending))

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        windowed: Windowed[Any] = record.key
        buffer_key = session_changelog_key(
            self._key_serde.serialize(windowed.key) or b"", windowed.start, windowed.end
        )
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        if record.value is None:
            if self._pending.pop(buffer_key, None) is not None:
                self._store.put(buffer_key, None, record.timestamp)
        else:
            if buffer_key not in self._pending:
                heapq.heappush(self._by_end, (windowed.end, buffer_key))
            self._pending[buffer_key] = record
            self._store.put(buffer_key, self._value_serde.serialize(record.value), record.timestamp)
        self._emit_closed()

    def advance(self, timestamp: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        self._emit_closed()
        super().advance(timestamp)

    def _emit_closed(self) -> None:
        assert self._store is not None
        assert self._context is not None
        heap, windows, now = self._by_end, self._windows, self.observed_stream_time
        emitted = False
        while heap and windows.is_final(heap[0][0], now):
            _, buffer_key = heapq.heappop(heap)
            record = self._pending.pop(buffer_key, None)
            if record is None:
                continue  # merged away (tombstone) after it was buffered
            self._store.put(buffer_key, None, max(record.timestamp, now))
            self.forward(record)
            emitted = True
        if len(heap) > 2 * len(self._pending) + 64:
            # Stale entries of merged-away sessions: rebuild rather than let them pile up.
            self._by_end = [(r.key.end, k) for k, r in self._pending.items()]
            heapq.heapify(self._by_end)
        if emitted:
            self._context.suppress_buffer_size(self._store_name, len(self._pending))

    def flush(self) -> None:
        assert self._context is not None
        self._context.suppress_buffer_size(self._store_name, len(self._pending))

"""Processors: the per-task instances of a topology's nodes.

Data flows through :meth:`Processor.process`; time flows through :meth:`Processor.advance`, which
a control record triggers at every processor reachable from its source. Time-driven processors
(session aggregation, suppression) keep their own observed stream time, the maximum timestamp of
what reached them, as Kafka Streams' processors do.

**Progress** is what the runtime promises the readers of its outputs when it ticks them: on
in-order input, records a sink still sends are not older than :meth:`SinkProcessor.progress`.
It flows through the graph like data (DESIGN §5), not from the task's stream time:

- only forwarded data and input control records move it. A record a filter drops, or an
  aggregation drops as late or keyless, promises nothing downstream;
- stateless and table processors keep their input's order, so the data a sink sends moves its
  progress, and control time passes through them (:meth:`Processor.control_progress`);
- a session aggregation stamps its output with session ends, which trail its input by up to
  ``gap + grace``, and holds progress back by as much; data after it is out of order and moves
  nothing. A suppression needs no hold of its own: what it still buffers ends after that bound.

Tables (a table source and non-windowed aggregations) keep :class:`ValueAndTimestamp` values in
their key-value store and drop idempotent updates (KIP-557 emit-on-change, see
:func:`is_idempotent_update`). Table processors forward the new value of every change, ``None``
for a delete.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any, Protocol

from streams_runtime.record import Headers, Record, SourceRecord
from streams_runtime.serdes import Serde, SessionWindowedSerde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.state.changelog import session_changelog_key, split_session_changelog_key
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindow, SessionWindows, merge_sessions

__all__ = [
    "NO_PROGRESS",
    "FilterProcessor",
    "KeyedStoreProcessor",
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
    "TableAggregateProcessor",
    "TableFilterProcessor",
    "TableMapValuesProcessor",
    "TableSourceProcessor",
    "TimestampedTableStore",
    "is_idempotent_update",
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
        *,
        partition_key: bytes | None = None,
    ) -> None:
        """Send a record; ``partition_key`` (when given) chooses the partition instead of
        ``key``, hashed the same way."""
        ...

    def kv_store(self, name: str) -> KeyValueStore: ...

    def session_store(self, name: str) -> SessionStore: ...

    def record_dropped(self, processor: str, reason: str) -> None: ...

    def record_idempotent_skip(self, processor: str) -> None: ...

    def suppress_buffer_size(self, processor: str, size: int) -> None: ...


NO_PROGRESS = -1


class Processor:
    """Base processor: forwards records and time to its children."""

    name = "processor"
    reorders = False
    """Whether the timestamps of what this processor forwards may run backwards while its input's
    run forwards (so data after it promises nothing, see :meth:`SinkProcessor.progress`)."""

    def __init__(self) -> None:
        self.children: list[Processor] = []
        self.parents: list[Processor] = []

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

    def control_progress(self) -> int:
        """The progress this processor passes on without data: the control time that reached it,
        held back by every aggregation on the way (:data:`NO_PROGRESS` when none). Several
        parents are one time-ordered stream (the task takes records in timestamp order), so the
        largest counts, as for Kafka Streams' stream time."""
        return max((parent.control_progress() for parent in self.parents), default=NO_PROGRESS)

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
        self._control_time = NO_PROGRESS

    def advance(self, timestamp: int) -> None:
        self._control_time = max(self._control_time, timestamp)
        super().advance(timestamp)

    def control_progress(self) -> int:
        return self._control_time

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
    """Serializes and sends to a topic, partitioned by key with murmur2 (windowed keys by their
    inner key)."""

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
        self._sent = NO_PROGRESS
        self._in_order = True

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        if self._internal:
            self.topic = f"{context.application_id}-{self.topic}"
        self._in_order = not any(p.reorders for p in _ancestors(self))

    def progress(self) -> int:
        """What a tick on this sink's topic may promise: records this sink still sends have
        timestamps of at least this, on in-order input (:data:`NO_PROGRESS`: nothing yet). The
        data it sent counts when nothing before it reorders records; control time always."""
        sent = self._sent if self._in_order else NO_PROGRESS
        return max(sent, self.control_progress())

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        self._sent = max(self._sent, record.timestamp)
        key_serde = self._key_serde
        # Windowed keys are partitioned by their inner key, as Kafka Streams'
        # WindowedStreamPartitioner does: every window of a key lands in one partition.
        partition_key = (
            key_serde.inner.serialize(record.key.key)
            if isinstance(key_serde, SessionWindowedSerde) and record.key is not None
            else None
        )
        self._context.send(
            self.topic,
            key_serde.serialize(record.key),
            self._value_serde.serialize(record.value),
            record.timestamp,
            record.headers,
            partition_key=partition_key,
        )


def _ancestors(processor: Processor) -> list[Processor]:
    found: list[Processor] = []
    stack = list(processor.parents)
    while stack:
        parent = stack.pop()
        if parent not in found:
            found.append(parent)
            stack.extend(parent.parents)
    return found


def is_idempotent_update(
    stored: ValueAndTimestamp | None, value: bytes | None, timestamp: int
) -> bool:
    """Whether a table update is idempotent and is not forwarded (KIP-557 emit-on-change): the key
    holds a value, the update's serialized bytes equal it, and the update's timestamp is strictly
    newer than the stored one. It is still written: the store remembers the newer timestamp, as
    Kafka Streams' store does, so later updates are stamped as Kafka Streams stamps them.

    Everything else is forwarded: a different value, a delete, and the same value with an equal
    or older timestamp. An older timestamp moves back when the value became valid, which
    downstream must learn; an equal one is what re-processing the very same record gives, which
    therefore always reaches downstream again.
    """
    return (
        stored is not None
        and value is not None
        and value == stored.value
        and timestamp > stored.timestamp
    )


class TimestampedTableStore:
    """A table's key-value store: values are :class:`ValueAndTimestamp` (8-byte big-endian
    timestamp, then the serialized value), written through emit-on-change.

    Crash safety (why Kafka Streams disabled KIP-557 in 2.6.2/2.7.1, KAFKA-12508): dropping an
    update because the store already holds it is only safe when the store never holds updates
    whose output downstream may not have received. The state layer guarantees that a restored
    store is never ahead of the committed input (changelog records carry their source offset and
    restore skips uncommitted ones; changelog writes are flushed only at commit), so input that
    is processed again after a crash meets the state it met the first time, and forwards again.
    """

    def __init__(self, store: KeyValueStore, context: ProcessorContext) -> None:
        self.store = store
        self._context = context

    def get(self, key: bytes) -> ValueAndTimestamp | None:
        """The stored value and timestamp of ``key``, or ``None``."""
        raw = self.store.get(key)
        return None if raw is None else ValueAndTimestamp.from_bytes(raw)

    def update(
        self, key: bytes, stored: ValueAndTimestamp | None, value: bytes | None, timestamp: int
    ) -> bool:
        """Write ``value`` (``None`` deletes) at ``timestamp``; True when the update is to be
        forwarded, False when it is idempotent against ``stored`` (what :meth:`get` returned).
        Idempotent updates are counted in ``streams_idempotent_update_skip_total``."""
        encoded = None if value is None else ValueAndTimestamp(value, timestamp).to_bytes()
        self.store.put(key, encoded, timestamp)
        if is_idempotent_update(stored, value, timestamp):
            self._context.record_idempotent_skip(self.store.name)
            return False
        return True


class KeyedStoreProcessor(Processor):
    """A processor keeping per-key state in the store ``store_name``: records with a null key
    have no place in it and are dropped and counted (reason ``null-key``)."""

    def __init__(self, store_name: str, key_serde: Serde[Any]) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context

    def _store_key(self, record: Record[Any, Any]) -> bytes | None:
        """The record's serialized key, or ``None`` (counted) when it has none."""
        if record.key is None:
            assert self._context is not None
            self._context.record_dropped(self._store_name, "null-key")
            return None
        return self._key_serde.serialize(record.key) or b""


class TableSourceProcessor(KeyedStoreProcessor):
    """Materialises a topic as a table: the latest value per key; null values delete. Updates
    are written, and forwarded unless idempotent (:func:`is_idempotent_update`)."""

    name = "table_source"

    def __init__(self, store_name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__(store_name, key_serde)
        self._value_serde = value_serde
        self._table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._table = TimestampedTableStore(context.kv_store(self._store_name), context)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._table is not None
        key = self._store_key(record)
        if key is None:
            return
        value = self._value_serde.serialize(record.value)
        stored = self._table.get(key)
        if self._table.update(key, stored, value, record.timestamp):
            old = None if stored is None else self._value_serde.deserialize(stored.value)
            self.forward(Record(record.key, record.value, record.timestamp, record.headers, old))


class TableAggregateProcessor(KeyedStoreProcessor):
    """Non-windowed aggregation into a table (Kafka Streams' ``KStreamAggregate``).

    Per key, ``aggregator(key, value, aggregate)`` folds each record into the aggregate, which
    starts as ``initializer()``; an aggregator returning ``None`` deletes the key. Records with a
    null key or a null value are dropped and counted. The result's timestamp is the largest
    timestamp of the records aggregated so far; updates are written, and forwarded unless
    idempotent (:func:`is_idempotent_update`), e.g. a maximum that did not change.
    """

    name = "table_aggregate"

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name, key_serde)
        self._value_serde = value_serde
        self._initializer = initializer
        self._aggregator = aggregator
        self._table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._table = TimestampedTableStore(context.kv_store(self._store_name), context)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._table is not None
        assert self._context is not None
        key = self._store_key(record)
        if key is None:
            return
        if record.value is None:
            # A null value in a stream is no delete: Kafka Streams skips it too.
            self._context.record_dropped(self._store_name, "null-value")
            return
        stored = self._table.get(key)
        if stored is None:
            old, timestamp = None, record.timestamp
            aggregate = self._initializer()
        else:
            old = aggregate = self._value_serde.deserialize(stored.value)
            timestamp = max(stored.timestamp, record.timestamp)
        aggregate = self._aggregator(record.key, record.value, aggregate)
        value = self._value_serde.serialize(aggregate)
        if self._table.update(key, stored, value, timestamp):
            self.forward(Record(record.key, aggregate, timestamp, record.headers, old))


class TableFilterProcessor(Processor):
    """Keeps a table's rows whose value passes the predicate (fails it, with ``negate``). An
    update that does not pass is forwarded as a delete (``None``), so downstream drops a row that
    no longer passes; as in Kafka Streams over a materialised table (and every table of the
    runtime is one), nothing is forwarded when the row was not in the filtered table before
    either."""

    name = "table_filter"

    def __init__(self, predicate: Callable[[Any, Any], bool], *, negate: bool = False) -> None:
        super().__init__()
        self._predicate = predicate
        self._negate = negate

    def _passing(self, key: Any, value: Any) -> Any:
        if value is None or self._predicate(key, value) == self._negate:
            return None
        return value

    def process(self, record: Record[Any, Any]) -> None:
        new = self._passing(record.key, record.value)
        old = self._passing(record.key, record.old_value)
        if new is None and old is None:
            return
        self.forward(Record(record.key, new, record.timestamp, record.headers, old))


class TableMapValuesProcessor(Processor):
    """Maps a table's values; deletes pass through without calling the mapper."""

    name = "table_map_values"

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        super().__init__()
        self._mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        value = None if record.value is None else self._mapper(record.value)
        old = None if record.old_value is None else self._mapper(record.old_value)
        self.forward(Record(record.key, value, record.timestamp, record.headers, old))


class StreamTableJoinProcessor(KeyedStoreProcessor):
    """Joins each stream record with the table's current value for its key (Kafka Streams'
    ``KStreamKTableJoin``). Records with a null value are dropped and counted, and so are records
    with a null key, except that a left join forwards them joined with no row (KIP-962).

    The table is read from the store of the table it derives from; ``getter(key, value)``
    applies the table's own filters and value mappers on the way (``None``: no row)."""

    name = "stream_table_join"

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        table_value_serde: Serde[Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
        getter: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        super().__init__(store_name, key_serde)
        self._table_value_serde = table_value_serde
        self._joiner = joiner
        self._left = left
        self._getter = getter
        self._store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._store = context.kv_store(self._store_name)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        if record.value is None:
            # Nothing to join: a null value is an empty message, not SQL's NULL (Kafka Streams).
            self._context.record_dropped(self._store_name, "null-value")
            return
        if record.key is None and self._left:
            # KIP-962: a left join forwards a record without a key, joined with no row.
            self.forward(
                Record(None, self._joiner(record.value, None), record.timestamp, record.headers)
            )
            return
        key = self._store_key(record)
        if key is None:
            return
        raw = self._store.get(key)
        table_value = None
        if raw is not None:
            stored = ValueAndTimestamp.from_bytes(raw)
            table_value = self._table_value_serde.deserialize(stored.value)
            if table_value is not None and self._getter is not None:
                table_value = self._getter(record.key, table_value)
        if table_value is None and not self._left:
            return
        joined = self._joiner(record.value, table_value)
        self.forward(Record(record.key, joined, record.timestamp, record.headers))


class SessionAggregateProcessor(KeyedStoreProcessor):
    """Session-window aggregation (Kafka Streams' ``KStreamSessionWindowAggregate``).

    A record at ``t`` merges with every *retained* session of its key where
    ``start - gap <= t <= end + gap``; it is late, dropped and counted when the merged session
    ends before ``stream time - grace - gap``. A session is retained while its end is after
    ``stream time - gap - grace`` (:attr:`SessionWindows.retention_ms`), so once its final result
    is due it never changes again. Merged sessions are deleted and forwarded as tombstones, the
    merged session as an update, both with the session's end as timestamp and without headers
    (Kafka Streams forwards new records here, not the input's).
    """

    name = "session_aggregate"
    reorders = True

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
        super().__init__(store_name, key_serde)
        self._windows = windows
        self._value_serde = value_serde
        self._initializer = initializer
        self._aggregator = aggregator
        self._merger = merger
        self._store: SessionStore | None = None
        self.observed_stream_time = -1
        self._accepted = NO_PROGRESS  # largest timestamp aggregated (not dropped)
        self._next_purge = time.monotonic() + _PURGE_INTERVAL_S

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._store = context.session_store(self._store_name)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        key_bytes = self._store_key(record)
        if key_bytes is None:
            return
        t = record.timestamp
        gap = self._windows.gap_ms
        # Only retained sessions merge, as in Kafka Streams' session stores: a session ending at
        # or before the retention cutoff already had its final result, so merging a record into
        # it would give a second, overlapping one. The cutoff is taken before this record moves
        # stream time (the store has not seen it yet).
        retained_after = self.observed_stream_time - self._windows.retention_ms
        found = [
            session
            for session in self._store.find_sessions(key_bytes, t - gap, t + gap)
            if session[1] > retained_after
        ]
        self.observed_stream_time = max(self.observed_stream_time, t)
        merged = merge_sessions(t, (SessionWindow(s, e) for s, e, _ in found))
        if self._windows.is_late(merged.end, self.observed_stream_time):
            self._context.record_dropped(self._store_name, "late")
            return
        self._accepted = max(self._accepted, t)
        aggregate = self._initializer()
        # Every session the record merges with is replaced, and its removal forwarded, even one
        # with the merged session's bounds (as Kafka Streams does); only a record landing on a
        # single-point session at its own timestamp updates it in place.
        replaced = (merged.start, merged.end) != (t, t)
        for start, end, raw in found:
            aggregate = self._merger(record.key, aggregate, self._value_serde.deserialize(raw))
            if replaced:
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

    def control_progress(self) -> int:
        # Output is stamped with session ends: a record at t (>= what came before, in order) can
        # still replace retained sessions ending as early as t - gap, and a record within grace
        # ones ending gap + grace before the latest time seen.
        seen = max(self._accepted, super().control_progress())
        held = seen - self._windows.gap_ms - self._windows.grace_ms
        return held if seen >= 0 and held >= 0 else NO_PROGRESS

    def flush(self) -> None:
        # Retention: remove the sessions no record can merge with any more (they are already
        # invisible to process()), with tombstones, so the compacted changelog forgets them too.
        assert self._store is not None
        now = time.monotonic()
        if self.observed_stream_time < 0 or now < self._next_purge:
            return
        self._next_purge = now + _PURGE_INTERVAL_S
        cutoff = self.observed_stream_time - self._windows.retention_ms
        expired = [(k, s, e) for k, s, e, _ in self._store.items() if e <= cutoff]
        for key, start, end in expired:
            self._store.put(key, start, end, None, self.observed_stream_time)


class SuppressProcessor(Processor):
    """Suppress until window closes (Kafka Streams' ``KTableSuppressProcessor`` with final
    results): keeps the latest update of every session and forwards it once
    ``end + gap + grace <= observed stream time``. Tombstones (merged-away sessions) remove the
    session, so it is never emitted. The buffer is a changelogged store, so a restart neither
    loses nor repeats final results; control records advance the observed stream time too.

    Progress passes through unchanged: every session still buffered ends after the aggregation's
    bound (``stream time - gap - grace``), since those ending at or before it were emitted."""

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

"""Table processors (Kafka Streams' ``KTableSource``, ``KStreamAggregate``, ``KTableFilter``,
``KTableMapValues``, ``KStreamKTableJoin``) and the timestamped store they keep tables in;
grouped tables' processors are in :mod:`streams_runtime.processors.grouped_tables`.

Tables (a table source and non-windowed aggregations) keep :class:`ValueAndTimestamp` values in
their key-value store and drop idempotent updates (KIP-557 emit-on-change, see
:func:`is_idempotent_update`). Table processors forward the new value of every change, ``None``
for a delete, and the old value in ``Record.old_value`` when the topology needs it (Kafka
Streams' ``sendOldValues``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams_runtime.processors.base import (
    AggregateProcessor,
    KeyedStoreProcessor,
    Processor,
    ProcessorContext,
)
from streams_runtime.processors.stateless import DROPPED, ValueStep
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore

__all__ = [
    "StreamTableJoinProcessor",
    "TableAggregateProcessor",
    "TableFilterProcessor",
    "TableMapValuesProcessor",
    "TableSourceProcessor",
    "TimestampedTableStore",
    "is_idempotent_update",
]


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
        self.cached = False

    def get(self, key: bytes) -> ValueAndTimestamp | None:
        """The stored value and timestamp of ``key``, or ``None``."""
        raw = self.store.get(key)
        return None if raw is None else ValueAndTimestamp.from_bytes(raw)

    def forward_flushed(
        self, forward: Callable[[bytes, Any, Any, int, Headers | None], None]
    ) -> None:
        """When the store is cached (:class:`~streams_runtime.state.CachingKeyValueStore`):
        updates are forwarded when the cache flushes them, once per key and flush, by
        ``forward(key, new value, old value, timestamp, headers)`` with serialized values
        (``None``: none) and the timestamp of the new value, or of the delete (Kafka Streams'
        ``TimestampedCacheFlushListener``); the old value is what the store held before the
        first cached write. Emit-on-change applies to what is flushed."""
        store = self.store

        def flushed(
            key: bytes, new: bytes | None, old: bytes | None, ts: int, headers: Headers | None
        ) -> None:
            new_vt = None if new is None else ValueAndTimestamp.from_bytes(new)
            old_vt = None if old is None else ValueAndTimestamp.from_bytes(old)
            if new_vt is not None and is_idempotent_update(old_vt, new_vt.value, new_vt.timestamp):
                self._context.record_idempotent_skip(store.name)
                return
            forward(
                key,
                None if new_vt is None else new_vt.value,
                None if old_vt is None else old_vt.value,
                ts if new_vt is None else new_vt.timestamp,
                headers,
            )

        self.cached = store.set_flush_listener(flushed)

    def update(
        self,
        key: bytes,
        stored: ValueAndTimestamp | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None = None,
    ) -> bool:
        """Write ``value`` (``None`` deletes) at ``timestamp``; True when the update is to be
        forwarded now, False when it is idempotent against ``stored`` (what :meth:`get`
        returned), counted in ``streams_idempotent_update_skip_total``, or when the store is
        cached (:meth:`forward_flushed` forwards it, with ``headers``)."""
        encoded = None if value is None else ValueAndTimestamp(value, timestamp).to_bytes()
        if self.cached:
            self.store.put(key, encoded, timestamp, headers)
            return False
        self.store.put(key, encoded, timestamp)
        if is_idempotent_update(stored, value, timestamp):
            self._context.record_idempotent_skip(self.store.name)
            return False
        return True


def _forward_from_cache(
    processor: Processor, key_serde: Serde[Any], value_serde: Serde[Any]
) -> Callable[[bytes, Any, Any, int, Headers | None], None]:
    """What a table processor forwards when its cache flushes an update
    (:meth:`TimestampedTableStore.forward_flushed`): the deserialized key, new and old value."""

    def forward(
        key: bytes, new: bytes | None, old: bytes | None, ts: int, headers: Headers | None
    ) -> None:
        new_value = None if new is None else value_serde.deserialize(new)
        old_value = None if old is None else value_serde.deserialize(old)
        processor.forward(Record(key_serde.deserialize(key), new_value, ts, headers, old_value))

    return forward


class TableSourceProcessor(KeyedStoreProcessor):
    """Materialises a topic as a table: the latest value per key; null values delete. Updates
    are written, and forwarded unless idempotent (:func:`is_idempotent_update`)."""

    name = "table_source"
    keeps_order = True

    def __init__(self, store_name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__(store_name, key_serde)
        self._value_serde = value_serde
        self._table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._table = TimestampedTableStore(context.kv_store(self._store_name), context)
        self._table.forward_flushed(_forward_from_cache(self, self._key_serde, self._value_serde))

    def process(self, record: Record[Any, Any]) -> None:
        assert self._table is not None
        key = self._store_key(record)
        if key is None:
            return
        value = self._value_serde.serialize(record.value)
        stored = self._table.get(key)
        if self._table.update(key, stored, value, record.timestamp, record.headers):
            old = None if stored is None else self._value_serde.deserialize(stored.value)
            self.forward(Record(record.key, record.value, record.timestamp, record.headers, old))


class TableAggregateProcessor(AggregateProcessor):
    """Non-windowed aggregation into a table (Kafka Streams' ``KStreamAggregate``).

    Per key, ``aggregator(key, value, aggregate)`` folds each record into the aggregate, which
    starts as ``initializer()``; an aggregator returning ``None`` deletes the key. Records with a
    null key or a null value are dropped and counted. The result's timestamp is the largest
    timestamp of the records aggregated so far; updates are written, and forwarded unless
    idempotent (:func:`is_idempotent_update`), e.g. a maximum that did not change.
    """

    name = "table_aggregate"
    keeps_order = True
    _table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._table = TimestampedTableStore(context.kv_store(self._store_name), context)
        self._table.forward_flushed(_forward_from_cache(self, self._key_serde, self._value_serde))

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
        if self._table.update(key, stored, value, timestamp, record.headers):
            self.forward(Record(record.key, aggregate, timestamp, record.headers, old))


class TableFilterProcessor(Processor):
    """Keeps a table's rows whose value passes the predicate (fails it, with ``negate``), as
    Kafka Streams' ``KTableFilter``. An update that does not pass is forwarded as a delete
    (``None``), so downstream drops a row that no longer passes.

    ``send_old_values`` is decided when the topology is built (see
    :meth:`streams_runtime.dsl.Table.filter`). Without old values the filter cannot know
    whether the row was in the filtered table, so it forwards a delete for every update it
    rejects, also for keys never in it and for repeated deletes. With them it forwards the old
    value too, and nothing when old and new are both absent from the filtered table.

    With ``store_name`` the filtered table is materialised in its own key-value store (values
    :class:`ValueAndTimestamp` of ``value_serde``): every result is written there (emit-on-change,
    :func:`is_idempotent_update`), and the old value, when sent, is read from it."""

    name = "table_filter"
    keeps_order = True

    def __init__(
        self,
        predicate: Callable[[Any, Any], bool],
        *,
        negate: bool = False,
        send_old_values: bool = False,
        store_name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> None:
        super().__init__()
        self._predicate = predicate
        self._negate = negate
        self._send_old_values = send_old_values
        self._store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        if self._store_name is not None:
            self._table = TimestampedTableStore(context.kv_store(self._store_name), context)

    def _passing(self, key: Any, value: Any) -> Any:
        if value is None or self._predicate(key, value) == self._negate:
            return None
        return value

    def process(self, record: Record[Any, Any]) -> None:
        new = self._passing(record.key, record.value)
        if self._table is None:
            old = self._passing(record.key, record.old_value) if self._send_old_values else None
            if self._send_old_values and new is None and old is None:
                return  # the row was not in the filtered table and is not now
            self.forward(Record(record.key, new, record.timestamp, record.headers, old))
            return
        assert self._key_serde is not None
        assert self._value_serde is not None
        key = self._key_serde.serialize(record.key) or b""
        stored = self._table.get(key)
        old = None
        if self._send_old_values and stored is not None:
            old = self._value_serde.deserialize(stored.value)
        if self._send_old_values and new is None and old is None:
            return
        value = self._value_serde.serialize(new)
        if self._table.update(key, stored, value, record.timestamp):
            self.forward(Record(record.key, new, record.timestamp, record.headers, old))


class TableMapValuesProcessor(Processor):
    """Maps a table's values; deletes pass through without calling the mapper (Kafka Streams'
    ``KTableMapValues``). The old value is mapped and forwarded only when ``send_old_values``
    (decided when the topology is built); every update is forwarded."""

    name = "table_map_values"
    keeps_order = True

    def __init__(self, mapper: Callable[[Any], Any], *, send_old_values: bool = False) -> None:
        super().__init__()
        self._mapper = mapper
        self._send_old_values = send_old_values

    def process(self, record: Record[Any, Any]) -> None:
        value = None if record.value is None else self._mapper(record.value)
        old = None
        if self._send_old_values and record.old_value is not None:
            old = self._mapper(record.old_value)
        self.forward(Record(record.key, value, record.timestamp, record.headers, old))


class StreamTableJoinProcessor(ValueStep):
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
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._table_value_serde = table_value_serde
        self._joiner = joiner
        self._left = left
        self._getter = getter
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def apply(self, key: Any, value: Any) -> Any:
        assert self._store is not None
        assert self._context is not None
        if value is None:
            # Nothing to join: a null value is an empty message, not SQL's NULL (Kafka Streams).
            self._context.record_dropped(self._store_name, "null-value")
            return DROPPED
        if key is None:
            if self._left:  # KIP-962: a left join forwards a record without a key, no row joined
                return self._joiner(value, None)
            self._context.record_dropped(self._store_name, "null-key")
            return DROPPED
        raw = self._store.get(self._key_serde.serialize(key) or b"")
        table_value = None
        if raw is not None:
            stored = ValueAndTimestamp.from_bytes(raw)
            table_value = self._table_value_serde.deserialize(stored.value)
            if table_value is not None and self._getter is not None:
                table_value = self._getter(key, table_value)
        if table_value is None and not self._left:
            return DROPPED
        return self._joiner(value, table_value)

"""Table-table joins on the primary key (Kafka Streams' ``KTableKTableInnerJoin``,
``KTableKTableLeftJoin``, ``KTableKTableRightJoin``, ``KTableKTableOuterJoin`` and
``KTableKTableJoinMerger``).

A join has one :class:`TableTableJoinProcessor` per side (``KTABLE-JOINTHIS-<n>`` below this
table, ``KTABLE-JOINOTHER-<n>`` below the other) and a :class:`TableJoinMergeProcessor`
(``KTABLE-MERGE-<n>``) below both. Each side's update looks the other side's current row up
through that table's value getter (its store, read through its filters and value mappers) and
forwards the joined row stamped with the later of the two timestamps; its old value, joined with
the same current row of the other side, goes along only when downstream asked for old values
(``sendOldValues``, decided when the topology is built). What each kind forwards follows Kafka
Streams exactly (see :class:`JoinKind`), deletes and repeated deletes included.

The merge keeps the result in a key-value store of :class:`ValueAndTimestamp` (emit-on-change,
KIP-557, as every table of the runtime), so the result can be read by later joins and filters.

Progress: on in-order input a task takes both tables' updates in timestamp order, so the row it
looks up is never newer than the update; the result carries the update's timestamp and both
processors keep order (a table update older than its key's row only makes the result newer).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from streams_runtime.processors.base import Processor, ProcessorContext
from streams_runtime.processors.tables import TimestampedTableStore, _forward_from_cache
from streams_runtime.record import Record
from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore

__all__ = ["JoinKind", "TableJoinMergeProcessor", "TableReader", "TableTableJoinProcessor"]

UNKNOWN = -1
"""Kafka Streams' ``RecordQueue.UNKNOWN``: the timestamp of a row that is not there."""


class JoinKind(enum.Enum):
    """What one side of a table-table join forwards when the other side has no row (Kafka
    Streams' processor for that side)."""

    INNER = "inner"
    """``KTableKTableInnerJoin`` (both sides of ``join``): nothing."""
    LEFT = "left"
    """``KTableKTableLeftJoin`` (this side of ``left_join``): the row joined with ``None``."""
    RIGHT = "right"
    """``KTableKTableRightJoin`` (the other side of ``left_join``): nothing; with a row of
    this table, even a delete joins it (``joiner(row, None)``)."""
    OUTER = "outer"
    """``KTableKTableOuterJoin`` (both sides of ``outer_join``): the row joined with ``None``."""


class TableReader:
    """Reads a table's current row by key (Kafka Streams' ``KTableValueGetter``): from the store
    ``store_name`` it derives from (values :class:`ValueAndTimestamp` of ``value_serde``),
    through ``getter(key, stored value)`` (its filters and mappers; ``None``: no row)."""

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        getter: Callable[[Any, Any], Any] | None,
    ) -> None:
        self.store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._getter = getter
        self._store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        self._store = context.kv_store(self.store_name)

    def get(self, key: Any) -> tuple[Any, int] | None:
        """The row of ``key`` and its timestamp, or ``None``."""
        assert self._store is not None
        raw = self._store.get(self._key_serde.serialize(key) or b"")
        if raw is None:
            return None
        stored = ValueAndTimestamp.from_bytes(raw)
        value = self._value_serde.deserialize(stored.value)
        if value is not None and self._getter is not None:
            value = self._getter(key, value)
        return None if value is None else (value, stored.timestamp)


class TableTableJoinProcessor(Processor):
    """One side of a table-table join: joins each update of its table with the other table's
    current row of the key (``other``), as Kafka Streams' processor of ``kind`` does.

    ``joiner(this side's value, other side's value)`` (reversed on the other side of a join, so
    the user's joiner always gets the left table's value first). ``input_old_values``: whether
    this side's table sends old values (the update's ``old_value`` means something);
    ``send_old_values``: whether to forward the joined old value. Updates with a null key are
    dropped and counted."""

    name = "table_table_join"
    keeps_order = True

    def __init__(
        self,
        kind: JoinKind,
        other: TableReader,
        joiner: Callable[[Any, Any], Any],
        *,
        input_old_values: bool,
        send_old_values: bool,
    ) -> None:
        super().__init__()
        self._kind = kind
        self._other = other
        self._joiner = joiner
        self._input_old_values = input_old_values
        self._send_old_values = send_old_values
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._other.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            # We join iff keys are equal: a null key joins nothing (Kafka Streams drops it too).
            assert self._context is not None
            self._context.record_dropped(self.node_name, "null-key")
            return
        new = record.value
        old = record.old_value if self._input_old_values else None
        found = self._other.get(record.key)
        other, other_ts = (None, UNKNOWN) if found is None else found
        kind, joiner, send_old = self._kind, self._joiner, self._send_old_values
        if other is None and (
            kind in (JoinKind.INNER, JoinKind.RIGHT) or (new is None and old is None)
        ):
            return
        timestamp = max(record.timestamp, other_ts)
        joined_new = joined_old = None
        if kind is JoinKind.RIGHT:  # the other row is there; even a delete joins it
            joined_new = joiner(new, other)
            if send_old:
                joined_old = joiner(old, other)
        else:
            outer = kind is JoinKind.OUTER and other is not None
            if new is not None or outer:
                joined_new = joiner(new, other)
            if send_old and (old is not None or outer):
                joined_old = joiner(old, other)
        self.forward(Record(record.key, joined_new, timestamp, record.headers, joined_old))


class TableJoinMergeProcessor(Processor):
    """Both sides' results as one table (Kafka Streams' ``KTableKTableJoinMerger``),
    materialised in ``store_name``: each result is written (emit-on-change,
    :func:`~streams_runtime.processors.is_idempotent_update`) and forwarded with the joined old
    value when ``send_old_values``; a cached store forwards when its cache flushes, with the
    stored old value (``TimestampedCacheFlushListener``)."""

    name = "table_join_merge"
    keeps_order = True

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        send_old_values: bool,
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._send_old_values = send_old_values
        self._table: TimestampedTableStore | None = None

    def init(self, context: ProcessorContext) -> None:
        self._table = TimestampedTableStore(context.kv_store(self._store_name), context)
        forward = _forward_from_cache(self, self._key_serde, self._value_serde)
        if not self._send_old_values:

            def forward_new(key: bytes, new: Any, _old: Any, ts: int, headers: Any) -> None:
                forward(key, new, None, ts, headers)

            self._table.forward_flushed(forward_new)
        else:
            self._table.forward_flushed(forward)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._table is not None
        key = self._key_serde.serialize(record.key) or b""
        stored = self._table.get(key)
        value = self._value_serde.serialize(record.value)
        if self._table.update(key, stored, value, record.timestamp, record.headers):
            old = record.old_value if self._send_old_values else None
            self.forward(Record(record.key, record.value, record.timestamp, record.headers, old))

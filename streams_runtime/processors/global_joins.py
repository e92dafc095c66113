"""The stream-global table join (Kafka Streams' ``KStreamGlobalKTableJoin``, which its
``KStreamKTableJoinProcessor`` runs): each stream record looks up the global table's row of the
key ``key_mapper(key, value)`` makes, in the global store every instance holds whole
(:mod:`streams_runtime.state.global_store`), so the stream needs no co-partitioning with the
table's topic and no repartition when its key changed.

As Kafka Streams (with KIP-962):

- a record with a null value is dropped and counted (``null-value``): an empty message, nothing
  to join;
- a record whose key mapper returns ``None`` is dropped and counted by ``join`` (``null-key``)
  and joined with ``None`` by ``left_join``; a record with a null key is given to the key mapper
  like any other;
- a mapped key without a row drops the record for ``join`` (not counted) and joins ``None`` for
  ``left_join``;
- the result keeps the stream record's key, timestamp and headers.

The row read is the global store's at the moment the record is processed; the global thread
updates it beside the stream threads, so unlike a stream-table join the lookup is not aligned
with the record's timestamp (as in Kafka Streams). The processor keeps its input's order and
passes control records (ticks) on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams_runtime.processors.base import Processor, ProcessorContext
from streams_runtime.record import Record
from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore

__all__ = ["GlobalTableJoinProcessor"]


class GlobalTableJoinProcessor(Processor):
    """Joins each stream record with the global table's row of ``key_mapper(key, value)`` by
    ``joiner(stream value, table value)`` (see the module docstring); ``key_serde`` and
    ``value_serde`` are the global store's."""

    name = "stream_global_table_join"
    keeps_order = True

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        key_mapper: Callable[[Any, Any], Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._key_mapper = key_mapper
        self._joiner = joiner
        self._left = left
        self._context: ProcessorContext | None = None
        self._store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def _row(self, mapped_key: Any) -> Any:
        """The table's value of ``mapped_key``; ``None`` when it has no row."""
        assert self._store is not None
        raw_key = self._key_serde.serialize(mapped_key)
        raw = None if raw_key is None else self._store.get(raw_key)
        if raw is None:
            return None
        return self._value_serde.deserialize(ValueAndTimestamp.from_bytes(raw).value)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        if record.value is None:
            self._context.record_dropped(self._store_name, "null-value")
            return
        mapped_key = self._key_mapper(record.key, record.value)
        if mapped_key is None:
            if not self._left:
                self._context.record_dropped(self._store_name, "null-key")
                return
            row = None
        else:
            row = self._row(mapped_key)
            if row is None and not self._left:
                return
        joined = self._joiner(record.value, row)
        self.forward(Record(record.key, joined, record.timestamp, record.headers))

"""Grouped tables' processors (Kafka Streams' ``KTableRepartitionMap``, ``KTableAggregate`` and
``KTableReduce``): a table regrouped by a new key, and aggregated per new key by subtracting
each row's old value and adding its new one.

A row's update travels to its new key's task through a repartition topic as a
:class:`~streams_runtime.serdes.Change` (new and old value, :class:`ChangedSerde`), so the
aggregation learns what to take out of which aggregate; the upstream table therefore always
sends old values (``KTableImpl.groupBy`` asks for them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams_runtime.processors.base import Processor
from streams_runtime.processors.tables import TableAggregateProcessor
from streams_runtime.record import Record
from streams_runtime.serdes import Change, Serde

__all__ = ["TableChangeAggregateProcessor", "TableRepartitionMapProcessor"]


class TableRepartitionMapProcessor(Processor):
    """Maps each update of a table to ``selector(key, value) -> (new key, new value)``, for the
    new and for the old value, and forwards :class:`Change` records keyed by the new keys
    (Kafka Streams 4.x ``KTableRepartitionMap``).

    A pair with a null key or value is dropped. When both pairs have the same key, one record
    carries both values; otherwise the old value goes to its key first, then the new value to
    its own, so an aggregation subtracts before it adds."""

    name = "table_repartition_map"
    keeps_order = True

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__()
        self._selector = selector

    def _pair(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        if value is None:
            return None
        pair = self._selector(key, value)
        return None if pair[0] is None or pair[1] is None else pair

    def process(self, record: Record[Any, Any]) -> None:
        new = self._pair(record.key, record.value)
        old = self._pair(record.key, record.old_value)
        ts, headers = record.timestamp, record.headers
        if new is not None and old is not None and new[0] == old[0]:
            self.forward(Record(new[0], Change(new[1], old[1]), ts, headers))
            return
        if old is not None:
            self.forward(Record(old[0], Change(None, old[1]), ts, headers))
        if new is not None:
            self.forward(Record(new[0], Change(new[1], None), ts, headers))


class TableChangeAggregateProcessor(TableAggregateProcessor):
    """Aggregates a grouped table per key (Kafka Streams' ``KTableAggregate``; ``KTableReduce``
    is this with ``initializer() -> None`` and an aggregator taking a first value as it is).

    For each :class:`Change`: when it has an old value and the key an aggregate,
    ``subtractor(key, old value, aggregate)`` takes it out; then, when it has a new value,
    ``aggregator(key, new value, aggregate)`` adds it, to ``initializer()`` when there is no
    aggregate (left). A ``None`` aggregate deletes the key. The result is stamped with the
    change's timestamp, or the stored one when later and the aggregate was used; updates are
    written, and forwarded (old aggregate in ``old_value``) unless idempotent
    (:func:`~streams_runtime.processors.is_idempotent_update`)."""

    name = "table_change_aggregate"

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(
            store_name, key_serde, value_serde, initializer=initializer, aggregator=aggregator
        )
        self._subtractor = subtractor

    def process(self, record: Record[Any, Any]) -> None:
        assert self._table is not None
        key = self._store_key(record)
        if key is None:
            return
        change: Change[Any] = record.value
        stored = self._table.get(key)
        old = None if stored is None else self._value_serde.deserialize(stored.value)
        aggregate, timestamp = old, record.timestamp
        if change.old_value is not None and old is not None:
            aggregate = self._subtractor(record.key, change.old_value, old)
            assert stored is not None
            timestamp = max(record.timestamp, stored.timestamp)
        if change.new_value is not None:
            if aggregate is None:
                aggregate = self._initializer()
            aggregate = self._aggregator(record.key, change.new_value, aggregate)
            if stored is not None:
                timestamp = max(record.timestamp, stored.timestamp)
        value = None if aggregate is None else self._value_serde.serialize(aggregate)
        if self._table.update(key, stored, value, timestamp, record.headers):
            self.forward(Record(record.key, aggregate, timestamp, record.headers, old))

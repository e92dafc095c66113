"""``GlobalTable``: a table every instance holds whole (Kafka Streams' ``GlobalKTable``).

``builder.global_table(topic)`` makes one: every instance reads every partition of ``topic``
(assigned, no consumer group) into a local key-value store, before its stream threads start and
then on a thread of its own while it runs (:mod:`streams_runtime.processing.global_thread`). A
stream joins it on a key it maps from each record (:meth:`Stream.join
<streams_runtime.dsl.stream.Stream.join>` and ``left_join`` with a key mapper), with no
co-partitioning; interactive queries read it on every instance, from the local copy.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from streams_runtime.serdes import Serde
from streams_runtime.topology import GlobalStore

__all__ = ["GlobalTable"]

K = TypeVar("K")
V = TypeVar("V")


class GlobalTable(Generic[K, V]):
    """A table of the latest value per key of every partition of a topic, on every instance
    (Kafka Streams' ``GlobalKTable``). It has no operations of its own: streams join it, and
    queries read its store (:attr:`store_name`)."""

    def __init__(self, store: GlobalStore) -> None:
        self._store = store

    @property
    def store_name(self) -> str:
        """Its key-value store's name (Kafka Streams' ``queryableStoreName``; given, or
        ``<topic>-STATE-STORE-<n>`` as Kafka Streams names it): what queries ask for."""
        return self._store.name

    @property
    def topic(self) -> str:
        """The topic it reads, which is also its store's changelog."""
        return self._store.topic

    @property
    def key_serde(self) -> Serde[Any]:
        return self._store.key_serde

    @property
    def value_serde(self) -> Serde[Any]:
        return self._store.value_serde

    def __repr__(self) -> str:
        return f"GlobalTable({self.topic!r}, store_name={self.store_name!r})"

"""``Stream``: a record stream (Kafka Streams' ``KStreamImpl``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from streams_runtime import processors as p
from streams_runtime.dsl.branched import BranchedStream
from streams_runtime.dsl.global_table import GlobalTable
from streams_runtime.dsl.grouped import GroupedStream
from streams_runtime.dsl.joins import checked_windows, global_table_join, table_join, window_join
from streams_runtime.operations import RunUserProcessor, StepOnKeysAndValues, StepOnValues
from streams_runtime.processor.api import Processor
from streams_runtime.processor.node import user_node
from streams_runtime.serde_context import is_registry_framed
from streams_runtime.serdes import Serde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, ProcessorFactory, QueryableStore
from streams_runtime.windows import JoinWindows

if TYPE_CHECKING:
    from streams_runtime.dsl.builder import StreamsBuilder
    from streams_runtime.dsl.table import Table

__all__ = ["Stream"]

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")


class Stream(Generic[K, V]):
    """A record stream (Kafka Streams' ``KStream``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: Node,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        key_changed: bool = False,
    ) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._key_changed = key_changed

    def _then(
        self,
        kind: str,
        factory: ProcessorFactory,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        key_changed: bool | None = None,
        name: str | None = None,
        operation: StepOnValues | StepOnKeysAndValues | None = None,
    ) -> Stream[Any, Any]:
        node = self._builder._graph.add(kind, factory, [self._node], name=name, operation=operation)
        return Stream(
            self._builder,
            node,
            key_serde,
            value_serde,
            key_changed=self._key_changed if key_changed is None else key_changed,
        )

    def filter(self, predicate: Callable[[K, V], bool]) -> Stream[K, V]:
        """Keep the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER",
            lambda: p.FilterProcessor(predicate),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            operation=StepOnValues("filter"),
        )

    def filter_not(self, predicate: Callable[[K, V], bool]) -> Stream[K, V]:
        """Drop the records for which ``predicate(key, value)`` is true."""
        return self.filter(lambda k, v: not predicate(k, v))

    def map(
        self,
        mapper: Callable[[K, V], tuple[K2, V2]],
        *,
        key_serde: Serde[K2] | None = None,
        value_serde: Serde[V2] | None = None,
    ) -> Stream[K2, V2]:
        """New key and value per record; a later grouping or join repartitions."""
        return self._then(
            "KSTREAM-MAP",
            lambda: p.MapProcessor(mapper),
            key_serde=key_serde,
            value_serde=value_serde,
            key_changed=True,
            operation=StepOnKeysAndValues("map"),
        )

    def map_values(
        self, mapper: Callable[[V], V2], *, value_serde: Serde[V2] | None = None
    ) -> Stream[K, V2]:
        """New value per record; the key (and so the partitioning) stays."""
        return self._then(
            "KSTREAM-MAPVALUES",
            lambda: p.MapValuesProcessor(mapper),
            key_serde=self.key_serde,
            value_serde=value_serde,
            operation=StepOnValues("map_values"),
        )

    def flat_map(
        self,
        mapper: Callable[[K, V], Iterable[tuple[K2, V2]]],
        *,
        key_serde: Serde[K2] | None = None,
        value_serde: Serde[V2] | None = None,
        name: str | None = None,
    ) -> Stream[K2, V2]:
        """Any number of records per record, ``mapper(key, value)`` giving their keys and
        values (Kafka Streams' ``flatMap``); each keeps the input's timestamp and headers. A
        later grouping or join repartitions. ``name`` names the processor
        (``KSTREAM-FLATMAP-<n>`` without it)."""
        return self._then(
            "KSTREAM-FLATMAP",
            lambda: p.FlatMapProcessor(mapper),
            key_serde=key_serde,
            value_serde=value_serde,
            key_changed=True,
            name=name,
        )

    def flat_map_values(
        self,
        mapper: Callable[[V], Iterable[V2]],
        *,
        value_serde: Serde[V2] | None = None,
        name: str | None = None,
    ) -> Stream[K, V2]:
        """Any number of records per record, with the input's key, timestamp and headers and
        the values ``mapper(value)`` gives (Kafka Streams' ``flatMapValues``); the key, and so
        the partitioning, stays. ``name``: as :meth:`flat_map` (``KSTREAM-FLATMAPVALUES-<n>``)."""
        return self._then(
            "KSTREAM-FLATMAPVALUES",
            lambda: p.FlatMapValuesProcessor(mapper),
            key_serde=self.key_serde,
            value_serde=value_serde,
            name=name,
        )

    def select_key(
        self, selector: Callable[[K, V], K2], *, key_serde: Serde[K2] | None = None
    ) -> Stream[K2, V]:
        """New key per record; a later grouping or join repartitions."""
        return self._select_key(selector, key_serde, None)

    def _select_key(
        self, selector: Callable[[K, V], K2], key_serde: Serde[K2] | None, name: str | None
    ) -> Stream[K2, V]:
        return self._then(
            "KSTREAM-KEY-SELECT",
            lambda: p.MapProcessor(lambda k, v: (selector(k, v), v)),
            key_serde=key_serde,
            value_serde=self.value_serde,
            key_changed=True,
            name=name,
            operation=StepOnKeysAndValues("select_key"),
        )

    def peek(self, action: Callable[[K, V], None]) -> Stream[K, V]:
        """Call ``action(key, value)`` for every record and pass it on unchanged."""
        return self._then(
            "KSTREAM-PEEK",
            lambda: p.PeekProcessor(action),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            operation=StepOnValues("peek"),
        )

    def foreach(self, action: Callable[[K, V], None]) -> None:
        """Call ``action(key, value)`` for every record (a terminal operation)."""
        self._then("KSTREAM-FOREACH", lambda: p.PeekProcessor(action))

    def merge(self, other: Stream[K, V]) -> Stream[K, V]:
        """Records of both streams; merging streams of different sub-topologies needs both to
        read co-partitioned topics (they become one task)."""
        node = self._builder._graph.add(
            "KSTREAM-MERGE", p.PassThroughProcessor, [self._node, other._node]
        )
        return Stream(
            self._builder,
            node,
            self.key_serde if self.key_serde is other.key_serde else None,
            self.value_serde if self.value_serde is other.value_serde else None,
            key_changed=self._key_changed or other._key_changed,
        )

    def split(self, *, name: str | None = None) -> BranchedStream[K, V]:
        """Split into branches (Kafka Streams' KIP-418 ``split``): add each with
        ``branch(predicate, Branched...)``, then end with ``default_branch()`` or
        ``no_default_branch()``, which return the branches by name. A record goes to the first
        branch whose predicate it satisfies. The splitting processor is named ``name``
        (``KSTREAM-BRANCH-<n>`` without it), and each branch ``<name><branch name>``, or
        ``<name><position>`` (from 1; the default branch 0); see :class:`BranchedStream`."""
        return BranchedStream(self, name)

    def repartition(
        self,
        *,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
        name: str | None = None,
        num_partitions: int | None = None,
    ) -> Stream[K, V]:
        """Write to an internal topic ``<application.id>-<name>-repartition`` partitioned by the
        current key, and continue from it. The runtime's producer has progress control attached,
        so stream time crosses the topic even when no data does."""
        ks = key_serde or self.key_serde or self._builder.default_key_serde
        vs = value_serde or self.value_serde or self._builder.default_value_serde
        topic = f"{name or self._builder._graph.name('KSTREAM-REPARTITION')}-repartition"
        self._builder._graph.add(
            "KSTREAM-REPARTITION-SINK",
            lambda: p.SinkProcessor(topic, ks, vs, internal=True),
            [self._node],
            sink_topic=topic,
            null_key_ticks=is_registry_framed(ks),
            internal_topic=True,
        )
        source = self._builder._graph.source((topic,), ks, vs, internal=True)
        source.num_partitions = num_partitions
        return Stream(self._builder, source, ks, vs)

    def group_by_key(
        self, *, key_serde: Serde[K] | None = None, value_serde: Serde[V] | None = None
    ) -> GroupedStream[K, V]:
        """Group by the current key (repartitioning first when an upstream step changed it)."""
        stream: Stream[K, V] = self
        if self._key_changed:
            stream = self.repartition(key_serde=key_serde, value_serde=value_serde)
        return GroupedStream(
            stream,
            key_serde or stream.key_serde or self._builder.default_key_serde,
            value_serde or stream.value_serde or self._builder.default_value_serde,
        )

    def group_by(
        self,
        key_selector: Callable[[K, V], K2],
        *,
        key_serde: Serde[K2] | None = None,
        value_serde: Serde[V] | None = None,
        name: str | None = None,
    ) -> GroupedStream[K2, V]:
        """Group by a new key, ``key_selector(key, value)`` (Kafka Streams' ``groupBy``):
        :meth:`select_key`, then a repartition by the new key (through an internal topic
        ``<application.id>-<name>-repartition`` when ``name`` is given, Kafka Streams'
        ``Grouped.as``, which names the key selector too), then :meth:`group_by_key`.
        ``key_serde`` and ``value_serde`` serialize the repartition topic and the
        aggregation's store (defaults: the builder's, and this stream's value serde)."""
        selected = self._select_key(key_selector, key_serde, name)
        if name is None:
            return selected.group_by_key(key_serde=key_serde, value_serde=value_serde)
        stream = selected.repartition(key_serde=key_serde, value_serde=value_serde, name=name)
        assert stream.key_serde is not None
        assert stream.value_serde is not None
        return GroupedStream(stream, stream.key_serde, stream.value_serde)

    def to_table(
        self,
        *,
        name: str | None = None,
        store_name: str | None = None,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
    ) -> Table[K, V]:
        """This stream read as a table (Kafka Streams' KIP-523 ``toTable``): the latest value
        per key, in a key-value store with a changelog, as :meth:`StreamsBuilder.table` reads a
        topic. Null values delete; records with a null key are dropped and counted. A stream
        whose key changed upstream is repartitioned first, through an internal topic
        ``<application.id>-<name>-repartition``.

        ``name`` names the processor (``KSTREAM-TOTABLE-<n>`` without it), ``store_name`` the
        store (``Materialized.as``; ``KSTREAM-TOTABLE-STATE-STORE-<n>`` without it, and then
        not queryable in Kafka Streams' sense, see :meth:`Table.filter`); ``key_serde`` and
        ``value_serde`` (``Materialized.with``) serialize the store and the repartition."""
        from streams_runtime.dsl.table import Table, _SourceSupplier  # a table sits below

        graph = self._builder._graph
        node_name = name or graph.name("KSTREAM-TOTABLE")
        store = store_name or graph.name("KSTREAM-TOTABLE-STATE-STORE")
        ks = key_serde or self.key_serde or self._builder.default_key_serde
        vs = value_serde or self.value_serde or self._builder.default_value_serde
        parent: Stream[Any, Any] = self
        if self._key_changed:
            parent = self.repartition(key_serde=ks, value_serde=vs, name=node_name)
        sks, svs = graph.store_serde(ks, store, "key"), graph.store_serde(vs, store, "value")
        node = graph.add(
            "KSTREAM-TOTABLE",
            lambda: p.TableSourceProcessor(store, sks, svs),
            [parent._node],
            name=node_name,
            # Cached as a source table is: only when named (StreamsBuilder.table).
            stores=(StoreSpec(name=store, kind="key_value", cached=store_name is not None),),
        )
        graph.add_queryable(QueryableStore(store, "key_value", sks, svs))
        supplier = _SourceSupplier(queryable=store_name is not None)
        return Table(
            self._builder, node, ks, vs, store_name=store, store_value_serde=vs, supplier=supplier
        )

    @overload
    def join(
        self,
        other: Table[K, V2],
        joiner: Callable[[V, V2], Any],
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    @overload
    def join(
        self,
        other: Stream[K, V2],
        joiner: Callable[[V, V2], Any],
        windows: JoinWindows,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    @overload
    def join(
        self,
        other: GlobalTable[K2, V2],
        key_mapper: Callable[[K, V], K2 | None],
        joiner: Callable[[V, V2], Any],
        /,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    def join(
        self,
        other: Table[K, V2] | Stream[K, V2] | GlobalTable[Any, V2],
        joiner: Callable[[V, V2], Any] | Callable[[K, V], Any],
        windows: JoinWindows | Callable[[V, V2], Any] | None = None,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Inner join with a table or, given ``windows``, with another stream.

        Stream-table: each record joins the table's value for its key at the time the record is
        processed (records are processed in timestamp order across both inputs, so "at that
        time" means at the record's timestamp; see ``max_task_idle_ms``). A table derived with
        ``filter``/``map_values`` is read through the store it derives from.

        Stream-stream (Kafka Streams' windowed ``KStream.join``): a record at ``t`` joins every
        record of ``other`` with the same key from ``t - before`` to ``t + after``
        (:class:`~streams_runtime.windows.JoinWindows`), in both directions, stamped with the
        larger timestamp of the two; each side's records are buffered in a window store
        (``KSTREAM-JOINTHIS-...-store``, ``KSTREAM-JOINOTHER-...-store``) for ``before + after +
        grace``. Both streams must be co-partitioned.

        Stream-global table (Kafka Streams' ``join(GlobalKTable, keySelector, joiner)``):
        ``join(global_table, key_mapper, joiner)`` looks up the row of ``key_mapper(key,
        value)`` in the global table's store, whole on every instance (no co-partitioning, no
        repartition); a record whose mapped key is ``None`` or has no row is dropped. The result
        keeps the record's key, timestamp and headers."""
        if isinstance(other, GlobalTable):
            return global_table_join(
                self, other, joiner, windows, left=False, value_serde=value_serde
            )
        if windows is None:
            if isinstance(other, Stream):
                raise TypeError("a stream-stream join needs JoinWindows")
            return table_join(self, other, joiner, left=False, value_serde=value_serde)
        return window_join(
            self, other, joiner, checked_windows(windows), "inner", value_serde=value_serde
        )

    @overload
    def left_join(
        self,
        other: Table[K, V2],
        joiner: Callable[[V, V2 | None], Any],
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    @overload
    def left_join(
        self,
        other: Stream[K, V2],
        joiner: Callable[[V, V2 | None], Any],
        windows: JoinWindows,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    @overload
    def left_join(
        self,
        other: GlobalTable[K2, V2],
        key_mapper: Callable[[K, V], K2 | None],
        joiner: Callable[[V, V2 | None], Any],
        /,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]: ...

    def left_join(
        self,
        other: Table[K, V2] | Stream[K, V2] | GlobalTable[Any, V2],
        joiner: Callable[[V, V2 | None], Any] | Callable[[K, V], Any],
        windows: JoinWindows | Callable[[V, V2 | None], Any] | None = None,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Like :meth:`join`, but records of this stream without a partner join ``None``: at
        once against a table; against a stream once their window closed (``t + after + grace``
        behind stream time), stamped with their own timestamp. Kafka Streams emits them when a
        later record arrives; the runtime also on control records, so they come out on ticks
        alone. Against a global table (``left_join(global_table, key_mapper, joiner)``), a
        record whose mapped key is ``None`` or has no row joins ``None`` (KIP-962)."""
        if isinstance(other, GlobalTable):
            return global_table_join(
                self, other, joiner, windows, left=True, value_serde=value_serde
            )
        if windows is None:
            if isinstance(other, Stream):
                raise TypeError("a stream-stream join needs JoinWindows")
            return table_join(self, other, joiner, left=True, value_serde=value_serde)
        return window_join(
            self, other, joiner, checked_windows(windows), "left", value_serde=value_serde
        )

    def outer_join(
        self,
        other: Stream[K, V2],
        joiner: Callable[[V | None, V2 | None], Any],
        windows: JoinWindows,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Like :meth:`left_join` on both sides: records of either stream without a partner
        join ``None`` once their window closed (``t + before + grace`` for ``other``'s)."""
        return window_join(self, other, joiner, windows, "outer", value_serde=value_serde)

    def to(
        self,
        topic: str,
        *,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
    ) -> None:
        """Write every record to ``topic`` (partitioned by key with murmur2, like Kafka's Java
        clients; the topic must exist)."""
        ks = key_serde or self.key_serde or self._builder.default_key_serde
        vs = value_serde or self.value_serde or self._builder.default_value_serde
        self._builder._graph.add(
            "KSTREAM-SINK",
            lambda: p.SinkProcessor(topic, ks, vs),
            [self._node],
            sink_topic=topic,
            null_key_ticks=is_registry_framed(ks),
        )

    def process(
        self,
        processor: Callable[[], Processor[K, V, K2, V2]],
        *store_names: str,
        name: str | None = None,
    ) -> Stream[K2, V2]:
        """Run a user's :class:`~streams_runtime.processor.Processor` (a new one per task, from
        ``processor()``) on every record, with the stores ``store_names`` added by
        :meth:`~streams_runtime.StreamsBuilder.add_state_store` (Kafka Streams' ``process``).
        What it forwards may have new keys: a later grouping or join repartitions."""
        return self._process(processor, store_names, name, fixed_key=False)

    def process_values(
        self,
        processor: Callable[[], Processor[K, V, K, V2]],
        *store_names: str,
        name: str | None = None,
    ) -> Stream[K, V2]:
        """:meth:`process` for a processor that keeps each record's key (Kafka Streams'
        ``processValues`` with a ``FixedKeyProcessor``): forwarding another key while
        processing a record raises, and the stream stays partitioned as it was."""
        return self._process(processor, store_names, name, fixed_key=True)

    def _process(
        self,
        processor: Callable[[], Processor[Any, Any, Any, Any]],
        store_names: tuple[str, ...],
        name: str | None,
        *,
        fixed_key: bool,
    ) -> Stream[Any, Any]:
        kind = "KSTREAM-PROCESSVALUES" if fixed_key else "KSTREAM-PROCESSOR"
        stores = self._builder._connect_stores(store_names)
        owned, used = self._builder._store_owners(store_names)
        shared = self._builder._graph.global_stores
        node = self._builder._graph.add(
            kind,
            lambda: user_node(processor(), stores, fixed_key=fixed_key, global_stores=shared),
            [self._node],
            name=name,
            stores=owned,
            uses_stores=used,
            operation=RunUserProcessor(),
        )
        return Stream(
            self._builder,
            node,
            self.key_serde if fixed_key else None,
            None,
            key_changed=self._key_changed or not fixed_key,
        )

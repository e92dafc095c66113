"""``Stream``: a record stream (Kafka Streams' ``KStreamImpl``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from streams_runtime import processors as p
from streams_runtime.dsl.grouped import GroupedStream
from streams_runtime.serde_context import is_registry_framed
from streams_runtime.serdes import Serde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, ProcessorFactory
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
    ) -> Stream[Any, Any]:
        node = self._builder._graph.add(kind, factory, [self._node])
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
        )

    def select_key(
        self, selector: Callable[[K, V], K2], *, key_serde: Serde[K2] | None = None
    ) -> Stream[K2, V]:
        """New key per record; a later grouping or join repartitions."""
        return self._then(
            "KSTREAM-KEY-SELECT",
            lambda: p.MapProcessor(lambda k, v: (selector(k, v), v)),
            key_serde=key_serde,
            value_serde=self.value_serde,
            key_changed=True,
        )

    def peek(self, action: Callable[[K, V], None]) -> Stream[K, V]:
        """Call ``action(key, value)`` for every record and pass it on unchanged."""
        return self._then(
            "KSTREAM-PEEK",
            lambda: p.PeekProcessor(action),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
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

    def join(
        self,
        other: Table[K, V2] | Stream[K, V2],
        joiner: Callable[[V, V2], Any],
        windows: JoinWindows | None = None,
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
        grace``. Both streams must be co-partitioned."""
        if windows is None:
            if isinstance(other, Stream):
                raise TypeError("a stream-stream join needs JoinWindows")
            return self._join(other, joiner, left=False, value_serde=value_serde)
        return self._window_join(other, joiner, windows, "inner", value_serde)

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

    def left_join(
        self,
        other: Table[K, V2] | Stream[K, V2],
        joiner: Callable[[V, V2 | None], Any],
        windows: JoinWindows | None = None,
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Like :meth:`join`, but records of this stream without a partner join ``None``: at
        once against a table; against a stream once their window closed (``t + after + grace``
        behind stream time), stamped with their own timestamp. Kafka Streams emits them when a
        later record arrives; the runtime also on control records, so they come out on ticks
        alone."""
        if windows is None:
            if isinstance(other, Stream):
                raise TypeError("a stream-stream join needs JoinWindows")
            return self._join(other, joiner, left=True, value_serde=value_serde)
        return self._window_join(other, joiner, windows, "left", value_serde)

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
        return self._window_join(other, joiner, windows, "outer", value_serde)

    def _window_join(
        self,
        other: Table[Any, Any] | Stream[Any, Any],
        joiner: Callable[[Any, Any], Any],
        windows: JoinWindows,
        kind: str,
        value_serde: Serde[Any] | None,
    ) -> Stream[K, Any]:
        if not isinstance(other, Stream):
            raise TypeError("JoinWindows join two streams; join a table without them")
        this: Stream[Any, Any] = self.repartition() if self._key_changed else self
        that: Stream[Any, Any] = other.repartition() if other._key_changed else other
        graph, default = self._builder._graph, self._builder
        ks = this.key_serde or default.default_key_serde
        lvs = this.value_serde or default.default_value_serde
        rvs = that.value_serde or default.default_value_serde
        # Named like Kafka Streams' nodes and stores (two KSTREAM-WINDOWED names first).
        graph.name("KSTREAM-WINDOWED")
        graph.name("KSTREAM-WINDOWED")
        names: dict[str, str] = {}  # filled in below, once the nodes are named
        # Each side's serdes as its store uses them (key: each side's own), filled in below too.
        serdes: dict[str, Serde[Any]] = {}

        def side(left: bool) -> p.Processor:
            this_store, other_store = (names["this"], names["other"])[:: 1 if left else -1]
            return p.StreamStreamJoinProcessor(
                left=left,
                outer=kind == "outer" or (left and kind == "left"),
                windows=windows,
                this_store=this_store,
                other_store=other_store,
                outer_store=names.get("outer"),
                key_serde=serdes["left key" if left else "right key"],
                left_value_serde=serdes["left value"],
                right_value_serde=serdes["right value"],
                joiner=joiner,
            )

        this_kind = "KSTREAM-OUTERTHIS" if kind == "outer" else "KSTREAM-JOINTHIS"
        other_kind = "KSTREAM-JOINOTHER" if kind == "inner" else "KSTREAM-OUTEROTHER"
        this_node = graph.add(this_kind, lambda: side(True), [this._node])
        other_node = graph.add(other_kind, lambda: side(False), [that._node])
        names["this"], names["other"] = f"{this_node.name}-store", f"{other_node.name}-store"
        serdes["left key"] = graph.store_serde(ks, names["this"], "key")
        serdes["right key"] = graph.store_serde(ks, names["other"], "key")
        serdes["left value"] = graph.store_serde(lvs, names["this"], "value")
        serdes["right value"] = graph.store_serde(rvs, names["other"], "value")
        retention = windows.retention_ms
        this_node.stores = (StoreSpec(names["this"], "window", retention_ms=retention),)
        other_node.stores = (StoreSpec(names["other"], "window", retention_ms=retention),)
        this_node.uses_stores, other_node.uses_stores = (names["other"],), (names["this"],)
        if kind != "inner":
            names["outer"] = f"KSTREAM-OUTERSHARED-{this_node.name.rsplit('-', 1)[1]}-store"
            this_node.stores += (StoreSpec(names["outer"], "key_value"),)
            other_node.uses_stores += (names["outer"],)
        node = graph.add("KSTREAM-MERGE", p.PassThroughProcessor, [this_node, other_node])
        return Stream(self._builder, node, this.key_serde, value_serde)

    def _join(
        self,
        table: Table[Any, Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
        value_serde: Serde[Any] | None,
    ) -> Stream[K, Any]:
        stream: Stream[Any, Any] = self.repartition() if self._key_changed else self
        table._materialize()
        store, getter = table.store_name, table.value_getter
        graph = stream._builder._graph
        ks = graph.store_serde(table.key_serde, store, "key")
        tvs = graph.store_serde(table.store_value_serde, store, "value")
        node = stream._builder._graph.add(
            "KSTREAM-JOIN",
            lambda: p.StreamTableJoinProcessor(store, ks, tvs, joiner, left=left, getter=getter),
            [stream._node],
            uses_stores=(store,),
        )
        return Stream(self._builder, node, stream.key_serde, value_serde)

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

"""The topology DSL: ``StreamsBuilder`` and the stream, grouped, windowed and table views.

Building a topology only records logical nodes; :meth:`StreamsBuilder.build` splits them into
sub-topologies (connected parts between repartition topics), and every task instantiates its own
processors from them.

    builder = StreamsBuilder()
    (builder.stream("clicks", key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(SessionWindows.with_inactivity_gap(30_000))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "clicks": n}))
        .to("sessions"))

Tables (``builder.table(topic)``, and ``group_by_key()`` followed by ``count``, ``reduce`` or
``aggregate``) are materialised in changelog-backed key-value stores and emit on change
(KIP-557): an update with the same serialized value as stored and a strictly newer timestamp is
dropped and counted; see :func:`streams_runtime.processors.is_idempotent_update`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from streams_runtime import processors as p
from streams_runtime.serdes import Integer, Json, Serde, SessionWindowedSerde
from streams_runtime.state import StoreSpec
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows

__all__ = [
    "GroupedStream",
    "QueryableStore",
    "SessionWindowedStream",
    "Stream",
    "StreamsBuilder",
    "Subtopology",
    "Suppressed",
    "Table",
    "Topology",
    "TopologyError",
    "WindowedTable",
    "until_window_closes",
]

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")
A = TypeVar("A")

ProcessorFactory = Callable[[], p.Processor]
# How a derived table reads a row from the store it derives from: (key, stored value) -> its
# value, None when the row is not in the derived table (filtered out).
ValueGetter = Callable[[Any, Any], Any]


class TopologyError(ValueError):
    """A topology that cannot run: bad wiring, or inputs that are not co-partitioned."""


@dataclass(eq=False)
class Node:
    """One logical processor; every task makes its own instance with ``factory``."""

    name: str
    factory: ProcessorFactory
    parents: list[Node] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    source_topics: tuple[str, ...] = ()
    sink_topic: str | None = None
    internal_topic: bool = False  # a repartition topic, named after the application id
    stores: tuple[StoreSpec, ...] = ()
    uses_stores: tuple[str, ...] = ()  # stores owned by another node (a join reads a table's)
    num_partitions: int | None = None  # of a repartition topic; None: as its upstream's inputs


@dataclass(frozen=True)
class Subtopology:
    """A connected part of the topology: one task per partition of its (co-partitioned) inputs."""

    id: int
    nodes: tuple[Node, ...]  # in creation order, so parents come before children
    node_sources: tuple[tuple[str, ...], ...]  # each node's source topics, names resolved
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    stores: tuple[StoreSpec, ...]

    def instantiate(self) -> tuple[dict[str, p.SourceProcessor], list[p.Processor]]:
        """Fresh processors for one task: sources by topic, and every processor."""
        made: dict[int, p.Processor] = {}
        for node in self.nodes:
            made[id(node)] = node.factory()
        for node in self.nodes:
            made[id(node)].children = [made[id(child)] for child in node.children]
            made[id(node)].parents = [made[id(parent)] for parent in node.parents]
        sources: dict[str, p.SourceProcessor] = {}
        for node, topics in zip(self.nodes, self.node_sources, strict=True):
            processor = made[id(node)]
            for topic in topics:
                assert isinstance(processor, p.SourceProcessor)
                sources[topic] = processor
        return sources, [made[id(node)] for node in self.nodes]


@dataclass(frozen=True)
class QueryableStore:
    """A store interactive queries can read (KIP-535): a table's key-value store (values are
    ``ValueAndTimestamp`` of ``value_serde``) or a session aggregation's session store."""

    name: str
    kind: Literal["key_value", "session"]
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    subtopology: int = -1  # resolved by StreamsBuilder.build


@dataclass(frozen=True)
class Topology:
    """The built topology of one application."""

    subtopologies: tuple[Subtopology, ...]
    repartition_topics: dict[str, int | None]  # name -> partitions (None: as upstream inputs)
    queryable_stores: dict[str, QueryableStore] = field(default_factory=dict)

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(t for s in self.subtopologies for t in s.source_topics)

    def subtopology_of(self, topic: str) -> Subtopology:
        for sub in self.subtopologies:
            if topic in sub.source_topics:
                return sub
        raise KeyError(topic)

    def describe(self) -> str:
        """A readable outline, one sub-topology per block."""
        lines = []
        for sub in self.subtopologies:
            lines.append(f"Sub-topology {sub.id}: sources {', '.join(sub.source_topics)}")
            for node in sub.nodes:
                arrow = f" -> {', '.join(c.name for c in node.children)}" if node.children else ""
                stores = (
                    f" stores [{', '.join(s.name for s in node.stores)}]" if node.stores else ""
                )
                sink = f" topic {node.sink_topic}" if node.sink_topic else ""
                lines.append(f"  {node.name}{sink}{stores}{arrow}")
        return "\n".join(lines)


class StreamsBuilder:
    """Builds a topology. Serdes not given anywhere default to ``default_key_serde`` and
    ``default_value_serde`` (JSON)."""

    def __init__(
        self,
        *,
        default_key_serde: Serde[Any] | None = None,
        default_value_serde: Serde[Any] | None = None,
    ) -> None:
        self.default_key_serde: Serde[Any] = default_key_serde or Json()
        self.default_value_serde: Serde[Any] = default_value_serde or Json()
        self._nodes: list[Node] = []
        self._counter = itertools.count()
        self._topics: set[str] = set()
        self._queryable: dict[str, QueryableStore] = {}

    def stream(
        self,
        topics: str | Sequence[str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[Any, Any]:
        """A stream of the records of ``topics`` (several topics must be co-partitioned)."""
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        if not names:
            raise TopologyError("stream() needs at least one topic")
        ks, vs = key_serde or self.default_key_serde, value_serde or self.default_value_serde
        node = self._source(names, ks, vs)
        return Stream(self, node, ks, vs)

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
    ) -> Table[Any, Any]:
        """A table of the latest value per key of ``topic``, materialised in the key-value store
        ``store_name`` (auto-named otherwise) backed by a changelog topic; null values delete,
        null keys are dropped and counted.

        Emit-on-change (KIP-557): an update whose serialized value equals the stored one and
        whose timestamp is strictly newer is stored but not forwarded, and counted in
        ``streams_idempotent_update_skip_total``; a changed value, or the same value with an
        equal or older timestamp, is stored and forwarded."""
        ks, vs = key_serde or self.default_key_serde, value_serde or self.default_value_serde
        source = self._source((topic,), ks, vs)
        store = store_name or self._name("KTABLE-SOURCE-STORE")
        spec = StoreSpec(name=store, kind="key_value")
        node = self._add(
            "KTABLE-SOURCE",
            lambda: p.TableSourceProcessor(store, ks, vs),
            [source],
            stores=(spec,),
        )
        self._queryable[store] = QueryableStore(store, "key_value", ks, vs)
        return Table(self, node, ks, vs, store_name=store, store_value_serde=vs)

    def build(self, application_id: str) -> Topology:
        """Resolve internal topic names and split the graph into sub-topologies."""

        def resolve(node: Node, topic: str) -> str:
            return _internal(application_id, topic) if node.internal_topic else topic

        # Union-find over data edges and shared stores.
        parent = {id(n): id(n) for n in self._nodes}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        owners = {s.name: n for n in self._nodes for s in n.stores}
        for node in self._nodes:
            for child in node.children:
                parent[find(id(child))] = find(id(node))
            for store in node.uses_stores:
                parent[find(id(owners[store]))] = find(id(node))
        groups: dict[int, list[Node]] = {}
        for node in self._nodes:
            groups.setdefault(find(id(node)), []).append(node)
        subs = []
        repartition: dict[str, int | None] = {}
        for index, nodes in enumerate(groups.values()):
            node_sources = tuple(tuple(resolve(n, t) for t in n.source_topics) for n in nodes)
            sources = tuple(t for topics in node_sources for t in topics)
            if not sources:
                raise TopologyError(f"nodes {[n.name for n in nodes]} have no source topic")
            for n in nodes:
                if n.internal_topic and n.source_topics:
                    repartition[resolve(n, n.source_topics[0])] = n.num_partitions
            subs.append(
                Subtopology(
                    id=index,
                    nodes=tuple(nodes),
                    node_sources=node_sources,
                    source_topics=sources,
                    sink_topics=tuple(resolve(n, n.sink_topic) for n in nodes if n.sink_topic),
                    stores=tuple(s for n in nodes for s in n.stores),
                )
            )
        queryable = {
            name: dataclasses.replace(
                spec,
                subtopology=next(sub.id for sub in subs if name in {s.name for s in sub.stores}),
            )
            for name, spec in self._queryable.items()
        }
        return Topology(tuple(subs), repartition, queryable)

    # -- internals used by the views --------------------------------------------------------

    def _name(self, kind: str) -> str:
        return f"{kind}-{next(self._counter):010d}"

    def _add(
        self,
        kind: str,
        factory: ProcessorFactory,
        parents: Sequence[Node],
        **attributes: Any,
    ) -> Node:
        node = Node(self._name(kind), factory, parents=list(parents), **attributes)
        for parent in parents:
            parent.children.append(node)
        self._nodes.append(node)
        return node

    def _source(
        self, topics: tuple[str, ...], ks: Serde[Any], vs: Serde[Any], *, internal: bool = False
    ) -> Node:
        taken = self._topics.intersection(topics)
        if taken:
            raise TopologyError(f"topic(s) {sorted(taken)} are already a source of this topology")
        self._topics.update(topics)
        return self._add(
            "KSTREAM-SOURCE",
            lambda: p.SourceProcessor(ks, vs),
            [],
            source_topics=topics,
            internal_topic=internal,
        )


def _internal(application_id: str, suffix: str) -> str:
    return f"{application_id}-{suffix}"


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
        node = self._builder._add(kind, factory, [self._node])
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
        node = self._builder._add(
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
        topic = f"{name or self._builder._name('KSTREAM-REPARTITION')}-repartition"
        self._builder._add(
            "KSTREAM-REPARTITION-SINK",
            lambda: p.SinkProcessor(topic, ks, vs, internal=True),
            [self._node],
            sink_topic=topic,
            internal_topic=True,
        )
        source = self._builder._source((topic,), ks, vs, internal=True)
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

    def join(
        self,
        table: Table[K, V2],
        joiner: Callable[[V, V2], Any],
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Inner stream-table join: each record joins the table's value for its key at the time
        the record is processed (records are processed in timestamp order across both inputs,
        so "at that time" means at the record's timestamp; see ``max_task_idle_ms``). A table
        derived with ``filter``/``map_values`` is read through the store it derives from."""
        return self._join(table, joiner, left=False, value_serde=value_serde)

    def left_join(
        self,
        table: Table[K, V2],
        joiner: Callable[[V, V2 | None], Any],
        *,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[K, Any]:
        """Like :meth:`join`, but records without a table value join ``None``."""
        return self._join(table, joiner, left=True, value_serde=value_serde)

    def _join(
        self,
        table: Table[Any, Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
        value_serde: Serde[Any] | None,
    ) -> Stream[K, Any]:
        stream: Stream[Any, Any] = self.repartition() if self._key_changed else self
        store, ks, tvs = table.store_name, table.key_serde, table.store_value_serde
        getter = table.value_getter
        node = stream._builder._add(
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
        self._builder._add(
            "KSTREAM-SINK", lambda: p.SinkProcessor(topic, ks, vs), [self._node], sink_topic=topic
        )


class GroupedStream(Generic[K, V]):
    """A stream grouped by key, ready for an aggregation into a table, or a windowed one."""

    def __init__(
        self, stream: Stream[K, V], key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> None:
        self._stream = stream
        self.key_serde = key_serde
        self.value_serde = value_serde

    def count(self, *, name: str | None = None) -> Table[K, int]:
        """Records per key, as a table (values serialized with :class:`Integer`). See
        :meth:`aggregate` for the store, dropped records and emit-on-change."""
        return self.aggregate(
            lambda: 0, lambda _k, _v, total: total + 1, value_serde=Integer(), name=name
        )

    def reduce(self, reducer: Callable[[V, V], V], *, name: str | None = None) -> Table[K, V]:
        """Combine each key's values with ``reducer(aggregate, value)``; the first value of a
        key is its aggregate as it is. See :meth:`aggregate`."""

        def add(_k: K, value: V, aggregate: V | None) -> V:
            return value if aggregate is None else reducer(aggregate, value)

        return self.aggregate(lambda: None, add, value_serde=self.value_serde, name=name)

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
    ) -> Table[K, A]:
        """Aggregate per key, as a table: the aggregate starts as ``initializer()`` and
        ``aggregator(key, value, aggregate)`` folds each record in (returning ``None`` deletes
        the key). Records with a null key or value are dropped and counted
        (``streams_dropped_records_total``).

        The table is materialised in the key-value store ``name`` (auto-named otherwise), backed
        by a changelog topic. Its updates carry the largest timestamp aggregated so far, and
        emit on change (KIP-557): an update whose serialized aggregate equals the stored one and
        whose timestamp is strictly newer is dropped and counted
        (``streams_idempotent_update_skip_total``)."""
        builder = self._stream._builder
        store = name or builder._name("KSTREAM-AGGREGATE-STATE-STORE")
        ks = self.key_serde
        vs: Serde[Any] = value_serde or builder.default_value_serde
        node = builder._add(
            "KSTREAM-AGGREGATE",
            lambda: p.TableAggregateProcessor(
                store, ks, vs, initializer=initializer, aggregator=aggregator
            ),
            [self._stream._node],
            stores=(StoreSpec(name=store, kind="key_value"),),
        )
        builder._queryable[store] = QueryableStore(store, "key_value", ks, vs)
        return Table(builder, node, ks, vs, store_name=store, store_value_serde=vs)

    def windowed_by(self, windows: SessionWindows) -> SessionWindowedStream[K, V]:
        """Session windows: per key, records closer than ``windows.gap_ms`` form one session."""
        return SessionWindowedStream(self, windows)


class SessionWindowedStream(Generic[K, V]):
    """A grouped stream over session windows."""

    def __init__(self, grouped: GroupedStream[K, V], windows: SessionWindows) -> None:
        self._grouped = grouped
        self.windows = windows

    def count(self, *, name: str | None = None) -> WindowedTable[K, int]:
        """Records per key and session."""
        from streams_runtime.serdes import Integer

        return self.aggregate(
            lambda: 0,
            lambda _k, _v, total: total + 1,
            lambda _k, a, b: a + b,
            value_serde=Integer(),
            name=name,
        )

    def reduce(
        self, reducer: Callable[[V, V], V], *, name: str | None = None
    ) -> WindowedTable[K, V]:
        """Combine the values of a session with ``reducer(aggregate, value)``."""
        sentinel: Any = None

        def add(_k: K, value: V, agg: V | None) -> V:
            return value if agg is sentinel else reducer(agg, value)  # type: ignore[arg-type]

        def merge(_k: K, a: V | None, b: V | None) -> V | None:
            if a is sentinel:
                return b
            return a if b is sentinel else reducer(a, b)  # type: ignore[arg-type]

        return self.aggregate(
            lambda: sentinel, add, merge, value_serde=self._grouped.value_serde, name=name
        )

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        merger: Callable[[K, A, A], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
    ) -> WindowedTable[K, A]:
        """Aggregate per key and session; when sessions merge, their aggregates are combined
        with ``merger``. Updates are forwarded as they happen (use :meth:`WindowedTable.suppress`
        for final results only); merged-away sessions are forwarded as tombstones."""
        builder = self._grouped._stream._builder
        store = name or builder._name("KSTREAM-AGGREGATE-STATE-STORE")
        ks, windows = self._grouped.key_serde, self.windows
        vs: Serde[Any] = value_serde or builder.default_value_serde
        spec = StoreSpec(name=store, kind="session", retention_ms=windows.retention_ms)
        node = builder._add(
            "KSTREAM-SESSION-AGGREGATE",
            lambda: p.SessionAggregateProcessor(
                store,
                windows,
                ks,
                vs,
                initializer=initializer,
                aggregator=aggregator,
                merger=merger,
            ),
            [self._grouped._stream._node],
            stores=(spec,),
        )
        builder._queryable[store] = QueryableStore(store, "session", ks, vs)
        return WindowedTable(builder, node, ks, vs, windows)


@dataclass(frozen=True)
class Suppressed:
    """How a windowed table's updates are held back. Only ``until_window_closes`` (final
    results, unbounded buffer) is supported."""

    until_window_closes: bool = True


def until_window_closes() -> Suppressed:
    """Emit one final result per session, once ``end + gap + grace <= stream time``."""
    return Suppressed(until_window_closes=True)


class WindowedTable(Generic[K, V]):
    """The per-session results of a windowed aggregation (keys are :class:`Windowed`)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: Node,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        windows: SessionWindows,
    ) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.windows = windows

    def suppress(self, suppressed: Suppressed, *, name: str | None = None) -> WindowedTable[K, V]:
        """Hold every session's updates back and emit its final result once the session is
        closed. Control records count as time passing, so results come out on idle inputs."""
        if not suppressed.until_window_closes:
            raise TopologyError("only until_window_closes() suppression is supported")
        store = name or self._builder._name("KTABLE-SUPPRESS-STATE-STORE")
        ks, vs, windows = self.key_serde, self.value_serde, self.windows
        node = self._builder._add(
            "KTABLE-SUPPRESS",
            lambda: p.SuppressProcessor(store, windows, ks, vs),
            [self._node],
            stores=(StoreSpec(name=store, kind="key_value"),),
        )
        return WindowedTable(self._builder, node, ks, vs, windows)

    def to_stream(self) -> Stream[Windowed[K], V]:
        """The updates as a stream keyed by :class:`Windowed` (serialized with
        :class:`SessionWindowedSerde` unless mapped)."""
        return Stream(
            self._builder, self._node, SessionWindowedSerde(self.key_serde), self.value_serde
        )


class Table(Generic[K, V]):
    """A changelog-backed table (Kafka Streams' ``KTable``): the latest value per key.

    A table's updates flow downstream as records of the new value, ``None`` when the key was
    deleted. Materialised tables (:meth:`StreamsBuilder.table`, grouped aggregations) emit on
    change (KIP-557); tables derived with :meth:`filter`, :meth:`filter_not` and
    :meth:`map_values` are stateless views that forward every change of their upstream.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: Node,
        key_serde: Serde[Any],
        value_serde: Serde[Any] | None,
        *,
        store_name: str,
        store_value_serde: Serde[Any],
        value_getter: ValueGetter | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.store_name = store_name
        """The store materialising this table, or the table it derives from."""
        self.store_value_serde = store_value_serde
        """The value serde of :attr:`store_name`."""
        self.value_getter = value_getter
        """For a derived table, (key, stored value) -> its value (``None``: no row)."""

    def _derive(
        self,
        kind: str,
        factory: ProcessorFactory,
        getter: ValueGetter,
        value_serde: Serde[Any] | None,
    ) -> Table[Any, Any]:
        upstream = self.value_getter

        def chained(key: Any, value: Any) -> Any:
            if upstream is not None:
                value = upstream(key, value)
            return None if value is None else getter(key, value)

        node = self._builder._add(kind, factory, [self._node])
        return Table(
            self._builder,
            node,
            self.key_serde,
            value_serde,
            store_name=self.store_name,
            store_value_serde=self.store_value_serde,
            value_getter=chained,
        )

    def filter(self, predicate: Callable[[K, V], bool]) -> Table[K, V]:
        """The rows for which ``predicate(key, value)`` is true. An update that does not pass
        is forwarded as a delete (``None``), so the row leaves the filtered table."""
        return self._derive(
            "KTABLE-FILTER",
            lambda: p.TableFilterProcessor(predicate),
            lambda k, v: v if predicate(k, v) else None,
            self.value_serde,
        )

    def filter_not(self, predicate: Callable[[K, V], bool]) -> Table[K, V]:
        """The rows for which ``predicate(key, value)`` is false (see :meth:`filter`)."""
        return self._derive(
            "KTABLE-FILTER",
            lambda: p.TableFilterProcessor(predicate, negate=True),
            lambda k, v: None if predicate(k, v) else v,
            self.value_serde,
        )

    def map_values(
        self, mapper: Callable[[V], V2], *, value_serde: Serde[V2] | None = None
    ) -> Table[K, V2]:
        """A new value per row; deletes stay deletes (the mapper never sees ``None``)."""
        return self._derive(
            "KTABLE-MAPVALUES",
            lambda: p.TableMapValuesProcessor(mapper),
            lambda _k, v: mapper(v),
            value_serde,
        )

    def to_stream(self) -> Stream[K, V]:
        """Every update of the table as a stream (deletes have a ``None`` value)."""
        return Stream(self._builder, self._node, self.key_serde, self.value_serde)

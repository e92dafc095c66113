"""The topology model and its planning (Kafka Streams' ``InternalTopologyBuilder``).

A :class:`TopologyBuilder` records logical :class:`Node` s as the DSL (:mod:`streams_runtime.dsl`)
asks for them; :meth:`TopologyBuilder.build` splits them into sub-topologies (connected parts
between repartition topics, joined by shared stores) and resolves internal topic names. Every
task instantiates its own processors from its :class:`Subtopology`. Global tables are no
sub-topology (they make no tasks): each is a :class:`GlobalStore` that every instance reads
whole, found by its tasks through the built topology's :class:`GlobalStores` (Kafka Streams'
global state stores).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from streams_runtime import processors as p
from streams_runtime.operations import NodeOperation, ReadTopics
from streams_runtime.serde_context import BoundSerde, ContextualSerde, Field, rebind
from streams_runtime.serdes import Serde
from streams_runtime.state import StoreSpec
from streams_runtime.state.changelog import changelog_topic
from streams_runtime.state.global_store import GlobalStores

__all__ = [
    "GlobalStore",
    "Node",
    "ProcessorFactory",
    "QueryableStore",
    "Subtopology",
    "Topology",
    "TopologyBuilder",
    "TopologyError",
]

ProcessorFactory = Callable[[], p.Processor]
SubtopologyRewrite = Callable[[Sequence["Node"], tuple[str, ...]], Sequence["Node"]]
"""Takes a sub-topology's nodes (parents before children) and its source topics; returns its
nodes as they should run (Kafka Streams' topology optimizations)."""


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
    null_key_ticks: bool = False  # the sink's keys are registry-framed: ticks have a null key
    internal_topic: bool = False  # a repartition topic, named after the application id
    stores: tuple[StoreSpec, ...] = ()
    uses_stores: tuple[str, ...] = ()  # stores owned by another node (a join reads a table's)
    num_partitions: int | None = None  # of a repartition topic; None: as its upstream's inputs
    operation: NodeOperation | None = None
    """What the node computes, where planning needs to know (:mod:`streams_runtime.operations`)."""
    fuses: tuple[str, ...] = ()
    """The nodes this one runs in place of, when a rewrite made it (a fused operator)."""
    runs_as: str = ""
    """How a fused node runs, as :meth:`Topology.describe` says it."""


@dataclass(frozen=True)
class Subtopology:
    """A connected part of the topology: one task per partition of its (co-partitioned) inputs."""

    id: int
    nodes: tuple[Node, ...]  # in creation order, so parents come before children
    node_sources: tuple[tuple[str, ...], ...]  # each node's source topics, names resolved
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    stores: tuple[StoreSpec, ...]
    null_key_tick_topics: frozenset[str] = frozenset()
    """Sink topics whose keys are Schema Registry-framed: the runtime's ticks there have a null
    key (docs/design.md §2)."""
    global_state: GlobalStores = field(default_factory=GlobalStores)
    """The topology's global stores, the same for every sub-topology (what its tasks find by
    name besides their own stores)."""

    def instantiate(self) -> tuple[dict[str, p.SourceProcessor], list[p.Processor]]:
        """Fresh processors for one task: sources by topic, and every processor."""
        made: dict[int, p.Processor] = {}
        for node in self.nodes:
            made[id(node)] = processor = node.factory()
            processor.node_name = node.name
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
    ``ValueAndTimestamp`` of ``value_serde``) or a windowed aggregation's session or window
    store."""

    name: str
    kind: Literal["key_value", "session", "window"]
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    subtopology: int = -1  # resolved by StreamsBuilder.build


@dataclass(frozen=True)
class GlobalStore:
    """A global table's store (Kafka Streams' global state store of a ``GlobalKTable``): every
    instance reads every partition of ``topic``, its changelog, into it. Keys and values are
    stored as ``key_serde`` and ``value_serde`` write them (bound to ``topic``, Kafka Streams'
    global ``StateSerdes``), values as ``ValueAndTimestamp``."""

    name: str
    topic: str
    key_serde: Serde[Any]
    value_serde: Serde[Any]


@dataclass(frozen=True)
class Topology:
    """The built topology of one application."""

    subtopologies: tuple[Subtopology, ...]
    repartition_topics: dict[str, int | None]  # name -> partitions (None: as upstream inputs)
    queryable_stores: dict[str, QueryableStore] = field(default_factory=dict)
    global_stores: dict[str, GlobalStore] = field(default_factory=dict)
    """The global tables' stores by name (queryable too, with no sub-topology: -1)."""
    global_state: GlobalStores = field(default_factory=GlobalStores)
    """Their open stores, registered by what runs them (this built topology's only)."""

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
                fused = f" ({node.runs_as}: {' + '.join(node.fuses)})" if node.fuses else ""
                lines.append(f"  {node.name}{fused}{sink}{stores}{arrow}")
        for store in self.global_stores.values():
            lines.append(f"Global store {store.name}: source {store.topic}")
        return "\n".join(lines)


class TopologyBuilder:
    """The logical graph the DSL builds: nodes in creation order, their names, the source
    topics taken so far and the queryable stores."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._counter = itertools.count()
        self._topics: set[str] = set()
        self._queryable: dict[str, QueryableStore] = {}
        self._store_serdes: list[tuple[BoundSerde[Any], str]] = []
        self._built_for: str | None = None
        self._global_stores: dict[str, GlobalStore] = {}

    def store_serde(self, serde: Serde[Any], store: str, field: Field) -> Serde[Any]:
        """``serde`` as the store ``store`` uses it: itself when plain; a context-aware serde
        (:mod:`streams_runtime.serde_context`) bound to the store's changelog topic
        ``<application.id>-<store>-changelog``, with or without logging (Kafka Streams'
        ``StateSerdes``), a name :meth:`build` completes."""

        def bind_one(contextual: ContextualSerde[Any]) -> Serde[Any]:
            bound = BoundSerde(contextual, None, field)
            self._store_serdes.append((bound, store))
            return bound

        return rebind(serde, bind_one)

    @property
    def global_stores(self) -> Mapping[str, GlobalStore]:
        """The global stores added so far (a live view: later ones show up in it)."""
        return self._global_stores

    def add_global_store(self, store: GlobalStore) -> None:
        """Add a global table's store; its topic is taken as a source of this topology."""
        if store.name in self._global_stores:
            raise TopologyError(f"a global store named {store.name!r} is already in this topology")
        if store.topic in self._topics:
            raise TopologyError(f"topic(s) {[store.topic]} are already a source of this topology")
        self._topics.add(store.topic)
        self._global_stores[store.name] = store

    def add_queryable(self, store: QueryableStore) -> None:
        """Make ``store`` queryable (its sub-topology is resolved by :meth:`build`)."""
        self._queryable[store.name] = store

    def build(self, application_id: str, rewrite: SubtopologyRewrite | None = None) -> Topology:
        """Resolve internal topic names and split the graph into sub-topologies, each rewritten
        by ``rewrite`` when given (this builder's nodes stay as they are)."""

        def resolve(node: Node, topic: str) -> str:
            return _internal(application_id, topic) if node.internal_topic else topic

        if self._store_serdes and self._built_for not in (None, application_id):
            raise TopologyError(
                f"this topology's stores bind context-aware serdes to the changelogs of "
                f"{self._built_for!r}: build it for one application id only"
            )
        self._built_for = application_id
        for bound, store in self._store_serdes:
            bound.resolve(changelog_topic(application_id, store))

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
        global_state = GlobalStores()  # one per build: each app opens its own stores
        for index, grouped in enumerate(groups.values()):
            sources = tuple(resolve(n, t) for n in grouped for t in n.source_topics)
            if not sources:
                raise TopologyError(f"nodes {[n.name for n in grouped]} have no source topic")
            repartition.update(
                (resolve(n, n.source_topics[0]), n.num_partitions)
                for n in grouped
                if n.internal_topic and n.source_topics
            )
            nodes = grouped if rewrite is None else list(rewrite(grouped, sources))
            node_sources = tuple(tuple(resolve(n, t) for t in n.source_topics) for n in nodes)
            subs.append(
                Subtopology(
                    id=index,
                    nodes=tuple(nodes),
                    node_sources=node_sources,
                    source_topics=sources,
                    sink_topics=tuple(resolve(n, n.sink_topic) for n in nodes if n.sink_topic),
                    stores=tuple(s for n in nodes for s in n.stores),
                    null_key_tick_topics=frozenset(
                        resolve(n, n.sink_topic) for n in nodes if n.sink_topic and n.null_key_ticks
                    ),
                    global_state=global_state,
                )
            )
        taken = {s.name for sub in subs for s in sub.stores}.intersection(self._global_stores)
        if taken:
            raise TopologyError(f"store(s) {sorted(taken)} are both global and a task's")
        queryable = {
            name: dataclasses.replace(
                spec,
                subtopology=next(sub.id for sub in subs if name in {s.name for s in sub.stores}),
            )
            for name, spec in self._queryable.items()
        }
        for shared in self._global_stores.values():
            queryable[shared.name] = QueryableStore(
                shared.name, "key_value", shared.key_serde, shared.value_serde
            )
        return Topology(
            tuple(subs), repartition, queryable, dict(self._global_stores), global_state
        )

    # -- used by the DSL ----------------------------------------------------------------------

    def name(self, kind: str) -> str:
        """A new node (or store, topic) name: ``<kind>-<10-digit counter>``."""
        return f"{kind}-{next(self._counter):010d}"

    def add(
        self,
        kind: str,
        factory: ProcessorFactory,
        parents: Sequence[Node],
        *,
        name: str | None = None,
        **attributes: Any,
    ) -> Node:
        """A node named ``name`` (Kafka Streams' ``Named``), else ``<kind>-<counter>``: a given
        name takes no number from the counter, as in Kafka Streams."""
        if name is None:
            name = self.name(kind)
        elif any(node.name == name for node in self._nodes):
            raise TopologyError(f"a processor named {name!r} is already in this topology")
        node = Node(name, factory, parents=list(parents), **attributes)
        for parent in parents:
            parent.children.append(node)
        self._nodes.append(node)
        return node

    def source(
        self, topics: tuple[str, ...], ks: Serde[Any], vs: Serde[Any], *, internal: bool = False
    ) -> Node:
        taken = self._topics.intersection(topics)
        if taken:
            raise TopologyError(f"topic(s) {sorted(taken)} are already a source of this topology")
        self._topics.update(topics)
        return self.add(
            "KSTREAM-SOURCE",
            lambda: p.SourceProcessor(ks, vs),
            [],
            source_topics=topics,
            internal_topic=internal,
            operation=ReadTopics(ks, vs),
        )


def _internal(application_id: str, suffix: str) -> str:
    return f"{application_id}-{suffix}"

"""A table's joins with another table (Kafka Streams' ``KTableImpl.doJoin`` and
``doJoinOnForeignKey``): on the primary key (``KTableKTableInnerJoin``, ``-LeftJoin``,
``-OuterJoin`` and their merger) and on a foreign key (KIP-213), as :class:`TableJoins` gives
them to :class:`~streams_runtime.dsl.table.Table`.

A table view sits above this module: it is imported when a join is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from streams_runtime import processors as p
from streams_runtime.processors.fk_join import response_partition
from streams_runtime.record import Record
from streams_runtime.serde_context import is_registry_framed
from streams_runtime.serdes import Serde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, QueryableStore, TopologyBuilder

if TYPE_CHECKING:
    from streams_runtime.dsl.table import Table, _TableSupplier

__all__ = ["TableJoins", "foreign_key_join", "table_table_join"]

K = TypeVar("K")
V = TypeVar("V")
KO = TypeVar("KO")
VO = TypeVar("VO")
VR = TypeVar("VR")


class TableJoins(Generic[K, V]):
    """A table's joins with other tables (part of :class:`~streams_runtime.dsl.table.Table`).

    On the primary key (``join(other, joiner)``): both tables must be co-partitioned (same
    partition count, keyed the same way; checked when the application starts). Each side's
    update joins the other side's current row of its key, stamped with the later of the two
    timestamps. The result is a table kept in a key-value store (``store_name``, Kafka Streams'
    ``Materialized.as``; ``KTABLE-MERGE-STATE-STORE-<n>`` without it), emitting on change.

    On a foreign key (``join(other, foreign_key_extractor, joiner)``): each row of this table
    joins ``other``'s row of key ``foreign_key_extractor(value)``; the tables need not be
    co-partitioned. Updates travel through two internal topics,
    ``<application.id>-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`` (keyed by the
    foreign key) and ``...-SUBSCRIPTION-RESPONSE-<n>-topic`` (keyed by this table's key, routed
    by it with murmur2: this table's input must be partitioned that way, as Kafka's producers
    do). See ``docs/runtime/joins.md``.

    ``name`` names the processors (Kafka Streams' ``Named``/``TableJoined.as``),
    ``store_name`` the result's store, ``value_serde`` its values (the builder's default value
    serde without it). Joiners never see control records.
    """

    @overload
    def join(
        self,
        other: Table[K, VO],
        joiner: Callable[[V, VO], VR],
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[VR] | None = None,
    ) -> Table[K, VR]: ...

    @overload
    def join(
        self,
        other: Table[KO, VO],
        joiner: Callable[[V], KO | None],
        foreign_joiner: Callable[[V, VO], VR],
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[VR] | None = None,
    ) -> Table[K, VR]: ...

    def join(
        self,
        other: Table[Any, Any],
        joiner: Callable[..., Any],
        foreign_joiner: Callable[[Any, Any], Any] | None = None,
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Table[K, Any]:
        """Inner join: ``join(other, joiner)`` on the key, a row for every key both tables
        have, ``joiner(value, other value)``; ``join(other, foreign_key_extractor, joiner)`` on
        the foreign key ``foreign_key_extractor(value)`` of this table's rows (KIP-213), a row
        for every row of this table whose foreign key ``other`` has. Kafka Streams' ``KTable.
        join``; see :class:`TableJoins`."""
        this = cast("Table[Any, Any]", self)
        if foreign_joiner is None:
            return table_table_join(
                this,
                other,
                joiner,
                kind="inner",
                name=name,
                store_name=store_name,
                value_serde=value_serde,
            )
        return foreign_key_join(
            this,
            other,
            joiner,
            foreign_joiner,
            left=False,
            name=name,
            store_name=store_name,
            value_serde=value_serde,
        )

    @overload
    def left_join(
        self,
        other: Table[K, VO],
        joiner: Callable[[V, VO | None], VR],
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[VR] | None = None,
    ) -> Table[K, VR]: ...

    @overload
    def left_join(
        self,
        other: Table[KO, VO],
        joiner: Callable[[V], KO | None],
        foreign_joiner: Callable[[V, VO | None], VR],
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[VR] | None = None,
    ) -> Table[K, VR]: ...

    def left_join(
        self,
        other: Table[Any, Any],
        joiner: Callable[..., Any],
        foreign_joiner: Callable[[Any, Any], Any] | None = None,
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Table[K, Any]:
        """Left join: like :meth:`join`, but every row of this table is in the result, joined
        with ``None`` when ``other`` has no row for it (on the foreign key: also when its
        foreign key is ``None``). Kafka Streams' ``KTable.leftJoin``."""
        this = cast("Table[Any, Any]", self)
        if foreign_joiner is None:
            return table_table_join(
                this,
                other,
                joiner,
                kind="left",
                name=name,
                store_name=store_name,
                value_serde=value_serde,
            )
        return foreign_key_join(
            this,
            other,
            joiner,
            foreign_joiner,
            left=True,
            name=name,
            store_name=store_name,
            value_serde=value_serde,
        )

    def outer_join(
        self,
        other: Table[K, VO],
        joiner: Callable[[V | None, VO | None], VR],
        *,
        name: str | None = None,
        store_name: str | None = None,
        value_serde: Serde[VR] | None = None,
    ) -> Table[K, VR]:
        """Outer join on the key: a row for every key either table has, the missing side
        ``None``. Kafka Streams' ``KTable.outerJoin``; see :class:`TableJoins`."""
        this = cast("Table[Any, Any]", self)
        return table_table_join(
            this,
            other,
            joiner,
            kind="outer",
            name=name,
            store_name=store_name,
            value_serde=value_serde,
        )


def _join_supplier(*tables: Table[Any, Any]) -> _TableSupplier:
    """A join result's part in ``sendOldValues`` (``KTableKTableJoinMerger``): materialised,
    so always able to, and its old values are joined from its tables' old values: asking it
    asks them (forcing their materialisation, as Kafka Streams does)."""
    from streams_runtime.dsl.table import _AggregateSupplier

    class JoinSupplier(_AggregateSupplier):
        def enable_sending_old_values(self, force_materialization: bool) -> bool:
            for table in tables:
                table._enable_sending_old_values(True)
            return super().enable_sending_old_values(force_materialization)

    return JoinSupplier()


def _reader(table: Table[Any, Any]) -> Callable[[], p.TableReader]:
    """How a join reads ``table``'s current rows: the store it derives from, through its
    filters and mappers (Kafka Streams' ``valueGetterSupplier``, which materialises a source
    table; a suppressed table is refused). A new reader for each processor: each task reads
    its own store."""
    table._materialize()
    graph, store = table._builder._graph, table.store_name
    key_serde = graph.store_serde(table.key_serde, store, "key")
    value_serde = graph.store_serde(table.store_value_serde, store, "value")
    getter = table.value_getter
    return lambda: p.TableReader(store, key_serde, value_serde, getter)


def _result_store(
    this: Table[Any, Any], node: Node, store: str, value_serde: Serde[Any]
) -> tuple[Serde[Any], Serde[Any]]:
    """Make ``store`` queryable: a join's result is read by the name of its store."""
    graph = this._builder._graph
    sks = graph.store_serde(this.key_serde, store, "key")
    svs = graph.store_serde(value_serde, store, "value")
    graph.add_queryable(QueryableStore(store, "key_value", sks, svs))
    return sks, svs


def table_table_join(
    this: Table[Any, Any],
    other: Table[Any, Any],
    joiner: Callable[[Any, Any], Any],
    *,
    kind: str,
    name: str | None,
    store_name: str | None,
    value_serde: Serde[Any] | None,
) -> Table[Any, Any]:
    """``this`` joined with ``other`` on the key (Kafka Streams' ``KTableImpl.doJoin``; kind
    inner, left or outer), named as Kafka Streams names it: ``KTABLE-MERGE-<n>``,
    ``KTABLE-JOINTHIS-<n+1>``, ``KTABLE-JOINOTHER-<n+2>`` (with ``name``: ``name``,
    ``<name>-join-this``, ``<name>-join-other``)."""
    from streams_runtime.dsl.table import Table  # a table view sits above the joins

    graph = this._builder._graph
    merge_name = name or graph.name("KTABLE-MERGE")
    if kind != "inner":
        this._enable_sending_old_values(True)
    if kind == "outer":
        other._enable_sending_old_values(True)
    this_reader, other_reader = _reader(this), _reader(other)
    this_kind, other_kind = {
        "inner": (p.JoinKind.INNER, p.JoinKind.INNER),
        "left": (p.JoinKind.LEFT, p.JoinKind.RIGHT),
        "outer": (p.JoinKind.OUTER, p.JoinKind.OUTER),
    }[kind]
    supplier = _join_supplier(this, other)
    old_values = supplier.old_values

    def side(
        table: Table[Any, Any],
        kind: p.JoinKind,
        reader: Callable[[], p.TableReader],
        join: Callable[..., Any],
    ) -> p.Processor:
        # Read when a task makes the processor: the topology is complete by then.
        return p.TableTableJoinProcessor(
            kind,
            reader(),
            join,
            input_old_values=table._sending_old_values,
            send_old_values=old_values.sending,
        )

    def reversed_joiner(other_value: Any, value: Any) -> Any:
        return joiner(value, other_value)

    this_node = graph.add(
        "KTABLE-JOINTHIS",
        lambda: side(this, this_kind, other_reader, joiner),
        [this._node],
        name=None if name is None else f"{name}-join-this",
        uses_stores=(other.store_name,),
    )
    other_node = graph.add(
        "KTABLE-JOINOTHER",
        lambda: side(other, other_kind, this_reader, reversed_joiner),
        [other._node],
        name=None if name is None else f"{name}-join-other",
        uses_stores=(this.store_name,),
    )
    store = store_name or graph.name("KTABLE-MERGE-STATE-STORE")
    vs = value_serde or this._builder.default_value_serde
    node = graph.add(
        "KTABLE-MERGE",
        lambda: p.TableJoinMergeProcessor(store, sks, svs, send_old_values=old_values.sending),
        [this_node, other_node],
        name=merge_name,
        # Cached as a source table is: only when named (Materialized.as).
        stores=(StoreSpec(name=store, kind="key_value", cached=store_name is not None),),
    )
    sks, svs = _result_store(this, node, store, vs)
    return Table(
        this._builder,
        node,
        this.key_serde,
        value_serde,
        store_name=store,
        store_value_serde=vs,
        supplier=supplier,
    )


def foreign_key_join(
    this: Table[Any, Any],
    other: Table[Any, Any],
    extractor: Callable[[Any], Any],
    joiner: Callable[[Any, Any], Any],
    *,
    left: bool,
    name: str | None,
    store_name: str | None,
    value_serde: Serde[Any] | None,
) -> Table[Any, Any]:
    """``this`` joined with ``other`` on ``extractor(value)`` (Kafka Streams'
    ``KTableImpl.doJoinOnForeignKey``), its nodes, topics and stores named as Kafka Streams
    names them (with ``name``: ``<name>-subscription-registration`` and so on)."""
    from streams_runtime.dsl.table import Table, _SourceSupplier  # a table view sits above

    builder = this._builder
    graph = builder._graph
    # Both send old values: this one so a changed foreign key unsubscribes the old one.
    other._enable_sending_old_values(True)
    this._enable_sending_old_values(True)

    def named(suffix: str, kind: str) -> str:
        return f"{name}{suffix}" if name else graph.name(kind)

    prefix = "KTABLE-FK-JOIN-SUBSCRIPTION"
    subscription_topic = named("-subscription-registration", f"{prefix}-REGISTRATION") + "-topic"
    send_name = named("-subscription-registration-processor", f"{prefix}-REGISTRATION")
    ks = this.key_serde
    fks = other.key_serde
    vs: Serde[Any] = this.value_serde or builder.default_value_serde
    ovs: Serde[Any] = other.value_serde or builder.default_value_serde
    # Kafka Streams serializes keys inside the wrappers, and values to hash them, for
    # pseudo-topics of the subscription topic (context-aware serdes see those names).
    subscriptions = p.SubscriptionSerde(graph.store_serde(ks, f"{subscription_topic}-pk", "key"))
    hashed = graph.store_serde(vs, f"{subscription_topic}-vh", "value")
    send = graph.add(
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION",
        lambda: p.SubscriptionSendProcessor(extractor, fks, hashed, left=left),
        [this._node],
        name=send_name,
    )
    sink_name = named("-subscription-registration-sink", "KSTREAM-SINK")
    _internal_topic(graph, send, subscription_topic, serdes=(fks, subscriptions), name=sink_name)
    sub_source = _internal_source(
        graph,
        subscription_topic,
        fks,
        subscriptions,
        named("-subscription-registration-source", "KSTREAM-SOURCE"),
    )
    store = named("-subscription-store", f"{prefix}-STATE-STORE")
    stored = p.SubscriptionSerde(graph.store_serde(ks, store, "key"))
    receive = graph.add(
        "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        lambda: p.SubscriptionReceiveProcessor(store, fks, stored),
        [sub_source],
        name=named("-subscription-receive", f"{prefix}-PROCESSOR"),
        stores=(StoreSpec(name=store, kind="key_value"),),
    )
    other_reader = _reader(other)
    answer = graph.add(
        "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        lambda: p.SubscriptionJoinProcessor(other_reader()),
        [receive],
        name=named("-subscription-join-foreign", f"{prefix}-PROCESSOR"),
        uses_stores=(other.store_name,),
    )
    foreign = graph.add(
        "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
        lambda: p.ForeignTableJoinProcessor(store, fks, stored),
        [other._node],
        name=named("-foreign-join-subscription", f"{prefix}-PROCESSOR"),
        uses_stores=(store,),
    )
    response_base = named("-subscription-response", f"{prefix}-RESPONSE")
    response_topic = f"{response_base}-topic"
    responses = p.ResponseSerde(ovs)
    response_sink = named("-subscription-response-sink", "KSTREAM-SINK")
    merged = graph.add(
        "KTABLE-FK-JOIN-RESPONSE-MERGE",
        p.ResponseMergeProcessor,
        [answer, foreign],
        name=f"{response_base}-merge",  # the runtime's own node: it takes no number
    )
    _internal_topic(
        graph,
        merged,
        response_topic,
        serdes=(ks, responses),
        name=response_sink,
        partition_of=response_partition,  # back to the subscription's partition
    )
    response_source = _internal_source(
        graph,
        response_topic,
        ks,
        responses,
        named("-subscription-response-source", "KSTREAM-SOURCE"),
    )
    this_reader = _reader(this)
    resolver = graph.add(
        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR",
        lambda: p.ResponseJoinProcessor(this_reader(), hashed, joiner, left=left),
        [response_source],
        name=named("-subscription-response-resolver", f"{prefix}-RESPONSE-RESOLVER-PROCESSOR"),
        uses_stores=(this.store_name,),
    )
    result_name = named("-result", "KTABLE-FK-JOIN-OUTPUT")
    result_store = store_name or graph.name("KTABLE-FK-JOIN-OUTPUT-STATE-STORE")
    rvs = value_serde or builder.default_value_serde
    node = graph.add(
        "KTABLE-FK-JOIN-OUTPUT",
        lambda: p.TableSourceProcessor(result_store, sks, svs),
        [resolver],
        name=result_name,
        # Cached as a source table is: only when named (Materialized.as).
        stores=(StoreSpec(name=result_store, kind="key_value", cached=store_name is not None),),
    )
    sks, svs = _result_store(this, node, result_store, rvs)
    return Table(
        builder,
        node,
        ks,
        value_serde,
        store_name=result_store,
        store_value_serde=rvs,
        supplier=_SourceSupplier(queryable=store_name is not None),
    )


def _internal_topic(
    graph: TopologyBuilder,
    parent: Node,
    topic: str,
    *,
    serdes: tuple[Serde[Any], Serde[Any]],
    name: str,
    partition_of: Callable[[Record[Any, Any]], int] | None = None,
) -> None:
    """A sink to the internal topic ``<application.id>-<topic>``, partitioned by key unless
    ``partition_of`` says where a record goes."""
    ks, vs = serdes
    graph.add(
        "KSTREAM-SINK",
        lambda: p.SinkProcessor(topic, ks, vs, internal=True, partition_of=partition_of),
        [parent],
        name=name,
        sink_topic=topic,
        null_key_ticks=is_registry_framed(ks),
        internal_topic=True,
    )


def _internal_source(
    graph: TopologyBuilder, topic: str, ks: Serde[Any], vs: Serde[Any], name: str
) -> Node:
    """The source reading the internal topic ``<application.id>-<topic>``."""
    return graph.add(
        "KSTREAM-SOURCE",
        lambda: p.SourceProcessor(ks, vs),
        [],
        name=name,
        source_topics=(topic,),
        internal_topic=True,
    )

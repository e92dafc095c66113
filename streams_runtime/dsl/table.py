"""Tables (Kafka Streams' ``KTableImpl``), windowed tables and their suppression (the
``Suppressed`` configurations are in :mod:`streams_runtime.dsl.suppressed`).

Materialised tables (``StreamsBuilder.table``, grouped aggregations) live in changelog-backed
key-value stores and emit on change (KIP-557): an update with the same serialized value as
stored and a strictly newer timestamp is dropped and counted; see
:func:`streams_runtime.processors.is_idempotent_update`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from streams_runtime import processors as p
from streams_runtime.dsl.suppressed import Suppressed, until_window_closes
from streams_runtime.dsl.table_joins import TableJoins
from streams_runtime.operations import SuppressUntilWindowCloses
from streams_runtime.serdes import Serde, SessionWindowedSerde, TimeWindowedSerde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, QueryableStore, TopologyError
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, TimeWindows, WindowSpec

if TYPE_CHECKING:
    from streams_runtime.dsl.builder import StreamsBuilder
    from streams_runtime.dsl.grouped import GroupedTable
    from streams_runtime.dsl.stream import Stream

__all__ = ["Suppressed", "Table", "WindowedTable", "until_window_closes"]

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")

# How a derived table reads a row from the store it derives from: (key, stored value) -> its
# value, None when the row is not in the derived table (filtered out).
ValueGetter = Callable[[Any, Any], Any]


class WindowedTable(Generic[K, V]):
    """The per-window results of a windowed aggregation (keys are :class:`Windowed`)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: Node,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        windows: WindowSpec,
    ) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.windows = windows

    def suppress(self, suppressed: Suppressed, *, name: str | None = None) -> WindowedTable[K, V]:
        """Hold every window's updates back and emit its final result once the window is
        closed (:func:`until_window_closes`), or each window's latest update some stream time
        after its first (:func:`until_time_limit`, as :meth:`Table.suppress`). Control records
        count as time passing, so results come out on idle inputs."""
        if not suppressed.until_window_closes:
            key_serde = self._windowed_key_serde()
            node = _time_limit_suppress(
                self._builder,
                self._node,
                suppressed,
                key_serde=key_serde,
                value_serde=self.value_serde,
                name=name,
            )
            return WindowedTable(
                self._builder, node, self.key_serde, self.value_serde, self.windows
            )
        store = name or self._builder._graph.name("KTABLE-SUPPRESS-STATE-STORE")
        ks, vs, windows = self.key_serde, self.value_serde, self.windows
        graph = self._builder._graph
        sks, svs = graph.store_serde(ks, store, "key"), graph.store_serde(vs, store, "value")
        node = graph.add(
            "KTABLE-SUPPRESS",
            lambda: p.SuppressProcessor(store, windows, sks, svs),
            [self._node],
            stores=(StoreSpec(name=store, kind="key_value"),),
            operation=SuppressUntilWindowCloses(store, sks, svs),
        )
        return WindowedTable(self._builder, node, ks, vs, windows)

    def to_stream(self) -> Stream[Windowed[K], V]:
        """The updates as a stream keyed by :class:`Windowed` (serialized with
        :class:`SessionWindowedSerde` for sessions, :class:`TimeWindowedSerde` for time and
        sliding windows, unless mapped)."""
        from streams_runtime.dsl.stream import Stream  # a stream view sits above a table view

        return Stream(self._builder, self._node, self._windowed_key_serde(), self.value_serde)

    def _windowed_key_serde(self) -> Serde[Any]:
        windows = self.windows
        if isinstance(windows, SessionWindows):
            return SessionWindowedSerde(self.key_serde)
        if isinstance(windows, TimeWindows):
            return TimeWindowedSerde(self.key_serde, windows.size_ms)
        return TimeWindowedSerde(self.key_serde, windows.time_difference_ms)


def _time_limit_suppress(
    builder: StreamsBuilder,
    parent: Node,
    suppressed: Suppressed,
    *,
    key_serde: Serde[Any],
    value_serde: Serde[Any] | None,
    name: str | None,
) -> Node:
    """The node of ``suppress(until_time_limit(...))`` below ``parent``, named as Kafka Streams'
    ``KTableImpl.suppress`` names it: the processor ``name`` (else ``KTABLE-SUPPRESS-<n>``),
    its buffer store ``<name>-store`` (else ``KTABLE-SUPPRESS-STATE-STORE-<n>``), changelogged
    unless the buffer config says otherwise."""
    assert suppressed.time_to_wait_ms is not None
    graph = builder._graph
    node_name = name or graph.name("KTABLE-SUPPRESS")
    store = f"{name}-store" if name else graph.name("KTABLE-SUPPRESS-STATE-STORE")
    vs = builder.default_value_serde if value_serde is None else value_serde
    sks, svs = graph.store_serde(key_serde, store, "key"), graph.store_serde(vs, store, "value")
    config, wait = suppressed.buffer_config, suppressed.time_to_wait_ms
    return graph.add(
        "KTABLE-SUPPRESS",
        lambda: p.TimeLimitSuppressProcessor(
            store,
            sks,
            svs,
            time_to_wait_ms=wait,
            max_records=config.record_limit,
            max_bytes=config.byte_limit,
            shut_down_when_full=not config.emit_early,
            node_name=node_name,
        ),
        [parent],
        name=node_name,
        stores=(StoreSpec(name=store, kind="key_value", logged=config.logged),),
    )


class _TableSupplier:
    """What makes a table's updates (Kafka Streams' processor supplier behind a ``KTableImpl``),
    as far as old values go: ``old_values`` is whether its processor forwards them
    (``sendOldValues``), a mutable flag the processor factory reads when a task makes the
    processor, so a request from a step added later in the DSL still reaches it."""

    def __init__(self) -> None:
        self.old_values = _OldValues()

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        """Make the processor send old values if it can; whether it does now."""
        raise NotImplementedError

    def materialize(self) -> None:
        """A value getter of the table was asked for (a join reads it)."""


class _OldValues:
    """A mutable "sends old values" flag, decided while the topology is built."""

    def __init__(self, sending: bool = False) -> None:
        self.sending = sending


class _SourceSupplier(_TableSupplier):
    """``KTableSource``: materialised (able to know old values) when queryable, i.e. given a
    store name, or once something downstream forces it. The runtime keeps every source table in
    a store anyway and its processor always forwards the old value; who reads it decides."""

    def __init__(self, queryable: bool) -> None:
        super().__init__()
        self.materialized = queryable

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        if not force_materialization and not self.materialized:
            return False
        self.materialized = self.old_values.sending = True
        return True

    def materialize(self) -> None:
        self.materialized = True


class _AggregateSupplier(_TableSupplier):
    """``KStreamAggregate``, ``KTableAggregate``...: always materialised, so always able to."""

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        self.old_values.sending = True
        return True


class _DerivedSupplier(_TableSupplier):
    """``KTableFilter``, ``KTableMapValues``: a table derived row by row from ``parent``; with
    a store of its own (``queryable``) it reads old values there, else it needs its parent's."""

    def __init__(self, parent: Table[Any, Any], queryable: bool) -> None:
        super().__init__()
        self.parent = parent
        self.queryable = queryable

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        if self.queryable:
            self.old_values.sending = True
            return True
        if self.parent._enable_sending_old_values(force_materialization):
            self.old_values.sending = True
        return self.old_values.sending

    def materialize(self) -> None:
        if not self.queryable:
            self.parent._materialize()


class _SuppressedSupplier(_TableSupplier):
    """``KTableSuppressProcessorSupplier``: its parent sends old values (the buffer keeps the
    row's prior value), and asks go to the parent. Its value getter (Kafka Streams' view of
    the prior value of buffered keys) is not implemented: a join reading a suppressed table
    through it is refused when the topology is built."""

    def __init__(self, parent: Table[Any, Any]) -> None:
        super().__init__()
        self.parent = parent
        parent._enable_sending_old_values(True)

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        self.old_values.sending = self.parent._enable_sending_old_values(force_materialization)
        return self.old_values.sending

    def materialize(self) -> None:
        raise TopologyError(
            "a suppressed table cannot be read through (a join): join the table before "
            "suppress(), or materialise a filter of it with store_name"
        )


class Table(TableJoins[K, V]):
    """A changelog-backed table (Kafka Streams' ``KTable``): the latest value per key.

    A table's updates flow downstream as records of the new value, ``None`` when the key was
    deleted. Materialised tables (:meth:`StreamsBuilder.table`, grouped aggregations) emit on
    change (KIP-557); tables derived with :meth:`filter`, :meth:`filter_not` and
    :meth:`map_values` are views that forward every change of their upstream (a filter given a
    store name is materialised too). Whether an update also carries the row's old value is
    decided when the topology is built, as in Kafka Streams (``sendOldValues``): a table sends
    them when it can and something downstream needs them (:meth:`group_by`), and a filter's
    deletes depend on it (:meth:`filter`). Tables join tables on the key or on a foreign key
    (:class:`~streams_runtime.dsl.table_joins.TableJoins`).
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
        supplier: _TableSupplier | None = None,
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
        self._supplier = supplier or _AggregateSupplier()
        self._sending_old_values = False  # KTableImpl.sendOldValues

    def _enable_sending_old_values(self, force_materialization: bool) -> bool:
        """Kafka Streams' ``KTableImpl.enableSendingOldValues``: make this table's updates carry
        old values, asking upstream as far as needed; False when it cannot without
        materialising an unmaterialised source table and ``force_materialization`` is not set."""
        if not self._sending_old_values:
            if not self._supplier.enable_sending_old_values(force_materialization):
                return False
            self._sending_old_values = True
        return True

    def _materialize(self) -> None:
        """What Kafka Streams' ``KTableImpl.valueGetterSupplier`` does besides: a source table
        read through (a join) becomes materialised, so later filters get old values from it."""
        self._supplier.materialize()

    def _derive(
        self,
        kind: str,
        make: Callable[[bool], p.Processor],
        getter: ValueGetter,
        value_serde: Serde[Any] | None,
        *,
        store: StoreSpec | None = None,
        store_value_serde: Serde[Any] | None = None,
        ask_upstream: bool = False,
    ) -> Table[Any, Any]:
        """A table derived row by row, made by ``make(send_old_values)``. With ``store`` it is
        materialised there (queryable); otherwise read through :attr:`store_name` and
        ``getter`` on top of this table's :attr:`value_getter`. ``ask_upstream``: whether it
        sends old values when this table already can (``KTableFilter``'s constructor)."""
        supplier = _DerivedSupplier(self, store is not None)
        if ask_upstream:
            supplier.old_values.sending = self._enable_sending_old_values(False)
        old_values = supplier.old_values
        graph = self._builder._graph
        node = graph.add(
            kind,
            lambda: make(old_values.sending),
            [self._node],
            stores=() if store is None else (store,),
        )
        if store is not None:
            assert store_value_serde is not None
            graph.add_queryable(
                QueryableStore(
                    store.name,
                    "key_value",
                    graph.store_serde(self.key_serde, store.name, "key"),
                    graph.store_serde(store_value_serde, store.name, "value"),
                )
            )
            return Table(
                self._builder,
                node,
                self.key_serde,
                value_serde,
                store_name=store.name,
                store_value_serde=store_value_serde,
                supplier=supplier,
            )
        upstream = self.value_getter

        def chained(key: Any, value: Any) -> Any:
            if upstream is not None:
                value = upstream(key, value)
            return None if value is None else getter(key, value)

        return Table(
            self._builder,
            node,
            self.key_serde,
            value_serde,
            store_name=self.store_name,
            store_value_serde=self.store_value_serde,
            value_getter=chained,
            supplier=supplier,
        )

    def _filter(
        self, predicate: Callable[[K, V], bool], negate: bool, store_name: str | None
    ) -> Table[K, V]:
        ks = self.key_serde
        vs: Serde[Any] = self.value_serde or self._builder.default_value_serde
        store = None if store_name is None else StoreSpec(name=store_name, kind="key_value")
        sks, svs = ks, vs
        if store_name is not None:
            graph = self._builder._graph
            sks = graph.store_serde(ks, store_name, "key")
            svs = graph.store_serde(vs, store_name, "value")

        def make(send_old_values: bool) -> p.Processor:
            return p.TableFilterProcessor(
                predicate,
                negate=negate,
                send_old_values=send_old_values,
                store_name=store_name,
                key_serde=sks,
                value_serde=svs,
            )

        return self._derive(
            "KTABLE-FILTER",
            make,
            lambda k, v: None if predicate(k, v) == negate else v,
            self.value_serde,
            store=store,
            store_value_serde=vs,
            ask_upstream=True,
        )

    def filter(
        self, predicate: Callable[[K, V], bool], *, store_name: str | None = None
    ) -> Table[K, V]:
        """The rows for which ``predicate(key, value)`` is true (Kafka Streams'
        ``KTable.filter``). An update that does not pass is forwarded as a delete (``None``).

        Which deletes, Kafka Streams decides when the topology is built, and so does the
        runtime: when this table sends old values (a table materialised under a store name, an
        aggregation, or a table whose downstream asked, like :meth:`group_by`), only those of
        rows that were in the filtered table; otherwise one for every update that does not
        pass, also for keys never in it and repeated deletes. A ``group_by`` (or join) added
        later downstream of the filter makes it send old values too.

        With ``store_name`` the filtered table is materialised in that key-value store
        (queryable, changelogged), and reads its old values there."""
        return self._filter(predicate, False, store_name)

    def filter_not(
        self, predicate: Callable[[K, V], bool], *, store_name: str | None = None
    ) -> Table[K, V]:
        """The rows for which ``predicate(key, value)`` is false (see :meth:`filter`)."""
        return self._filter(predicate, True, store_name)

    def map_values(
        self, mapper: Callable[[V], V2], *, value_serde: Serde[V2] | None = None
    ) -> Table[K, V2]:
        """A new value per row; deletes stay deletes (the mapper never sees ``None``). Every
        update is forwarded; old values only once downstream asks for them (Kafka Streams'
        ``KTableMapValues``)."""
        return self._derive(
            "KTABLE-MAPVALUES",
            lambda send_old_values: p.TableMapValuesProcessor(
                mapper, send_old_values=send_old_values
            ),
            lambda _k, v: mapper(v),
            value_serde,
        )

    def group_by(
        self,
        selector: Callable[[K, V], tuple[K2, V2]],
        *,
        key_serde: Serde[K2] | None = None,
        value_serde: Serde[V2] | None = None,
    ) -> GroupedTable[K2, V2]:
        """Regroup the rows by ``selector(key, value) -> (new key, new value)``, for an
        aggregation per new key (Kafka Streams' ``KTable.groupBy``). Rows mapped to a null key
        or value are left out. This table sends old values from now on, so the aggregation can
        take a row's old value out of its old group: every update goes through a repartition
        topic as the row's new and old value."""
        from streams_runtime.dsl.grouped import GroupedTable  # a grouped view sits above

        self._enable_sending_old_values(True)
        node = self._builder._graph.add(
            "KTABLE-SELECT", lambda: p.TableRepartitionMapProcessor(selector), [self._node]
        )
        return GroupedTable(
            self._builder,
            node,
            key_serde or self._builder.default_key_serde,
            value_serde or self.value_serde or self._builder.default_value_serde,
        )

    def suppress(self, suppressed: Suppressed, *, name: str | None = None) -> Table[K, V]:
        """Hold each key's updates back and emit its latest once ``time_to_wait_ms`` of stream
        time passed since its first held update (:func:`until_time_limit`; Kafka Streams'
        ``KTable.suppress`` with ``Suppressed.untilTimeLimit``). Deletes are held and emitted
        too. Stream time moves with data and control records, so held updates come out on
        idle inputs as well.

        The buffer is a key-value store ``<name>-store`` (``KTABLE-SUPPRESS-STATE-STORE-<n>``
        without ``name``, which also names the processor, as ``Suppressed.withName``) with a
        changelog unless ``buffer_config.with_logging_disabled()``; its bounds and what happens
        past them are the :class:`BufferConfig`'s. Like Kafka Streams, this table's upstream
        sends old values from now on."""
        if suppressed.until_window_closes:
            raise TopologyError(
                "until_window_closes() suppresses a windowed table; a table takes "
                "until_time_limit()"
            )
        supplier = _SuppressedSupplier(self)
        node = _time_limit_suppress(
            self._builder,
            self._node,
            suppressed,
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            name=name,
        )
        return Table(
            self._builder,
            node,
            self.key_serde,
            self.value_serde,
            store_name=self.store_name,
            store_value_serde=self.store_value_serde,
            value_getter=self.value_getter,
            supplier=supplier,
        )

    def to_stream(self) -> Stream[K, V]:
        """Every update of the table as a stream (deletes have a ``None`` value)."""
        from streams_runtime.dsl.stream import Stream  # a stream view sits above a table view

        return Stream(self._builder, self._node, self.key_serde, self.value_serde)

"""Grouped streams: aggregations into tables, and session-, time- and sliding-windowed
aggregations; grouped tables (``Table.group_by``): aggregations that subtract as well as add."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from streams_runtime import processors as p
from streams_runtime.dsl.cogrouped import CogroupedStream
from streams_runtime.dsl.table import Table, WindowedTable, _AggregateSupplier
from streams_runtime.operations import Aggregation, WindowedAggregation, reduce_kind
from streams_runtime.serde_context import is_registry_framed
from streams_runtime.serdes import ChangedSerde, Integer, Serde, TimestampedValueSerde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, QueryableStore
from streams_runtime.windows import SessionWindows, SlidingWindows, TimeWindows

if TYPE_CHECKING:
    from streams_runtime.dsl.builder import StreamsBuilder
    from streams_runtime.dsl.stream import Stream

__all__ = ["GroupedStream", "GroupedTable", "SessionWindowedStream", "TimeWindowedStream"]

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")
A = TypeVar("A")


def _count(_key: object, _value: object, total: int) -> int:
    return total + 1


def _uncount(_key: object, _value: object, total: int) -> int:
    return total - 1


def _store_serdes(
    builder: StreamsBuilder, store: str, key_serde: Serde[Any], value_serde: Serde[Any]
) -> tuple[Serde[Any], Serde[Any]]:
    """The key and value serde as ``store`` uses them (context-aware ones bound to its
    changelog topic: :meth:`~streams_runtime.topology.TopologyBuilder.store_serde`)."""
    graph = builder._graph
    return graph.store_serde(key_serde, store, "key"), graph.store_serde(
        value_serde, store, "value"
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
        return self.aggregate(lambda: 0, _count, value_serde=Integer(), name=name)

    def reduce(self, reducer: Callable[[V, V], V], *, name: str | None = None) -> Table[K, V]:
        """Combine each key's values with ``reducer(aggregate, value)``; the first value of a
        key is its aggregate as it is. See :meth:`aggregate`."""
        return self.aggregate(
            p.reduce_initializer, p.Reducing(reducer), value_serde=self.value_serde, name=name
        )

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
        store = name or builder._graph.name("KSTREAM-AGGREGATE-STATE-STORE")
        ks = self.key_serde
        vs: Serde[Any] = value_serde or builder.default_value_serde
        sks, svs = _store_serdes(builder, store, ks, vs)
        node = builder._graph.add(
            "KSTREAM-AGGREGATE",
            lambda: p.TableAggregateProcessor(
                store, sks, svs, initializer=initializer, aggregator=aggregator
            ),
            [self._stream._node],
            stores=(StoreSpec(name=store, kind="key_value", cached=True),),
        )
        builder._graph.add_queryable(QueryableStore(store, "key_value", sks, svs))
        return Table(builder, node, ks, vs, store_name=store, store_value_serde=vs)

    def cogroup(self, aggregator: Callable[[K, V, A], A]) -> CogroupedStream[K, A]:
        """Start a cogrouped aggregation (Kafka Streams' KIP-150 ``cogroup``): this stream's
        records folded in by ``aggregator(key, value, aggregate)``; add other grouped streams of
        the same key with :meth:`CogroupedStream.cogroup`, then ``aggregate(initializer)`` or
        ``windowed_by(windows).aggregate(...)``."""
        return CogroupedStream(self, aggregator)

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedStream[K, V]: ...

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeWindowedStream[K, V]: ...

    def windowed_by(
        self, windows: SessionWindows | TimeWindows | SlidingWindows
    ) -> SessionWindowedStream[K, V] | TimeWindowedStream[K, V]:
        """Windowed aggregations. Session windows: per key, records closer than
        ``windows.gap_ms`` form one session. Time windows (tumbling or hopping) and sliding
        windows: see :class:`TimeWindowedStream`."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedStream(self, windows)
        return TimeWindowedStream(self, windows)


class SessionWindowedStream(Generic[K, V]):
    """A grouped stream over session windows."""

    def __init__(self, grouped: GroupedStream[K, V], windows: SessionWindows) -> None:
        self._grouped = grouped
        self.windows = windows

    def count(self, *, name: str | None = None) -> WindowedTable[K, int]:
        """Records per key and session."""
        count = Aggregation("count", p.count_initializer, p.count_aggregator, p.count_merger)
        return self._aggregate(count, Integer(), name)

    def reduce(
        self, reducer: Callable[[V, V], V], *, name: str | None = None
    ) -> WindowedTable[K, V]:
        """Combine the values of a session with ``reducer(aggregate, value)`` (a session's first
        value is its aggregate as it is); when sessions merge, their aggregates are combined in
        the order of their starts, and the record's value last. ``reduce(operator.add)``,
        ``reduce(min)`` and ``reduce(max)`` are :meth:`sum`, :meth:`min` and :meth:`max`."""
        reducing = Aggregation(
            reduce_kind(reducer),
            p.reduce_initializer,
            p.Reducing(reducer),
            p.ReducingMerger(reducer),
            reducer,
        )
        return self._aggregate(reducing, self._grouped.value_serde, name)

    def sum(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The sum of a session's values, which are numbers: exactly
        ``reduce(operator.add)`` (values serialized with the grouped stream's value serde)."""
        return self.reduce(operator.add, name=name)

    def min(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The least of a session's values, which are numbers: exactly ``reduce(min)`` (the
        earlier of equal ones)."""
        return self.reduce(cast("Callable[[V, V], V]", min), name=name)

    def max(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The greatest of a session's values, which are numbers: exactly ``reduce(max)`` (the
        earlier of equal ones)."""
        return self.reduce(cast("Callable[[V, V], V]", max), name=name)

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
        with ``merger``. Updates are forwarded as they happen, or once per session and commit
        interval with the record cache on (use :meth:`WindowedTable.suppress`
        for final results only); merged-away sessions are forwarded as tombstones."""
        aggregation = Aggregation("aggregate", initializer, aggregator, merger)
        return self._aggregate(aggregation, value_serde, name)

    def _aggregate(
        self, aggregation: Aggregation, value_serde: Serde[Any] | None, name: str | None
    ) -> WindowedTable[K, Any]:
        builder = self._grouped._stream._builder
        store = name or builder._graph.name("KSTREAM-AGGREGATE-STATE-STORE")
        ks, windows = self._grouped.key_serde, self.windows
        vs: Serde[Any] = value_serde or builder.default_value_serde
        spec = StoreSpec(name=store, kind="session", retention_ms=windows.retention_ms, cached=True)
        sks, svs = _store_serdes(builder, store, ks, vs)
        merger = aggregation.merger
        assert merger is not None
        node = builder._graph.add(
            "KSTREAM-SESSION-AGGREGATE",
            lambda: p.SessionAggregateProcessor(
                store,
                windows,
                sks,
                svs,
                initializer=aggregation.initializer,
                aggregator=aggregation.aggregator,
                merger=merger,
            ),
            [self._grouped._stream._node],
            stores=(spec,),
            operation=WindowedAggregation(store, windows, sks, svs, aggregation),
        )
        builder._graph.add_queryable(QueryableStore(store, "session", sks, svs))
        return WindowedTable(builder, node, ks, vs, windows)


class GroupedTable(Generic[K, V]):
    """A table regrouped by :meth:`Table.group_by`, ready for an aggregation (Kafka Streams'
    ``KGroupedTable``). Each aggregation gets the row updates through its own repartition topic
    ``<application.id>-<store>-repartition`` (``KTABLE-AGGREGATE-STATE-STORE-...-repartition``
    when unnamed), as :class:`~streams_runtime.serdes.Change` values in Kafka Streams' format,
    and keeps its table in a changelogged key-value store."""

    def __init__(
        self, builder: StreamsBuilder, node: Node, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde

    def count(self, *, name: str | None = None) -> Table[K, int]:
        """Rows per key, as a table (values serialized with :class:`Integer`); a key whose rows
        all left counts 0. See :meth:`aggregate`."""
        return self.aggregate(lambda: 0, _count, _uncount, value_serde=Integer(), name=name)

    def reduce(
        self,
        adder: Callable[[V, V], V],
        subtractor: Callable[[V, V], V],
        *,
        name: str | None = None,
    ) -> Table[K, V]:
        """Combine the values of each key's rows: a row's new value with ``adder(aggregate,
        value)`` (the first is the aggregate as it is), its old one taken out with
        ``subtractor(aggregate, value)``. See :meth:`aggregate`."""
        return self.aggregate(
            p.reduce_initializer,
            p.Reducing(adder),
            lambda _key, value, aggregate: subtractor(aggregate, value),
            value_serde=self.value_serde,
            name=name,
        )

    def aggregate(
        self,
        initializer: Callable[[], A],
        adder: Callable[[K, V, A], A],
        subtractor: Callable[[K, V, A], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
    ) -> Table[K, A]:
        """Aggregate the rows of each key, as a table: per update, ``subtractor(key, old value,
        aggregate)`` takes the row's old value out of its old key's aggregate, then ``adder(key,
        new value, aggregate)`` adds its new value to its new key's (starting from
        ``initializer()``); both in one step when the key stayed. An aggregate of ``None``
        deletes the key.

        The table lives in the key-value store ``name`` (auto-named otherwise); an update is
        stamped with the row update's timestamp, or the aggregate's when later, and emits on
        change (KIP-557), as :meth:`GroupedStream.aggregate`."""
        graph = self._builder._graph
        store = name or graph.name("KTABLE-AGGREGATE-STATE-STORE")
        ks, vs = self.key_serde, value_serde or self._builder.default_value_serde
        changes = ChangedSerde(self.value_serde)
        topic = f"{store}-repartition"
        graph.add(
            "KSTREAM-SINK",
            lambda: p.SinkProcessor(topic, ks, changes, internal=True),
            [self._node],
            sink_topic=topic,
            null_key_ticks=is_registry_framed(ks),
            internal_topic=True,
        )
        source = graph.source((topic,), ks, changes, internal=True)
        sks, svs = _store_serdes(self._builder, store, ks, vs)
        node = graph.add(
            "KTABLE-AGGREGATE",
            lambda: p.TableChangeAggregateProcessor(
                store,
                sks,
                svs,
                initializer=initializer,
                aggregator=adder,
                subtractor=subtractor,
            ),
            [source],
            stores=(StoreSpec(name=store, kind="key_value", cached=True),),
        )
        graph.add_queryable(QueryableStore(store, "key_value", sks, svs))
        return Table(
            self._builder,
            node,
            ks,
            vs,
            store_name=store,
            store_value_serde=vs,
            supplier=_AggregateSupplier(),
        )


class TimeWindowedStream(Generic[K, V]):
    """A grouped stream over time windows (tumbling or hopping, :class:`TimeWindows`) or
    sliding windows (:class:`SlidingWindows`), as Kafka Streams' ``TimeWindowedKStream``.

    Every window of a key is aggregated on its own; its updates carry the largest timestamp in
    the window and the headers of the record causing them. A record is dropped from (and counted
    for) each window already closed at the observed stream time: time windows once
    ``end + grace <= stream time`` (``end`` exclusive), sliding windows once
    ``end + grace < stream time`` (``end`` inclusive)."""

    def __init__(self, grouped: GroupedStream[K, V], windows: TimeWindows | SlidingWindows) -> None:
        self._grouped = grouped
        self.windows = windows

    def count(self, *, name: str | None = None) -> WindowedTable[K, int]:
        """Records per key and window."""
        count = Aggregation("count", p.count_initializer, p.count_aggregator)
        return self._aggregate(count, Integer(), name)

    def reduce(
        self, reducer: Callable[[V, V], V], *, name: str | None = None
    ) -> WindowedTable[K, V]:
        """Combine the values of a window with ``reducer(aggregate, value)``; a window's first
        value is its aggregate as it is. ``reduce(operator.add)``, ``reduce(min)`` and
        ``reduce(max)`` are :meth:`sum`, :meth:`min` and :meth:`max`."""
        reducing = Aggregation(
            reduce_kind(reducer), p.reduce_initializer, p.Reducing(reducer), reducer=reducer
        )
        return self._aggregate(reducing, self._grouped.value_serde, name)

    def sum(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The sum of a window's values, which are numbers: exactly ``reduce(operator.add)``
        (values serialized with the grouped stream's value serde)."""
        return self.reduce(operator.add, name=name)

    def min(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The least of a window's values, which are numbers: exactly ``reduce(min)`` (the
        earlier of equal ones)."""
        return self.reduce(cast("Callable[[V, V], V]", min), name=name)

    def max(self, *, name: str | None = None) -> WindowedTable[K, V]:
        """The greatest of a window's values, which are numbers: exactly ``reduce(max)`` (the
        earlier of equal ones)."""
        return self.reduce(cast("Callable[[V, V], V]", max), name=name)

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
    ) -> WindowedTable[K, A]:
        """Aggregate per key and window: a window starts from ``initializer()`` and
        ``aggregator(key, value, aggregate)`` folds each record in. Updates are forwarded as they
        happen (use :meth:`WindowedTable.suppress` for final results only). The windows live in
        the window store ``name`` (auto-named otherwise), kept ``windows.retention_ms`` of
        stream time and backed by a changelog topic."""
        return self._aggregate(Aggregation("aggregate", initializer, aggregator), value_serde, name)

    def _aggregate(
        self, aggregation: Aggregation, value_serde: Serde[Any] | None, name: str | None
    ) -> WindowedTable[K, Any]:
        builder = self._grouped._stream._builder
        initializer, aggregator = aggregation.initializer, aggregation.aggregator
        store = name or builder._graph.name("KSTREAM-AGGREGATE-STATE-STORE")
        ks, windows = self._grouped.key_serde, self.windows
        vs: Serde[Any] = value_serde or builder.default_value_serde
        spec = StoreSpec(name=store, kind="window", retention_ms=windows.retention_ms, cached=True)
        sks, svs = _store_serdes(builder, store, ks, vs)

        def make() -> p.Processor:
            if isinstance(windows, TimeWindows):
                return p.TimeWindowAggregateProcessor(
                    store, windows, sks, svs, initializer=initializer, aggregator=aggregator
                )
            return p.SlidingWindowAggregateProcessor(
                store, windows, sks, svs, initializer=initializer, aggregator=aggregator
            )

        kind = (
            "KSTREAM-AGGREGATE"
            if isinstance(windows, TimeWindows)
            else "KSTREAM-SLIDINGWINDOWAGGREGATE"
        )
        node = builder._graph.add(
            kind,
            make,
            [self._grouped._stream._node],
            stores=(spec,),
            operation=WindowedAggregation(store, windows, sks, svs, aggregation),
        )
        builder._graph.add_queryable(
            QueryableStore(store, "window", sks, TimestampedValueSerde(svs))
        )
        return WindowedTable(builder, node, ks, vs, windows)

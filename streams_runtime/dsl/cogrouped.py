"""Cogrouped streams (Kafka Streams' KIP-150 ``CogroupedKStream``, ``CogroupedKStreamImpl``,
``CogroupedStreamAggregateBuilder`` and the windowed ``TimeWindowedCogroupedKStream``,
``SessionWindowedCogroupedKStream``): several grouped streams aggregated into one table, each
with its own aggregator, sharing one initializer and one store.

The topology is Kafka Streams': one aggregation processor per grouped input
(``COGROUPKSTREAM-AGGREGATE-<n>``, or ``<name>-cogroup-agg-<i>``), each the processor of the
single-input aggregation, all writing the one store (``COGROUPKSTREAM-AGGREGATE-STATE-STORE-<n>``
or ``store_name``, with a changelog), then a merge (``COGROUPKSTREAM-MERGE-<n>``, or
``<name>-cogroup-merge``) whose updates are the table's. A grouped input whose key changed
upstream was repartitioned when it was grouped (:meth:`Stream.group_by_key`); the inputs end
up in one sub-topology, so they must be co-partitioned (one task per partition reads them all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from streams_runtime import processors as p
from streams_runtime.dsl.table import Table, WindowedTable
from streams_runtime.serdes import Serde, TimestampedValueSerde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, QueryableStore
from streams_runtime.windows import SessionWindows, SlidingWindows, TimeWindows

if TYPE_CHECKING:
    from streams_runtime.dsl.builder import StreamsBuilder
    from streams_runtime.dsl.grouped import GroupedStream

__all__ = ["CogroupedStream", "SessionWindowedCogroupedStream", "TimeWindowedCogroupedStream"]

K = TypeVar("K")
A = TypeVar("A")

_AGGREGATE = "COGROUPKSTREAM-AGGREGATE"
_MERGE = "COGROUPKSTREAM-MERGE"

Aggregator = Callable[[Any, Any, Any], Any]
MakeProcessor = Callable[[str, Serde[Any], Serde[Any], Aggregator], p.Processor]
"""One input's aggregation processor: from the store, its key and value serde (as the store uses
them) and the input's aggregator."""


class CogroupedStream(Generic[K, A]):
    """Grouped streams to aggregate together (Kafka Streams' ``CogroupedKStream``): made by
    :meth:`GroupedStream.cogroup`, more added with :meth:`cogroup`, aggregated by
    :meth:`aggregate` or, windowed, by :meth:`windowed_by` then ``aggregate``.

    Every input's records are folded into the one aggregate of their key by the aggregator given
    with that input, ``aggregator(key, value, aggregate)``; records with a null key or value are
    dropped and counted, as in a single grouped stream's aggregation."""

    def __init__(
        self, grouped: GroupedStream[K, Any], aggregator: Callable[[K, Any, A], A]
    ) -> None:
        self._groups: list[tuple[GroupedStream[K, Any], Aggregator]] = []
        self.cogroup(grouped, aggregator)

    def cogroup(
        self, grouped: GroupedStream[K, Any], aggregator: Callable[[K, Any, A], A]
    ) -> CogroupedStream[K, A]:
        """Add ``grouped``, its records aggregated by ``aggregator``. A grouped stream already
        added keeps its place and takes the new aggregator (Kafka Streams keeps them in a map).
        Every input must be of one :class:`StreamsBuilder`."""
        if self._groups and grouped._stream._builder is not self._builder:
            raise ValueError("a cogroup's grouped streams must come from one StreamsBuilder")
        for index, (known, _) in enumerate(self._groups):
            if known is grouped:
                self._groups[index] = (grouped, aggregator)
                return self
        self._groups.append((grouped, aggregator))
        return self

    @property
    def _builder(self) -> StreamsBuilder:
        return self._groups[0][0]._stream._builder

    def aggregate(
        self,
        initializer: Callable[[], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
        store_name: str | None = None,
    ) -> Table[K, A]:
        """Aggregate per key, as a table: a key's aggregate starts as ``initializer()`` and each
        input's aggregator folds that input's records in, in the order the task takes them
        (timestamp order across the inputs). An update carries the largest timestamp
        aggregated so far and emits on change (KIP-557), as :meth:`GroupedStream.aggregate`.

        ``name`` names the processors (Kafka Streams' ``Named``): ``<name>-cogroup-agg-<i>``
        and ``<name>-cogroup-merge``; ``store_name`` the key-value store
        (``Materialized.as``), else ``COGROUPKSTREAM-AGGREGATE-STATE-STORE-<n>``."""
        graph = self._builder._graph
        store = store_name or graph.name(f"{_AGGREGATE}-STATE-STORE")
        spec = StoreSpec(name=store, kind="key_value", cached=True)

        def make(store: str, ks: Serde[Any], vs: Serde[Any], aggregator: Aggregator) -> p.Processor:
            return p.TableAggregateProcessor(
                store, ks, vs, initializer=initializer, aggregator=aggregator
            )

        node, ks, vs = self._build(store, spec, "key_value", value_serde, name, make)
        return Table(self._builder, node, ks, vs, store_name=store, store_value_serde=vs)

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedCogroupedStream[K, A]: ...

    @overload
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows
    ) -> TimeWindowedCogroupedStream[K, A]: ...

    def windowed_by(
        self, windows: SessionWindows | TimeWindows | SlidingWindows
    ) -> SessionWindowedCogroupedStream[K, A] | TimeWindowedCogroupedStream[K, A]:
        """Windowed cogrouped aggregations: session windows
        (:class:`SessionWindowedCogroupedStream`), time or sliding windows
        (:class:`TimeWindowedCogroupedStream`)."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedStream(self, windows)
        return TimeWindowedCogroupedStream(self, windows)

    def _build(  # noqa: PLR0917 - one cogrouped aggregation's parts
        self,
        store: str,
        spec: StoreSpec,
        kind: Literal["key_value", "session", "window"],
        value_serde: Serde[Any] | None,
        name: str | None,
        make: MakeProcessor,
    ) -> tuple[Node, Serde[Any], Serde[Any]]:
        """Kafka Streams' ``CogroupedStreamAggregateBuilder.build``: an aggregation node per
        input (the first owns the store, the others use it), then the merge. The key serde is
        the first input's."""
        builder = self._builder
        graph = builder._graph
        ks = self._groups[0][0].key_serde
        vs: Serde[Any] = value_serde or builder.default_value_serde
        sks, svs = graph.store_serde(ks, store, "key"), graph.store_serde(vs, store, "value")
        aggregates = []
        for index, (grouped, aggregator) in enumerate(self._groups):

            def factory(aggregator: Aggregator = aggregator) -> p.Processor:
                return make(store, sks, svs, aggregator)

            owns = index == 0
            aggregates.append(
                graph.add(
                    _AGGREGATE,
                    factory,
                    [grouped._stream._node],
                    name=None if name is None else f"{name}-cogroup-agg-{index}",
                    stores=(spec,) if owns else (),
                    uses_stores=() if owns else (store,),
                )
            )
        merge = graph.add(
            _MERGE,
            p.CogroupMergeProcessor,
            aggregates,
            name=None if name is None else f"{name}-cogroup-merge",
        )
        queryable_value = TimestampedValueSerde(svs) if kind == "window" else svs
        graph.add_queryable(QueryableStore(store, kind, sks, queryable_value))
        return merge, ks, vs


class TimeWindowedCogroupedStream(Generic[K, A]):
    """A cogrouped stream over time windows (tumbling or hopping) or sliding windows (Kafka
    Streams' ``TimeWindowedCogroupedKStream``): each input's records are aggregated into their
    windows as :class:`TimeWindowedStream` aggregates them, every input by its own processor,
    which judges lateness by its own observed stream time (the largest timestamp of its input,
    and of that input's control records), as Kafka Streams' do."""

    def __init__(
        self, cogrouped: CogroupedStream[K, A], windows: TimeWindows | SlidingWindows
    ) -> None:
        self._cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self,
        initializer: Callable[[], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
        store_name: str | None = None,
    ) -> WindowedTable[K, A]:
        """Aggregate per key and window: a window starts from ``initializer()`` and each input's
        aggregator folds that input's records in. Updates are forwarded as they happen (use
        :meth:`WindowedTable.suppress` for final results only). The windows live in one window
        store, kept ``windows.retention_ms`` of stream time, with a changelog; ``name`` and
        ``store_name`` as :meth:`CogroupedStream.aggregate`."""
        cogrouped, windows = self._cogrouped, self.windows
        store = store_name or cogrouped._builder._graph.name(f"{_AGGREGATE}-STATE-STORE")
        spec = StoreSpec(name=store, kind="window", retention_ms=windows.retention_ms, cached=True)

        def make(store: str, ks: Serde[Any], vs: Serde[Any], aggregator: Aggregator) -> p.Processor:
            if isinstance(windows, TimeWindows):
                return p.TimeWindowAggregateProcessor(
                    store, windows, ks, vs, initializer=initializer, aggregator=aggregator
                )
            return p.SlidingWindowAggregateProcessor(
                store, windows, ks, vs, initializer=initializer, aggregator=aggregator
            )

        node, ks, vs = cogrouped._build(store, spec, "window", value_serde, name, make)
        return WindowedTable(cogrouped._builder, node, ks, vs, windows)


class SessionWindowedCogroupedStream(Generic[K, A]):
    """A cogrouped stream over session windows (Kafka Streams'
    ``SessionWindowedCogroupedKStream``): each input's records are aggregated into their key's
    sessions as :class:`SessionWindowedStream` aggregates them, by a processor per input judging
    lateness by its own observed stream time; sessions merged by a record of any input are
    combined with the one ``merger``."""

    def __init__(self, cogrouped: CogroupedStream[K, A], windows: SessionWindows) -> None:
        self._cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self,
        initializer: Callable[[], A],
        merger: Callable[[K, A, A], A],
        *,
        value_serde: Serde[A] | None = None,
        name: str | None = None,
        store_name: str | None = None,
    ) -> WindowedTable[K, A]:
        """Aggregate per key and session; when sessions merge, their aggregates are combined
        with ``merger(key, a, b)``. Merged-away sessions are forwarded as tombstones; one session
        store with a changelog; ``name`` and ``store_name`` as
        :meth:`CogroupedStream.aggregate`."""
        cogrouped, windows = self._cogrouped, self.windows
        store = store_name or cogrouped._builder._graph.name(f"{_AGGREGATE}-STATE-STORE")
        spec = StoreSpec(name=store, kind="session", retention_ms=windows.retention_ms, cached=True)

        def make(store: str, ks: Serde[Any], vs: Serde[Any], aggregator: Aggregator) -> p.Processor:
            return p.SessionAggregateProcessor(
                store,
                windows,
                ks,
                vs,
                initializer=initializer,
                aggregator=aggregator,
                merger=merger,
            )

        node, ks, vs = cogrouped._build(store, spec, "session", value_serde, name, make)
        return WindowedTable(cogrouped._builder, node, ks, vs, windows)

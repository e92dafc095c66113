"""Tables (Kafka Streams' ``KTableImpl``), windowed tables and suppression.

Materialised tables (``StreamsBuilder.table``, grouped aggregations) live in changelog-backed
key-value stores and emit on change (KIP-557): an update with the same serialized value as
stored and a strictly newer timestamp is dropped and counted; see
:func:`streams_runtime.processors.is_idempotent_update`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from streams_runtime import processors as p
from streams_runtime.serdes import Serde, SessionWindowedSerde, TimeWindowedSerde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import Node, ProcessorFactory, TopologyError
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, TimeWindows, WindowSpec

if TYPE_CHECKING:
    from streams_runtime.dsl.builder import StreamsBuilder
    from streams_runtime.dsl.stream import Stream

__all__ = ["Suppressed", "Table", "WindowedTable", "until_window_closes"]

K = TypeVar("K")
V = TypeVar("V")
V2 = TypeVar("V2")

# How a derived table reads a row from the store it derives from: (key, stored value) -> its
# value, None when the row is not in the derived table (filtered out).
ValueGetter = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Suppressed:
    """How a windowed table's updates are held back. Only ``until_window_closes`` (final
    results, unbounded buffer) is supported."""

    until_window_closes: bool = True


def until_window_closes() -> Suppressed:
    """Emit one final result per window: a session once ``end + gap + grace <= stream time``,
    a time or sliding window once ``end + grace <= stream time``."""
    return Suppressed(until_window_closes=True)


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
        closed. Control records count as time passing, so results come out on idle inputs."""
        if not suppressed.until_window_closes:
            raise TopologyError("only until_window_closes() suppression is supported")
        store = name or self._builder._graph.name("KTABLE-SUPPRESS-STATE-STORE")
        ks, vs, windows = self.key_serde, self.value_serde, self.windows
        node = self._builder._graph.add(
            "KTABLE-SUPPRESS",
            lambda: p.SuppressProcessor(store, windows, ks, vs),
            [self._node],
            stores=(StoreSpec(name=store, kind="key_value"),),
        )
        return WindowedTable(self._builder, node, ks, vs, windows)

    def to_stream(self) -> Stream[Windowed[K], V]:
        """The updates as a stream keyed by :class:`Windowed` (serialized with
        :class:`SessionWindowedSerde` for sessions, :class:`TimeWindowedSerde` for time and
        sliding windows, unless mapped)."""
        from streams_runtime.dsl.stream import Stream  # a stream view sits above a table view

        windows = self.windows
        key_serde: Serde[Any]
        if isinstance(windows, SessionWindows):
            key_serde = SessionWindowedSerde(self.key_serde)
        elif isinstance(windows, TimeWindows):
            key_serde = TimeWindowedSerde(self.key_serde, windows.size_ms)
        else:
            key_serde = TimeWindowedSerde(self.key_serde, windows.time_difference_ms)
        return Stream(self._builder, self._node, key_serde, self.value_serde)


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

        node = self._builder._graph.add(kind, factory, [self._node])
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
        from streams_runtime.dsl.stream import Stream  # a stream view sits above a table view

        return Stream(self._builder, self._node, self.key_serde, self.value_serde)

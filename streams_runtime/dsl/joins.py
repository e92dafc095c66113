"""Joins of a stream (Kafka Streams' ``KStreamImpl.doJoin``, ``doStreamTableJoin`` and
``globalTableJoin``): windowed stream-stream joins (``KStreamKStreamJoin``), stream-table joins
(``KStreamKTableJoin``) and stream-global table joins (``KStreamGlobalKTableJoin``), as
:meth:`Stream.join <streams_runtime.dsl.stream.Stream.join>`, ``left_join`` and ``outer_join``
build them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams_runtime import processors as p
from streams_runtime.dsl.global_table import GlobalTable
from streams_runtime.operations import StepOnValues
from streams_runtime.processors.global_joins import GlobalTableJoinProcessor
from streams_runtime.serdes import Serde
from streams_runtime.state import StoreSpec
from streams_runtime.windows import JoinWindows

if TYPE_CHECKING:
    from streams_runtime.dsl.stream import Stream
    from streams_runtime.dsl.table import Table

__all__ = ["checked_windows", "global_table_join", "table_join", "window_join"]


def window_join(
    left: Stream[Any, Any],
    other: Table[Any, Any] | Stream[Any, Any],
    joiner: Callable[[Any, Any], Any],
    windows: JoinWindows,
    kind: str,
    *,
    value_serde: Serde[Any] | None,
) -> Stream[Any, Any]:
    """``left`` joined with the stream ``other`` within ``windows`` (Kafka Streams'
    ``KStreamImpl.doJoin``; ``kind``: inner, left or outer), each repartitioned first when its
    key changed."""
    from streams_runtime.dsl.stream import Stream  # a stream view sits above the joins

    if not isinstance(other, Stream):
        raise TypeError("JoinWindows join two streams; join a table without them")
    this: Stream[Any, Any] = left.repartition() if left._key_changed else left
    that: Stream[Any, Any] = other.repartition() if other._key_changed else other
    graph, default = left._builder._graph, left._builder
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
    return Stream(left._builder, node, this.key_serde, value_serde)


def table_join(
    source: Stream[Any, Any],
    table: Table[Any, Any],
    joiner: Callable[[Any, Any], Any],
    *,
    left: bool,
    value_serde: Serde[Any] | None,
) -> Stream[Any, Any]:
    """``source`` joined with ``table`` (Kafka Streams' ``KStreamKTableJoin``), repartitioned
    first when its key changed; a derived table is read through the store it derives from."""
    from streams_runtime.dsl.stream import Stream  # a stream view sits above the joins

    stream: Stream[Any, Any] = source.repartition() if source._key_changed else source
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
        operation=StepOnValues("table_join"),
    )
    return Stream(source._builder, node, stream.key_serde, value_serde)


def global_table_join(
    source: Stream[Any, Any],
    table: GlobalTable[Any, Any],
    key_mapper: Callable[[Any, Any], Any],
    joiner: Callable[[Any, Any], Any] | JoinWindows | None,
    *,
    left: bool,
    value_serde: Serde[Any] | None,
) -> Stream[Any, Any]:
    """``source`` joined with the global table ``table`` on ``key_mapper(key, value)`` (Kafka
    Streams' ``KStreamGlobalKTableJoin``): no repartition, the table being whole on every
    instance; the result keeps the stream's key (``KSTREAM-JOIN-<n>``, ``KSTREAM-LEFTJOIN-<n>``
    for a left join, as Kafka Streams names them)."""
    from streams_runtime.dsl.stream import Stream  # a stream view sits above the joins

    if not callable(key_mapper) or not callable(joiner):
        raise TypeError(
            "a stream-global table join takes a key mapper and a joiner: "
            "stream.join(global_table, lambda key, value: table_key, joiner)"
        )
    value_joiner = joiner
    spec = table._store
    node = source._builder._graph.add(
        "KSTREAM-LEFTJOIN" if left else "KSTREAM-JOIN",
        lambda: GlobalTableJoinProcessor(
            spec.name, spec.key_serde, spec.value_serde, key_mapper, value_joiner, left=left
        ),
        [source._node],
    )
    return Stream(
        source._builder, node, source.key_serde, value_serde, key_changed=source._key_changed
    )


def checked_windows(windows: object) -> JoinWindows:
    """A stream-stream join's third argument, checked: a key mapper and a joiner join a global
    table only."""
    if not isinstance(windows, JoinWindows):
        raise TypeError(
            f"a join's third argument is its JoinWindows, got {type(windows).__name__} "
            "(a key mapper and a joiner join a GlobalTable)"
        )
    return windows

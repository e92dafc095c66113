"""Whether a table sends old values is decided when the topology is built, as Kafka Streams'
``KTableImpl.enableSendingOldValues`` decides it, and decides which deletes a filter forwards;
without a broker: the processors of a built topology, run on in-memory stores."""

from __future__ import annotations

from streams_runtime import StreamsBuilder, Table
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import String
from tests.streams_runtime.processors.memory_context import MemoryContext

Update = tuple[str, str | None, int]

# A key whose only values are rejected (the table drops x@200, emit-on-change, but not the
# older x@150), then one starting rejected, moving in and out, and deleted twice.
UPDATES: list[Update] = [
    ("k0", "x", 100),
    ("k0", "x", 200),
    ("k0", "x", 150),
    ("k1", "x", 1_399),
    ("k1", "b", 1_349),
    ("k1", None, 1_500),
    ("k1", None, 1_600),
]


class _Context(MemoryContext):
    """Also takes what sinks send (a repartition topic), and leaves it there."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition_key: bytes | None = None,
        partition: int = -1,
    ) -> None:
        self.sent.append((topic, key, value, timestamp))


def _table(builder: StreamsBuilder, *, named: bool = False) -> Table[str, str]:
    return builder.table(
        "in", key_serde=String(), value_serde=String(), store_name="in-store" if named else None
    )


def _not_x(_key: str, value: str) -> bool:
    return value != "x"


def _collect(table: Table[str, str]) -> list[Update]:
    seen: list[Update] = []
    table.to_stream().foreach(lambda k, v: seen.append((k, v, -1)))
    return seen


def _run(builder: StreamsBuilder, updates: list[Update]) -> _Context:
    """Run ``updates`` through the sub-topology reading ``in``."""
    topology = builder.build("app")
    sub = topology.subtopology_of("in")
    sources, processors = sub.instantiate()
    context = _Context()
    for processor in processors:
        processor.init(context)
    for key, value, ts in updates:
        sources["in"].forward(Record(key, value, ts))
    return context


def _deletes(seen: list[Update]) -> list[str]:
    return [k for k, v, _ts in seen if v is None]


def test_a_filter_over_an_unnamed_table_forwards_a_delete_for_every_rejected_update() -> None:
    builder = StreamsBuilder()
    seen = _collect(_table(builder).filter(_not_x))
    _run(builder, UPDATES)
    assert _deletes(seen) == ["k0", "k0", "k1", "k1", "k1"]


def test_a_filter_over_a_queryable_table_forwards_only_deletes_of_its_rows() -> None:
    builder = StreamsBuilder()
    seen = _collect(_table(builder, named=True).filter(_not_x))
    _run(builder, UPDATES)
    assert _deletes(seen) == ["k1"]


def test_a_group_by_added_later_reaches_the_filter_made_before() -> None:
    builder = StreamsBuilder()
    filtered = _table(builder).filter(_not_x)
    seen = _collect(filtered)  # the filter's processor factory is already in the graph
    filtered.group_by(lambda k, v: (v, k)).count()
    context = _run(builder, UPDATES)
    assert _deletes(seen) == ["k1"]
    # The repartition topic carries b's arrival, then its departure (old value, flag 0).
    assert [(k, v) for _t, k, v, _ts in context.sent] == [(b'"b"', b"k1\x01")] * 1 + [
        (b'"b"', b"k1\x00")
    ]
    topics = {t for t, _k, _v, _ts in context.sent}
    assert len(topics) == 1
    [topic] = topics
    assert topic.startswith("app-KTABLE-AGGREGATE-STATE-STORE-")
    assert topic.endswith("-repartition")


def test_a_filter_asks_upstream_when_it_is_made() -> None:
    # Kafka Streams' KTableFilter asks its parent in its constructor: a group_by that
    # materialised the source table before the filter was made gives it old values; one
    # made after reaches only its own filter.
    builder = StreamsBuilder()
    table = _table(builder)
    before = _collect(table.filter(_not_x))
    table.filter(_not_x).group_by(lambda k, v: (v, k)).count()
    after = _collect(table.filter(_not_x))
    _run(builder, UPDATES)
    assert _deletes(before) == ["k0", "k0", "k1", "k1", "k1"]
    assert _deletes(after) == ["k1"]


def test_a_join_materialises_an_unnamed_table() -> None:
    builder = StreamsBuilder()
    table = _table(builder)
    builder.stream("orders").join(table, lambda o, r: (o, r)).foreach(lambda k, v: None)
    seen = _collect(table.filter(_not_x))
    _run(builder, UPDATES)
    assert _deletes(seen) == ["k1"]


def test_a_materialised_filter_keeps_its_rows_and_is_queryable() -> None:
    builder = StreamsBuilder()
    filtered = _table(builder).filter(_not_x, store_name="kept")
    seen = _collect(filtered)
    context = _run(builder, UPDATES)
    # Over an unnamed table it sends no old values either: a delete per rejected update.
    assert _deletes(seen) == ["k0", "k0", "k1", "k1", "k1"]
    assert filtered.store_name == "kept"
    assert "kept" in builder.build("app2").queryable_stores
    assert context.kv_store("kept").get(b"k1") is None
    assert sorted(s.name for s in builder.build("app3").subtopology_of("in").stores) == [
        "KTABLE-SOURCE-STORE-0000000001",
        "kept",
    ]


def test_map_values_sends_old_values_only_when_asked() -> None:
    builder = StreamsBuilder()
    mapped = _table(builder).map_values(str.upper, value_serde=String())
    seen = _collect(mapped.filter(lambda _k, v: v != "X"))
    # A filter under group_by asks through map_values up to the source table: the group_by
    # sees "B" leave when "C" comes. The first filter was made before: it sends none.
    mapped.filter(lambda _k, v: v != "X").group_by(lambda k, v: (v, k)).count()
    context = _run(builder, [("k1", "b", 1), ("k1", "c", 2), ("k1", "x", 3), ("k1", "x", 3)])
    assert [v for _t, _k, v, _ts in context.sent] == [
        b"k1\x01",
        b"k1\x00",
        b"k1\x01",
        b"k1\x00",
    ]
    assert _deletes(seen) == ["k1", "k1"]


def test_a_materialised_filter_reads_old_values_from_its_own_store_once_asked() -> None:
    # Kafka Streams' KTableFilter with a queryable name answers a request itself: the unnamed
    # source table is not asked, and the filter takes old values from its own store.
    builder = StreamsBuilder()
    filtered = _table(builder).filter(_not_x, store_name="kept")
    seen = _collect(filtered)
    filtered.group_by(lambda k, v: (v, k)).count()
    context = _run(builder, UPDATES)
    assert _deletes(seen) == ["k1"]
    assert [(k, v) for _t, k, v, _ts in context.sent] == [(b'"b"', b"k1\x01"), (b'"b"', b"k1\x00")]

"""Context-aware serdes (streams_runtime.serde_context): which topic, field and headers each use
is given (sources and sinks: their topic and the record's headers; stores: their changelog,
no headers), in pure logic and through an app against the real broker; plain serdes keep
their one-argument path."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from progress_control.protocol import is_control_record
from streams_runtime import (
    App,
    JoinWindows,
    SessionWindows,
    StreamsBuilder,
    TopologyError,
    until_window_closes,
)
from streams_runtime.processors import (
    SinkProcessor,
    SourceProcessor,
    StreamStreamJoinProcessor,
    StreamTableJoinProcessor,
    SuppressProcessor,
)
from streams_runtime.record import SourceRecord
from streams_runtime.serde_context import (
    BoundSerde,
    ContextualSerde,
    SerdeContext,
    UnboundSerdeError,
    bind,
    is_contextual,
    is_registry_framed,
)
from streams_runtime.serdes import (
    ChangedSerde,
    Integer,
    Json,
    SerializationError,
    SessionWindowedSerde,
    String,
)
from streams_runtime.windowed import Windowed
from tests.helpers import TopicReader, unique_name, wait_for

Seen = tuple[str, str, str, tuple[tuple[str, bytes | None], ...] | None]


class Recording(ContextualSerde[Any]):
    """JSON that remembers every context it is given (what, topic, field, headers) and, when
    writing where there are headers, adds ``written-for: <topic>/<field>``."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def _note(self, what: str, context: SerdeContext) -> None:
        headers = None if context.headers is None else tuple(context.headers)
        with self._lock:
            self.seen.append((what, context.topic, context.field, headers))

    def serialize_with(self, value: Any, context: SerdeContext) -> bytes | None:
        self._note("write", context)
        if value is None:
            return None
        if context.headers is not None:
            context.headers.append(("written-for", f"{context.topic}/{context.field}".encode()))
        return json.dumps(value).encode()

    def deserialize_with(self, data: bytes | None, context: SerdeContext) -> Any:
        self._note("read", context)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise SerializationError(str(exc)) from exc

    def topics(self, what: str, field: str = "value") -> set[tuple[str, bool]]:
        """(topic, had headers) of every ``what`` of ``field`` seen."""
        with self._lock:
            return {(t, h is not None) for w, t, f, h in self.seen if w == what and f == field}


# -- pure logic ---------------------------------------------------------------------------------


def test_unbound_it_says_so_and_bound_it_is_a_plain_serde() -> None:
    serde = Recording()
    with pytest.raises(UnboundSerdeError, match="bind it first"):
        serde.serialize({"a": 1})
    with pytest.raises(UnboundSerdeError):
        serde.deserialize(b"{}")
    bound = serde.bind("orders", "value")
    assert bound.deserialize(bound.serialize({"a": 1})) == {"a": 1}
    assert bound.serialize(None) is None
    headers: list[tuple[str, bytes | None]] = [("h", b"1")]
    bound.serialize(2, headers)
    assert headers == [("h", b"1"), ("written-for", b"orders/value")]
    assert serde.seen[:2] == [
        ("write", "orders", "value", None),
        ("read", "orders", "value", None),
    ]


def test_binding_reaches_through_the_runtimes_wrappers() -> None:
    serde = Recording()
    windowed = SessionWindowedSerde(serde)
    assert is_contextual(windowed)
    assert is_contextual(ChangedSerde(serde.bind("t", "value")))
    assert not is_contextual(SessionWindowedSerde(String()))
    bound = bind(windowed, SerdeContext("out", "key"))
    assert bound is not windowed
    assert isinstance(bound, SessionWindowedSerde)
    assert isinstance(bound.inner, BoundSerde)
    assert bound.deserialize(bound.serialize(Windowed("k", 1, 2))) == Windowed("k", 1, 2)
    assert {topic for _, topic, _, _ in serde.seen} == {"out"}
    plain = Json()
    assert bind(plain, SerdeContext("out", "key")) is plain  # plain serdes stay as they are


def _processors(builder: StreamsBuilder, application_id: str) -> list[Any]:
    topology = builder.build(application_id)
    return [p for sub in topology.subtopologies for p in sub.instantiate()[1]]


def test_stores_bind_to_their_changelog_and_plain_serdes_are_left_alone() -> None:
    serde = Recording()
    plain_key, plain_value = String(), Json()
    builder = StreamsBuilder(default_key_serde=plain_key, default_value_serde=plain_value)
    builder.stream("in").group_by_key().aggregate(
        lambda: 0, lambda _k, _v, n: n + 1, value_serde=serde, name="totals"
    ).to_stream().to("out")
    builder.stream("plain").group_by_key().count(name="plain-counts")
    processors = _processors(builder, "app")
    aggregate = next(p for p in processors if getattr(p, "_store_name", None) == "totals")
    assert aggregate._key_serde is plain_key  # a plain serde is passed as it is
    bound = aggregate._value_serde
    assert isinstance(bound, BoundSerde)
    assert (bound.topic, bound.field) == ("app-totals-changelog", "value")
    counting = next(p for p in processors if getattr(p, "_store_name", None) == "plain-counts")
    assert type(counting._value_serde) is Integer
    # The sink's value serde is the one the table was made with, unbound: it binds per record.
    sink = next(p for p in processors if isinstance(p, SinkProcessor))
    assert sink._value_serde is serde
    # The store's binding names this application's changelog: one application id only.
    builder.build("app")
    with pytest.raises(TopologyError, match="one application id"):
        builder.build("another-app")


def test_joins_and_suppressions_bind_to_the_stores_they_read_and_write() -> None:
    serde = Recording()
    builder = StreamsBuilder(default_key_serde=serde, default_value_serde=serde)
    table = builder.table("rows", store_name="rows-store")
    left, right = builder.stream("left"), builder.stream("right")
    left.join(table, lambda a, b: [a, b]).to("joined-with-table")
    left.join(right, lambda a, b: [a, b], JoinWindows.of_time_difference(1000)).to("joined")
    left.group_by_key().windowed_by(SessionWindows(gap_ms=10)).count(name="sessions").suppress(
        until_window_closes(), name="final"
    )
    processors = _processors(builder, "app")

    def topic(serde: Any) -> str | None:
        return serde.topic if isinstance(serde, BoundSerde) else None

    lookup = next(p for p in processors if isinstance(p, StreamTableJoinProcessor))
    assert topic(lookup._key_serde) == "app-rows-store-changelog"  # the table's key bytes
    assert topic(lookup._table_value_serde) == "app-rows-store-changelog"
    sides = [p for p in processors if isinstance(p, StreamStreamJoinProcessor)]
    for side in sides:  # each side's key and values bound to the buffer they live in
        assert topic(side._key_serde) == f"app-{side._this_store_name}-changelog"
        left_values, right_values = side._value_serdes[1], side._value_serdes[0]
        left_store = sides[0]._this_store_name
        assert topic(left_values) == f"app-{left_store}-changelog"
        assert topic(right_values) == f"app-{sides[1]._this_store_name}-changelog"
    suppress = next(p for p in processors if isinstance(p, SuppressProcessor))
    assert topic(suppress._key_serde) == "app-final-changelog"
    assert type(suppress._value_serde) is Integer  # a count's: plain, passed as it is


def test_plain_sources_keep_their_path_and_contextual_ones_get_topic_and_headers() -> None:
    plain = SourceProcessor(String(), Json())
    assert not plain.contextual
    assert "deserialize" not in vars(plain)  # the class's own method, no indirection
    serde = Recording()
    source = SourceProcessor(String(), serde)
    record = SourceRecord("in", 0, 7, 1, b"k", b'{"a": 1}', [("trace", b"t")])
    parsed = source.deserialize(record)
    assert (parsed.key, parsed.value, parsed.headers) == ("k", {"a": 1}, [("trace", b"t")])
    assert serde.seen == [("read", "in", "value", (("trace", b"t"),))]


# -- against the broker -------------------------------------------------------------------------


def _data(reader: TopicReader) -> list[Any]:
    return [m for m in reader.read() if not is_control_record(m)]


def _at_least(reader: TopicReader, n: int) -> list[Any] | None:
    """The data records read so far, once there are ``n``."""
    data = _data(reader)
    return data if len(data) >= n else None


@pytest.mark.broker
def test_each_use_gets_its_topic_and_sinks_send_what_serdes_add_to_headers(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("ctx-in", partitions=2), create_topic("ctx-out")
    serde = Recording()
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=serde)
    (
        builder.stream(source)
        .select_key(lambda _k, v: v["user"])
        .repartition(name="by-user")
        .group_by_key()
        .aggregate(lambda: {"n": 0}, lambda _k, _v, agg: {"n": agg["n"] + 1}, name="totals")
        .to_stream()
        .to(sink)
    )
    app_id = unique_name("ctx")
    run_app(builder, application_id=app_id)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(6):
        value = json.dumps({"user": f"u{n % 2}"}).encode()
        producer.produce(source, key=f"k{n}", value=value, headers=[("trace", b"t")])
    producer.flush(10)
    output = reader_for(sink, 1)
    finals = wait_for(lambda: _at_least(output, 6))
    assert {json.loads(m.value())["n"] for m in finals} >= {3}
    headers = dict(finals[-1].headers() or [])
    assert headers["trace"] == b"t"  # the record's own, kept
    assert headers["written-for"] == f"{sink}/value".encode()  # what the sink's serde added

    repartition = f"{app_id}-by-user-repartition"
    changelog = f"{app_id}-totals-changelog"
    assert serde.topics("read") == {(source, True), (repartition, True), (changelog, False)}
    assert serde.topics("write") == {(repartition, True), (changelog, False), (sink, True)}
    assert not serde.topics("read", "key")  # keys are String's, never the recording serde's


@pytest.mark.broker
@pytest.mark.parametrize("native_core", [True, False], ids=["fused", "chain"])
def test_a_fused_sessionization_gives_its_source_serde_topic_and_headers(
    native_core: bool,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("ctx-clicks"), create_topic("ctx-sessions")
    serde = Recording()
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=serde)
    (
        builder.stream(source)
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=1000))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.start}", n))
        .to(sink, key_serde=String(), value_serde=Integer())
    )
    app = run_app(builder, native_core=native_core, bad_record_policy="log-and-skip")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    base = 1_700_000_000_000
    for n, (key, offset) in enumerate([("a", 0), ("a", 500), ("b", 600), ("a", 5000)]):
        value = json.dumps({"n": n}).encode()
        producer.produce(source, key=key, value=value, timestamp=base + offset, headers={"h": b""})
    producer.produce(source, key="a", value=b"not json", timestamp=base + 5100, headers={"h": b""})
    # Closes both of a's sessions and b@600.
    producer.produce(source, key="b", value=b"{}", timestamp=base + 9000, headers={"h": b""})
    producer.flush(10)
    output = reader_for(sink, 1)
    finals = wait_for(lambda: _at_least(output, 3))
    assert {(m.key(), Integer().deserialize(m.value())) for m in finals} == {
        (f"a@{base}".encode(), 2),
        (f"b@{base + 600}".encode(), 1),
        (f"a@{base + 5000}".encode(), 1),  # the bad record at 5100 skipped
    }
    assert serde.topics("read") == {(source, True)}
    assert app.metrics.total("streams_bad_records", reason="deserialization") == 1
    thread = app._thread
    assert thread is not None
    fused = [task._batch_source for task in thread.tasks.values()]
    assert all((f is not None) == native_core for f in fused)


class Framed(Recording):
    """A contextual serde that says it writes Schema Registry framing."""

    registry_framed = True


def test_registry_framed_keys_give_their_sink_topics_null_key_ticks() -> None:
    assert is_registry_framed(Framed())
    assert is_registry_framed(SessionWindowedSerde(Framed().bind("t", "key")))
    assert not is_registry_framed(Recording())
    assert not is_registry_framed(String())
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    stream = builder.stream("in")
    stream.to("framed-keys", key_serde=Framed())
    stream.to("framed-values", value_serde=Framed())
    stream.repartition(name="by-key", key_serde=Framed()).to("out", key_serde=String())
    topology = builder.build("app")
    tick_topics = {t for sub in topology.subtopologies for t in sub.null_key_tick_topics}
    assert tick_topics == {"framed-keys", "app-by-key-repartition"}

"""The conformance topologies in ``streams_runtime``: each is the twin of the case of the same
name in ``kstreams/src/main/java/kpc/conformance/ConformanceApp.java``; keep them identical.

Keys and values are strings (Kafka's ``StringSerde``); counts and the aggregate of
``table-aggregate`` are longs (:class:`Integer`); session-windowed keys use the session-windowed
serde, time- and sliding-windowed keys the time-windowed one. Time and sliding windows take their
parameters from the seed's session windows: size (time difference) = gap, hopping advance =
gap / 2, same grace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from streams_runtime import (
    Branched,
    BufferConfig,
    JoinWindows,
    Record,
    SessionWindows,
    SlidingWindows,
    Stream,
    StreamsBuilder,
    Table,
    TimeWindows,
    until_time_limit,
    until_window_closes,
)
from streams_runtime.processor import (
    Processor,
    ProcessorContext,
    Progress,
    PunctuationType,
    Stores,
    TypedKeyValueStore,
)
from streams_runtime.serdes import Integer, String

__all__ = [
    "CASES",
    "JOIN_CASES",
    "WALL_CLOCK_INTERVAL_MS",
    "Case",
    "build_runtime_case",
    "foreign_key",
    "join_windows",
]

STRING = String()
LONG = Integer()

WALL_CLOCK_INTERVAL_MS = 1_000
"""How often the ``wall-clock-punctuated`` case's punctuator fires, in wall-clock time."""


@dataclass(frozen=True)
class Case:
    """One topology: its input and output roles, and how its outputs are compared."""

    name: str
    inputs: tuple[str, ...] = ("in",)
    outputs: tuple[str, ...] = ("out",)
    windowed: bool = False  # output keys are windowed
    window_bytes: int = 16  # a windowed key's window suffix: session 16 (end, start), time 8
    table_output: str | None = None
    """The output carrying the materialised table's updates one for one (emit-on-change applies
    there); every other output of the case derives its records from them (one each, or none:
    a filter that sends old values forwards nothing for a row absent before and after)."""
    sessions: bool = False  # inputs are generated for session windows (gap and grace apply)
    timing_ordered: bool = False
    """Its results cross topics between tasks (a foreign-key join): on a broker their order
    depends on which task runs first, so only each key's final value is compared there."""
    punctuated: bool = False
    """Its values ``p=...`` come from a stream-time punctuator, ``w=...`` from a wall-clock one:
    Kafka Streams' driver fires the first after each record, as the runtime does, but its
    stream threads only after a batch of records, and wall clocks on a broker are real, so on a
    broker only the other values are compared."""
    global_inputs: tuple[str, ...] = ()
    """Inputs read as global tables: no consumer group commits their offsets."""
    unjoined: bool = False
    """Left and outer join results missing a side (``x|null``, ``null|x``) come out at scans,
    which the runtime also makes at ticks (Kafka Streams only at in-order data records, with
    their headers): per key they are compared as a multiset without headers, the joined ones in
    offset order."""


JOIN_CASES = ("stream-stream-join", "stream-stream-join-reversed", "stream-stream-join-symmetric")
"""Windowed stream-stream joins, one per shape of their windows (:func:`join_windows`)."""

# Time and sliding windows: keys carry only the window start (8 bytes).
_TIME_WINDOW_CASES = tuple(
    Case(name, windowed=True, window_bytes=8, sessions=True)
    for name in (
        "tumbling-count",
        "tumbling-count-suppressed",
        "hopping-aggregate",
        "hopping-aggregate-suppressed",
        "sliding-count",
        "sliding-count-suppressed",
    )
)

# The operators of issue 51: flat maps, split, group_by, to_table, suppression until a time
# limit, and cogroup (windowed keys: tumbling 8 bytes, sessions 16).
_OPERATOR_CASES = (
    Case("flat-map-split", outputs=("out", "out2", "out3")),
    Case("group-by-count", outputs=("out", "out2")),
    Case("to-table-suppress", outputs=("out", "out2"), table_output="out2"),
    Case("cogroup", inputs=("in", "in2"), outputs=("out", "out2")),
    Case(
        "cogroup-tumbling",
        inputs=("in", "in2"),
        outputs=("out", "out2"),
        windowed=True,
        window_bytes=8,
        sessions=True,
    ),
    Case("cogroup-session", inputs=("in", "in2"), outputs=("out", "out2"), windowed=True),
)

# Table-table joins (issue 51): on the key, and on a foreign key.
_TABLE_JOIN_CASES = (
    Case("table-table-join", inputs=("in", "in2"), outputs=("out", "out2", "out3", "out4")),
    Case("fk-join", inputs=("in", "in2"), outputs=("out", "out2", "out3"), timing_ordered=True),
)

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("session-count", windowed=True, sessions=True),
        Case("session-count-suppressed", windowed=True, sessions=True),
        Case("session-aggregate", windowed=True, sessions=True),
        Case("session-aggregate-suppressed", windowed=True, sessions=True),
        Case("merge-session-count", inputs=("in", "in2"), windowed=True, sessions=True),
        Case("punctuated-count", sessions=True, punctuated=True),
        Case("wall-clock-punctuated", sessions=True, punctuated=True),
        Case(
            "stream-global-join",
            inputs=("in", "in2"),
            outputs=("out", "out2"),
            global_inputs=("in2",),
        ),
        Case("table-count", table_output="out"),
        Case("table-reduce", table_output="out"),
        Case("table-aggregate", table_output="out"),
        Case("table-source", outputs=("out", "out2"), table_output="out"),
        Case("table-filter", outputs=("out", "out2", "out3", "out4"), table_output="out"),
        Case("stream-table-join", inputs=("in", "in2"), outputs=("out", "out2", "out3")),
        *(
            Case(name, inputs=("in", "in2"), outputs=("out", "out2", "out3"), unjoined=True)
            for name in JOIN_CASES
        ),
        Case("repartition-count", table_output="out"),
        *_TABLE_JOIN_CASES,
        *_OPERATOR_CASES,
        *_TIME_WINDOW_CASES,
    )
}


def _string_stream(builder: StreamsBuilder, topic: str) -> Stream[str, str]:
    return builder.stream(topic, key_serde=STRING, value_serde=STRING)


def _max(aggregate: str, value: str) -> str:
    return str(max(int(aggregate), int(value)))


def _text(value: object) -> str:
    """Java's string conversion of a value in a concatenation (``null`` for ``None``)."""
    return "null" if value is None else str(value)


def _join(value: str | None, row: str | None) -> str:
    return f"{_text(value)}|{_text(row)}"


def build_runtime_case(
    builder: StreamsBuilder,
    case: str,
    topics: dict[str, str],
    windows: SessionWindows,
) -> None:
    """Add the topology ``case`` to ``builder``, reading and writing ``topics`` (role -> name)."""
    build: Callable[[StreamsBuilder, dict[str, str], SessionWindows], None] = _BUILDERS[case]
    build(builder, topics, windows)


def _session_count(b: StreamsBuilder, t: dict[str, str], w: SessionWindows, final: bool) -> None:
    counts = _string_stream(b, t["in"]).group_by_key().windowed_by(w).count()
    if final:
        counts = counts.suppress(until_window_closes())
    counts.to_stream().to(t["out"], value_serde=LONG)


def _session_aggregate(
    b: StreamsBuilder, t: dict[str, str], w: SessionWindows, final: bool
) -> None:
    joined = (
        _string_stream(b, t["in"])
        .group_by_key()
        .windowed_by(w)
        .aggregate(
            lambda: "",
            lambda _key, value, aggregate: f"{aggregate}[{_text(value)}]",
            lambda _key, left, right: left + right,
            value_serde=STRING,
        )
    )
    if final:
        joined = joined.suppress(until_window_closes())
    joined.to_stream().to(t["out"])


def _merge_session_count(b: StreamsBuilder, t: dict[str, str], w: SessionWindows) -> None:
    merged = _string_stream(b, t["in"]).merge(_string_stream(b, t["in2"]))
    (
        merged.group_by_key()
        .windowed_by(w)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .to(t["out"], value_serde=LONG)
    )


def _table_count(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    _string_stream(b, t["in"]).group_by_key().count().to_stream().to(t["out"])


def _table_reduce(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    _string_stream(b, t["in"]).group_by_key().reduce(_max).to_stream().to(t["out"])


def _table_aggregate(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    (
        _string_stream(b, t["in"])
        .group_by_key()
        .aggregate(lambda: 0, lambda _k, value, total: (total + int(value)) % 4, value_serde=LONG)
        .to_stream()
        .to(t["out"])
    )


def _string_table(b: StreamsBuilder, topic: str, store: str) -> Table[str, str]:
    return b.table(topic, key_serde=STRING, value_serde=STRING, store_name=store)


def _table_source(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    table = _string_table(b, t["in"], f"{t['out']}-store")
    table.to_stream().to(t["out"])
    (
        table.filter(lambda _k, value: int(value) % 3 != 0)
        .map_values(lambda value: value + "!", value_serde=STRING)
        .to_stream()
        .to(t["out2"])
    )


def _not_x(_key: str, value: str) -> bool:
    return value != "x"


def _table_filter(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """A source table without a store name: the table, a plain filter (a delete for every
    rejected update), a materialised one, and one regrouped by value and counted (which makes
    its filter send old values). In this order, as Kafka Streams decides at each step."""
    table = b.table(t["in"], key_serde=STRING, value_serde=STRING)
    table.to_stream().to(t["out"])
    table.filter(_not_x).to_stream().to(t["out2"])
    table.filter(_not_x, store_name=f"{t['out3']}-store").to_stream().to(t["out3"])
    (
        table.filter(_not_x)
        .group_by(lambda key, value: (value, key), key_serde=STRING, value_serde=STRING)
        .count()
        .to_stream()
        .to(t["out4"], value_serde=LONG)
    )


def _stream_table_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    table = _string_table(b, t["in2"], f"{t['out']}-store")
    stream = _string_stream(b, t["in"])
    stream.join(table, _join, value_serde=STRING).to(t["out"])
    stream.left_join(table, _join, value_serde=STRING).to(t["out2"])
    divisible = table.filter(lambda _k, row: int(row) % 3 != 0)
    stream.join(divisible, _join, value_serde=STRING).to(t["out3"])


def join_windows(case: str, w: SessionWindows) -> JoinWindows:
    """The join windows of a stream-stream join case, from the seed's session windows, same
    grace: ``stream-stream-join`` before = gap / 2, after = gap (with grace 2000 the ``before``
    bound, 1500 with gap 3000, lies within grace, so records on it can arrive out of order and
    still join); ``-reversed`` before = gap, after = gap / 2; ``-symmetric`` gap / 2 both ways."""
    half = JoinWindows.of_time_difference(w.gap_ms // 2, w.grace_ms)
    if case == "stream-stream-join":
        return half.after(w.gap_ms)
    if case == "stream-stream-join-reversed":
        return JoinWindows.of_time_difference(w.gap_ms, w.grace_ms).after(w.gap_ms // 2)
    return half


def _stream_stream_join(b: StreamsBuilder, t: dict[str, str], windows: JoinWindows) -> None:
    """Inner, left and outer windowed joins."""
    left, right = _string_stream(b, t["in"]), _string_stream(b, t["in2"])

    def pair(a: str | None, b: str | None) -> str:
        return f"{_text(a)}|{_text(b)}"

    left.join(right, pair, windows, value_serde=STRING).to(t["out"])
    left.left_join(right, pair, windows, value_serde=STRING).to(t["out2"])
    left.outer_join(right, pair, windows, value_serde=STRING).to(t["out3"])


def _repartition_count(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    (
        _string_stream(b, t["in"])
        .select_key(lambda key, value: key if value is None else value.split(":")[0])
        .group_by_key()
        .count()
        .to_stream()
        .to(t["out"])
    )


def _tumbling(w: SessionWindows) -> TimeWindows:
    return TimeWindows.of_size(w.gap_ms, grace=w.grace_ms)


def _hopping(w: SessionWindows) -> TimeWindows:
    return _tumbling(w).advance_by(w.gap_ms // 2)


def _sliding(w: SessionWindows) -> SlidingWindows:
    return SlidingWindows.of_time_difference(w.gap_ms, grace=w.grace_ms)


def _windowed_count(
    b: StreamsBuilder, t: dict[str, str], windows: TimeWindows | SlidingWindows, final: bool
) -> None:
    counts = _string_stream(b, t["in"]).group_by_key().windowed_by(windows).count()
    if final:
        counts = counts.suppress(until_window_closes())
    counts.to_stream().to(t["out"], value_serde=LONG)


def _hopping_aggregate(
    b: StreamsBuilder, t: dict[str, str], w: SessionWindows, final: bool
) -> None:
    joined = (
        _string_stream(b, t["in"])
        .group_by_key()
        .windowed_by(_hopping(w))
        .aggregate(
            lambda: "",
            lambda _key, value, aggregate: f"{aggregate}[{_text(value)}]",
            value_serde=STRING,
        )
    )
    if final:
        joined = joined.suppress(until_window_closes())
    joined.to_stream().to(t["out"])


class _PunctuatedCount(Processor[str, str, str, str]):
    """Counts records per key in a store and forwards ``c=COUNT`` per record. Every interval of
    stream time, forwards ``p=COUNT@TIME`` for every key, stamped with the punctuation's time;
    of wall-clock time, ``w=COUNT@ELAPSED`` (the wall clock since ``init``), stamped with the
    stream time."""

    progress: ClassVar[Progress | None] = Progress.keeps_order()

    def __init__(self, store: str, interval_ms: int, kind: PunctuationType) -> None:
        self._store = store
        self._interval_ms = interval_ms
        self._kind = kind

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context
        self.counts: TypedKeyValueStore[str, int] = context.get_state_store(self._store)
        self.started = context.current_system_time_ms()
        context.schedule(self._interval_ms, self._kind, self._punctuate)

    def process(self, record: Record[str, str]) -> None:
        if record.key is None:
            return
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        self.context.forward(record.with_value(f"c={count}"))

    def _punctuate(self, timestamp: int) -> None:
        if self._kind is PunctuationType.STREAM_TIME:
            prefix, at, stamp = "p", timestamp, timestamp
        else:
            prefix, at = "w", timestamp - self.started
            stamp = self.context.current_stream_time_ms()
        for key, count in self.counts.all():
            self.context.forward(Record(key, f"{prefix}={count}@{at}", stamp))


def _punctuated(
    kind: PunctuationType, interval_ms: Callable[[SessionWindows], int]
) -> Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]:
    """A case of :class:`_PunctuatedCount` punctuating by ``kind`` every ``interval_ms(w)``."""

    def build(b: StreamsBuilder, t: dict[str, str], w: SessionWindows) -> None:
        store = f"{t['out']}-counts"
        b.add_state_store(Stores.key_value_store_builder(store, STRING, LONG))
        _string_stream(b, t["in"]).process(
            lambda: _PunctuatedCount(store, interval_ms(w), kind), store
        ).to(t["out"], key_serde=STRING, value_serde=STRING)

    return build


def _global_key(_key: str | None, value: str | None) -> str | None:
    """The global table's key a ``stream-global-join`` record joins: its value up to ``:``
    (none if that is empty)."""
    return None if value is None else value.split(":")[0] or None


def _stream_global_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Inner and left joins of a stream with a global table, through a key mapper."""
    table = b.global_table(
        t["in2"], key_serde=STRING, value_serde=STRING, store_name=f"{t['out']}-global"
    )
    stream = _string_stream(b, t["in"])
    stream.join(table, _global_key, _join, value_serde=STRING).to(t["out"])
    stream.left_join(table, _global_key, _join, value_serde=STRING).to(t["out2"])


def _user(key: str, value: str | None) -> str:
    """A record's user, ``user:n`` values' prefix (the key of a null value)."""
    return key if value is None else value.split(":")[0]


def _flat_map_split(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Flat maps (a second record under a derived key, none for a null one: records of every
    partition would meet there; one or two values), then a split: by a predicate, by
    position, and the default branch."""
    branches = (
        _string_stream(b, t["in"])
        .flat_map(
            lambda k, v: [] if v is None else [(k, v), (None if k is None else k + "x", v + "x")],
            key_serde=STRING,
            value_serde=STRING,
        )
        .flat_map_values(lambda v: [v] if len(v) % 2 else [v, v + "+"], name="fmv")
        .split(name="split-")
        .branch(lambda _k, v: v.endswith("x"), Branched.with_name("x"))
        .branch(lambda _k, v: len(v) % 3 == 0)
        .default_branch()
    )
    branches["split-x"].to(t["out"])
    branches["split-2"].to(t["out2"])
    branches["split-0"].to(t["out3"])


def _group_by_count(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """``group_by`` a user (a named repartition), and a flat map regrouped by key."""
    stream = _string_stream(b, t["in"])
    (
        stream.group_by(_user, key_serde=STRING, value_serde=STRING, name="by-user")
        .count()
        .to_stream()
        .to(t["out"], value_serde=LONG)
    )
    (
        stream.flat_map(
            lambda k, v: [] if v is None else [(v.split(":")[0], v), (v.split(":")[0] + "!", v)],
            key_serde=STRING,
            value_serde=STRING,
        )
        .group_by_key()
        .count()
        .to_stream()
        .to(t["out2"], value_serde=LONG)
    )


def _to_table_suppress(b: StreamsBuilder, t: dict[str, str], w: SessionWindows) -> None:
    """A stream read as a table and suppressed for a gap of stream time; and one regrouped by
    user first (repartitioned) read as a table."""
    stream = _string_stream(b, t["in"])
    (
        stream.to_table()
        .suppress(until_time_limit(w.gap_ms, BufferConfig.unbounded()))
        .to_stream()
        .to(t["out"])
    )
    stream.select_key(_user, key_serde=STRING).to_table().to_stream().to(t["out2"])


def _with_a(_key: str, value: str | None, aggregate: str) -> str:
    return f"{aggregate}a{_text(value)}"


def _with_b(_key: str, value: str | None, aggregate: str) -> str:
    return f"{aggregate}b{_text(value)}"


def _cogroup(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Two inputs cogrouped; and both regrouped under keys of their own (two named
    repartitions), so each key's updates come from one input in offset order."""
    left, right = _string_stream(b, t["in"]), _string_stream(b, t["in2"])
    (
        left.group_by_key()
        .cogroup(_with_a)
        .cogroup(right.group_by_key(), _with_b)
        .aggregate(lambda: "", value_serde=STRING)
        .to_stream()
        .to(t["out"])
    )
    moved_left = left.group_by(
        lambda k, _v: None if k is None else "s" + k, key_serde=STRING, name="cg-left"
    )
    moved_right = right.group_by(
        lambda k, _v: None if k is None else "r" + k, key_serde=STRING, name="cg-right"
    )
    (
        moved_left.cogroup(_with_a)
        .cogroup(moved_right, _with_b)
        .aggregate(lambda: "", value_serde=STRING)
        .to_stream()
        .to(t["out2"])
    )


def _cogroup_windowed(
    b: StreamsBuilder, t: dict[str, str], w: SessionWindows, *, sessions: bool
) -> None:
    """Two inputs cogrouped into tumbling windows (``cogroup-tumbling``) or sessions: every
    update, and the final results."""
    cogrouped = (
        _string_stream(b, t["in"])
        .group_by_key()
        .cogroup(_with_a)
        .cogroup(_string_stream(b, t["in2"]).group_by_key(), _with_b)
    )
    if sessions:
        table = cogrouped.windowed_by(w).aggregate(
            lambda: "", lambda _k, x, y: x + y, value_serde=STRING
        )
    else:
        table = cogrouped.windowed_by(_tumbling(w)).aggregate(lambda: "", value_serde=STRING)
    table.to_stream().to(t["out"])
    table.suppress(until_window_closes()).to_stream().to(t["out2"])


_OPERATOR_BUILDERS: dict[str, Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]] = {
    "flat-map-split": _flat_map_split,
    "group-by-count": _group_by_count,
    "to-table-suppress": _to_table_suppress,
    "cogroup": _cogroup,
    "cogroup-tumbling": lambda b, t, w: _cogroup_windowed(b, t, w, sessions=False),
    "cogroup-session": lambda b, t, w: _cogroup_windowed(b, t, w, sessions=True),
}


def _table_table_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Inner, left (with a filtered right table, read through its filter) and outer joins on
    the key; and the inner join regrouped by key and value and counted, which asks it for old
    values (the joiner's result of the old value with the other side's current row). Each group
    holds one key's rows, so its updates reach the repartition topic from one task, in order."""
    left = _string_table(b, t["in"], f"{t['out']}-left")
    right = _string_table(b, t["in2"], f"{t['out']}-right")
    inner = left.join(right, _pair)
    inner.to_stream().to(t["out"])
    left.left_join(right.filter(lambda _k, row: int(row) % 3 != 0), _pair).to_stream().to(t["out2"])
    left.outer_join(right, _pair).to_stream().to(t["out3"])
    (
        inner.group_by(
            lambda key, value: (f"{key}:{value}", key), key_serde=STRING, value_serde=STRING
        )
        .count()
        .to_stream()
        .to(t["out4"], value_serde=LONG)
    )


def _pair(a: str | None, b: str | None) -> str:
    return f"{_text(a)}|{_text(b)}"


def foreign_key(value: str) -> str | None:
    """``fk-join``'s foreign key: the part of ``c<n>:<m>`` before the colon, none for ``-``."""
    key = value.split(":", maxsplit=1)[0]
    return None if key == "-" else key


def _fk_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Inner and left joins on a foreign key (KIP-213), and the inner one on a table mapped
    (read through its mapper when answers come back)."""
    orders = _string_table(b, t["in"], f"{t['out']}-orders")
    customers = _string_table(b, t["in2"], f"{t['out']}-customers")

    def joined(order: str, customer: str | None) -> str:
        return f"{order}/{_text(customer)}"

    orders.join(customers, foreign_key, joined).to_stream().to(t["out"])
    orders.left_join(customers, foreign_key, joined).to_stream().to(t["out2"])
    (
        orders.map_values(lambda order: order + "!", value_serde=STRING)
        .join(customers, foreign_key, joined)
        .to_stream()
        .to(t["out3"])
    )


_TIME_WINDOW_BUILDERS: dict[
    str, Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]
] = {
    "tumbling-count": lambda b, t, w: _windowed_count(b, t, _tumbling(w), final=False),
    "tumbling-count-suppressed": lambda b, t, w: _windowed_count(b, t, _tumbling(w), final=True),
    "hopping-aggregate": lambda b, t, w: _hopping_aggregate(b, t, w, final=False),
    "hopping-aggregate-suppressed": lambda b, t, w: _hopping_aggregate(b, t, w, final=True),
    "sliding-count": lambda b, t, w: _windowed_count(b, t, _sliding(w), final=False),
    "sliding-count-suppressed": lambda b, t, w: _windowed_count(b, t, _sliding(w), final=True),
}

_BUILDERS: dict[str, Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]] = {
    **_TIME_WINDOW_BUILDERS,
    "session-count": lambda b, t, w: _session_count(b, t, w, final=False),
    "session-count-suppressed": lambda b, t, w: _session_count(b, t, w, final=True),
    "session-aggregate": lambda b, t, w: _session_aggregate(b, t, w, final=False),
    "session-aggregate-suppressed": lambda b, t, w: _session_aggregate(b, t, w, final=True),
    "merge-session-count": _merge_session_count,
    "table-count": _table_count,
    "table-reduce": _table_reduce,
    "table-aggregate": _table_aggregate,
    "table-source": _table_source,
    "table-filter": _table_filter,
    "stream-table-join": _stream_table_join,
    **{
        name: lambda b, t, w, name=name: _stream_stream_join(b, t, join_windows(name, w))
        for name in JOIN_CASES
    },
    "repartition-count": _repartition_count,
    "table-table-join": _table_table_join,
    "fk-join": _fk_join,
    **_OPERATOR_BUILDERS,
    "punctuated-count": _punctuated(PunctuationType.STREAM_TIME, lambda w: w.gap_ms),
    "wall-clock-punctuated": _punctuated(
        PunctuationType.WALL_CLOCK_TIME, lambda _w: WALL_CLOCK_INTERVAL_MS
    ),
    "stream-global-join": _stream_global_join,
}

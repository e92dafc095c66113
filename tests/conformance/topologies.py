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

from streams_runtime import (
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from tests.conformance.operator_topologies import OPERATOR_BUILDERS
from tests.conformance.topology_parts import (
    LONG,
    STRING,
    join,
    string_stream,
    string_table,
    text,
    tumbling,
)

__all__ = [
    "CASES",
    "JOIN_CASES",
    "Case",
    "build_runtime_case",
    "join_windows",
]


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


def _max(aggregate: str, value: str) -> str:
    return str(max(int(aggregate), int(value)))


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
    counts = string_stream(b, t["in"]).group_by_key().windowed_by(w).count()
    if final:
        counts = counts.suppress(until_window_closes())
    counts.to_stream().to(t["out"], value_serde=LONG)


def _session_aggregate(
    b: StreamsBuilder, t: dict[str, str], w: SessionWindows, final: bool
) -> None:
    joined = (
        string_stream(b, t["in"])
        .group_by_key()
        .windowed_by(w)
        .aggregate(
            lambda: "",
            lambda _key, value, aggregate: f"{aggregate}[{text(value)}]",
            lambda _key, left, right: left + right,
            value_serde=STRING,
        )
    )
    if final:
        joined = joined.suppress(until_window_closes())
    joined.to_stream().to(t["out"])


def _merge_session_count(b: StreamsBuilder, t: dict[str, str], w: SessionWindows) -> None:
    merged = string_stream(b, t["in"]).merge(string_stream(b, t["in2"]))
    (
        merged.group_by_key()
        .windowed_by(w)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .to(t["out"], value_serde=LONG)
    )


def _table_count(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    string_stream(b, t["in"]).group_by_key().count().to_stream().to(t["out"])


def _table_reduce(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    string_stream(b, t["in"]).group_by_key().reduce(_max).to_stream().to(t["out"])


def _table_aggregate(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    (
        string_stream(b, t["in"])
        .group_by_key()
        .aggregate(lambda: 0, lambda _k, value, total: (total + int(value)) % 4, value_serde=LONG)
        .to_stream()
        .to(t["out"])
    )


def _table_source(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    table = string_table(b, t["in"], f"{t['out']}-store")
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
    table = string_table(b, t["in2"], f"{t['out']}-store")
    stream = string_stream(b, t["in"])
    stream.join(table, join, value_serde=STRING).to(t["out"])
    stream.left_join(table, join, value_serde=STRING).to(t["out2"])
    divisible = table.filter(lambda _k, row: int(row) % 3 != 0)
    stream.join(divisible, join, value_serde=STRING).to(t["out3"])


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
    left, right = string_stream(b, t["in"]), string_stream(b, t["in2"])

    def pair(a: str | None, b: str | None) -> str:
        return f"{text(a)}|{text(b)}"

    left.join(right, pair, windows, value_serde=STRING).to(t["out"])
    left.left_join(right, pair, windows, value_serde=STRING).to(t["out2"])
    left.outer_join(right, pair, windows, value_serde=STRING).to(t["out3"])


def _repartition_count(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    (
        string_stream(b, t["in"])
        .select_key(lambda key, value: key if value is None else value.split(":")[0])
        .group_by_key()
        .count()
        .to_stream()
        .to(t["out"])
    )


def _hopping(w: SessionWindows) -> TimeWindows:
    return tumbling(w).advance_by(w.gap_ms // 2)


def _sliding(w: SessionWindows) -> SlidingWindows:
    return SlidingWindows.of_time_difference(w.gap_ms, grace=w.grace_ms)


def _windowed_count(
    b: StreamsBuilder, t: dict[str, str], windows: TimeWindows | SlidingWindows, final: bool
) -> None:
    counts = string_stream(b, t["in"]).group_by_key().windowed_by(windows).count()
    if final:
        counts = counts.suppress(until_window_closes())
    counts.to_stream().to(t["out"], value_serde=LONG)


def _hopping_aggregate(
    b: StreamsBuilder, t: dict[str, str], w: SessionWindows, final: bool
) -> None:
    joined = (
        string_stream(b, t["in"])
        .group_by_key()
        .windowed_by(_hopping(w))
        .aggregate(
            lambda: "",
            lambda _key, value, aggregate: f"{aggregate}[{text(value)}]",
            value_serde=STRING,
        )
    )
    if final:
        joined = joined.suppress(until_window_closes())
    joined.to_stream().to(t["out"])


_TIME_WINDOW_BUILDERS: dict[
    str, Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]
] = {
    "tumbling-count": lambda b, t, w: _windowed_count(b, t, tumbling(w), final=False),
    "tumbling-count-suppressed": lambda b, t, w: _windowed_count(b, t, tumbling(w), final=True),
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
    **OPERATOR_BUILDERS,
}

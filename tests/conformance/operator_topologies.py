"""The conformance topologies of issue 51's operators (cases of :mod:`.topologies`): the
Processor API with stream-time and wall-clock punctuators, stream-global joins, flat maps and
split, stream ``group_by``, ``to_table`` with a time-limit suppression, cogroups, and
table-table and foreign-key joins. Each is the twin of the case of the same name in
``kstreams/src/main/java/kpc/conformance/ConformanceApp.java``; keep them identical."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from streams_runtime import (
    Branched,
    BufferConfig,
    Record,
    SessionWindows,
    StreamsBuilder,
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
from tests.conformance.topology_parts import (
    LONG,
    STRING,
    join,
    string_stream,
    string_table,
    text,
    tumbling,
)

__all__ = ["OPERATOR_BUILDERS", "WALL_CLOCK_INTERVAL_MS", "foreign_key"]

WALL_CLOCK_INTERVAL_MS = 1_000
"""How often the ``wall-clock-punctuated`` case's punctuator fires, in wall-clock time."""


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
        string_stream(b, t["in"]).process(
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
    stream = string_stream(b, t["in"])
    stream.join(table, _global_key, join, value_serde=STRING).to(t["out"])
    stream.left_join(table, _global_key, join, value_serde=STRING).to(t["out2"])


def _user(key: str, value: str | None) -> str:
    """A record's user, ``user:n`` values' prefix (the key of a null value)."""
    return key if value is None else value.split(":")[0]


def _flat_map_split(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Flat maps (a second record under a derived key, none for a null one: records of every
    partition would meet there; one or two values), then a split: by a predicate, by
    position, and the default branch."""
    branches = (
        string_stream(b, t["in"])
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
    stream = string_stream(b, t["in"])
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
    stream = string_stream(b, t["in"])
    (
        stream.to_table()
        .suppress(until_time_limit(w.gap_ms, BufferConfig.unbounded()))
        .to_stream()
        .to(t["out"])
    )
    stream.select_key(_user, key_serde=STRING).to_table().to_stream().to(t["out2"])


def _with_a(_key: str, value: str | None, aggregate: str) -> str:
    return f"{aggregate}a{text(value)}"


def _with_b(_key: str, value: str | None, aggregate: str) -> str:
    return f"{aggregate}b{text(value)}"


def _cogroup(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Two inputs cogrouped; and both regrouped under keys of their own (two named
    repartitions), so each key's updates come from one input in offset order."""
    left, right = string_stream(b, t["in"]), string_stream(b, t["in2"])
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
        string_stream(b, t["in"])
        .group_by_key()
        .cogroup(_with_a)
        .cogroup(string_stream(b, t["in2"]).group_by_key(), _with_b)
    )
    if sessions:
        table = cogrouped.windowed_by(w).aggregate(
            lambda: "", lambda _k, x, y: x + y, value_serde=STRING
        )
    else:
        table = cogrouped.windowed_by(tumbling(w)).aggregate(lambda: "", value_serde=STRING)
    table.to_stream().to(t["out"])
    table.suppress(until_window_closes()).to_stream().to(t["out2"])


def _table_table_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Inner, left (with a filtered right table, read through its filter) and outer joins on
    the key; and the inner join regrouped by key and value and counted, which asks it for old
    values (the joiner's result of the old value with the other side's current row). Each group
    holds one key's rows, so its updates reach the repartition topic from one task, in order."""
    left = string_table(b, t["in"], f"{t['out']}-left")
    right = string_table(b, t["in2"], f"{t['out']}-right")
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
    return f"{text(a)}|{text(b)}"


def foreign_key(value: str) -> str | None:
    """``fk-join``'s foreign key: the part of ``c<n>:<m>`` before the colon, none for ``-``."""
    key = value.split(":", maxsplit=1)[0]
    return None if key == "-" else key


def _fk_join(b: StreamsBuilder, t: dict[str, str], _w: SessionWindows) -> None:
    """Inner and left joins on a foreign key (KIP-213), and the inner one on a table mapped
    (read through its mapper when answers come back)."""
    orders = string_table(b, t["in"], f"{t['out']}-orders")
    customers = string_table(b, t["in2"], f"{t['out']}-customers")

    def joined(order: str, customer: str | None) -> str:
        return f"{order}/{text(customer)}"

    orders.join(customers, foreign_key, joined).to_stream().to(t["out"])
    orders.left_join(customers, foreign_key, joined).to_stream().to(t["out2"])
    (
        orders.map_values(lambda order: order + "!", value_serde=STRING)
        .join(customers, foreign_key, joined)
        .to_stream()
        .to(t["out3"])
    )


OPERATOR_BUILDERS: dict[str, Callable[[StreamsBuilder, dict[str, str], SessionWindows], None]] = {
    "flat-map-split": _flat_map_split,
    "group-by-count": _group_by_count,
    "to-table-suppress": _to_table_suppress,
    "cogroup": _cogroup,
    "cogroup-tumbling": lambda b, t, w: _cogroup_windowed(b, t, w, sessions=False),
    "cogroup-session": lambda b, t, w: _cogroup_windowed(b, t, w, sessions=True),
    "table-table-join": _table_table_join,
    "fk-join": _fk_join,
    "punctuated-count": _punctuated(PunctuationType.STREAM_TIME, lambda w: w.gap_ms),
    "wall-clock-punctuated": _punctuated(
        PunctuationType.WALL_CLOCK_TIME, lambda _w: WALL_CLOCK_INTERVAL_MS
    ),
    "stream-global-join": _stream_global_join,
}

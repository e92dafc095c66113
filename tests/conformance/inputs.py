"""Seeded input for the conformance topologies.

Every input mixes what makes engines disagree: several partitions, in-order and equal
timestamps, records out of order within grace and late beyond it, records on the exact
lateness boundaries and in the gap between two sessions (bridging them), far-future records,
null keys, null values (tombstones for tables), repeated values (emit-on-change), and control
records. A control record is an ordinary record with the ``progress-control`` header, the
sentinel key and a null value: Kafka Streams sees it as data, the runtime as time passing.

A key always lives in one partition of every input topic, so each engine's output for a key is
in a deterministic order. Stream-table joins never give a stream record and a table record of one
partition the same timestamp: which of the two Kafka Streams takes first is then not defined.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from progress_control.protocol import CONTROL_HEADER, ControlMarker
from streams_runtime import JoinWindows, SessionWindows
from tests.conformance.operator_topologies import WALL_CLOCK_INTERVAL_MS
from tests.conformance.topologies import JOIN_CASES, join_windows

__all__ = ["ID_HEADER", "SENTINEL_KEY", "WALL_CLOCK", "InputRecord", "generate"]

SENTINEL_KEY = b"__progress_control__"
ID_HEADER = "conformance-id"
WALL_CLOCK = "wall-clock"
"""The role of an input event that is no record: the drivers' wall clock moves by its
timestamp (ms). Broker runs leave it out (their wall clocks are real)."""


@dataclass(frozen=True)
class InputRecord:
    role: str  # which input of the case ("in", "in2")
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    control: bool = False

    def headers(self, sequence: int) -> list[tuple[str, bytes]]:
        """The record's headers: the control marker of a control record; else an id, which
        Kafka Streams carries to every output record the input record causes."""
        if self.control:
            return [(CONTROL_HEADER, ControlMarker("conformance", sequence).encode())]
        return [(ID_HEADER, str(sequence).encode())]


def _key(index: int) -> bytes:
    return f"k{index}".encode()


class _Partition:
    """One input partition being generated: its keys and its clock."""

    def __init__(self, rng: random.Random, partition: int, keys: list[bytes]) -> None:
        self.rng = rng
        self.partition = partition
        self.keys = keys
        self.now = rng.randrange(0, 5_000)  # the partition's largest timestamp so far

    def key(self, null_key: float = 0.05) -> bytes | None:
        return None if self.rng.random() < null_key else self.rng.choice(self.keys)


def _session_partition(
    part: _Partition, role: str, windows: SessionWindows, count: int, value: str
) -> list[InputRecord]:
    rng, gap, grace = part.rng, windows.gap_ms, windows.grace_ms
    records: list[InputRecord] = []
    for n in range(count):
        roll = rng.random()
        if roll < 0.45:  # in order, sometimes within the gap, sometimes past it
            part.now += rng.randrange(0, int(gap * 1.6))
            ts = part.now
        elif roll < 0.52:  # equal timestamps
            ts = part.now
        elif roll < 0.70:  # out of order within grace (and gap)
            ts = part.now - rng.randrange(0, grace + gap + 1)
        elif roll < 0.78:  # on the lateness and retention boundaries
            ts = part.now - grace - gap + rng.choice((-gap - 1, -gap, -gap + 1, -1, 0, 1))
        elif roll < 0.85:  # late beyond grace
            ts = part.now - grace - gap - rng.randrange(1, 3 * gap)
        elif roll < 0.87:  # far in the future: what follows is mostly late
            part.now += 20 * (gap + grace)
            ts = part.now
        elif roll < 0.94:  # a control record: time passes (or not) without data
            ts = max(0, part.now + rng.choice((-gap, 0, rng.randrange(1, gap + grace + 2))))
            part.now = max(part.now, ts)
            records.append(InputRecord(role, part.partition, SENTINEL_KEY, None, ts, True))
            continue
        else:  # a record between two sessions of a key, bridging them
            ts = part.now - rng.randrange(gap // 2, gap + grace + 1)
        ts = max(ts, 0)
        payload = None if rng.random() < 0.05 else f"{value}{n}".encode()
        records.append(InputRecord(role, part.partition, part.key(), payload, ts))
    # Let every session close: a final tick past the last one's close time.
    closing = part.now + gap + grace + rng.choice((0, 1, gap))
    records.append(InputRecord(role, part.partition, SENTINEL_KEY, None, closing, True))
    return records


def _window_partition(part: _Partition, windows: SessionWindows, count: int) -> list[InputRecord]:
    """Time- and sliding-window input (size or time difference = gap, hopping advance = gap / 2,
    see ``topologies``): records and control records exactly on window starts and ends, on the
    ``end + grace`` boundary (one before, on, one after), out of order within grace, late,
    equal timestamps, early ones (before the first sliding window), null keys and values."""
    rng, size, grace = part.rng, windows.gap_ms, windows.grace_ms
    advance = size // 2
    records: list[InputRecord] = []
    for n in range(count):
        roll = rng.random()
        closing = (part.now - grace) // advance * advance  # a window end near its close
        if roll < 0.35:  # in order
            part.now += rng.randrange(0, int(size * 0.8))
            ts = part.now
        elif roll < 0.45:  # in order, onto a window boundary (or just before it)
            part.now = (part.now // advance + 1) * advance - rng.choice((0, 0, 1))
            ts = part.now
        elif roll < 0.5:  # equal timestamps
            ts = part.now
        elif roll < 0.63:  # out of order within grace
            ts = part.now - rng.randrange(0, grace + size // 2 + 1)
        elif roll < 0.75:  # around end + grace == stream time, for time and sliding windows
            ts = rng.choice((closing, part.now - grace - size)) + rng.choice((-1, 0, 1))
        elif roll < 0.82:  # late beyond grace
            ts = part.now - grace - size - rng.randrange(1, 3 * size)
        elif roll < 0.84:  # early: before the first sliding window's end
            ts = rng.randrange(0, size)
        elif roll < 0.86:  # far in the future: what follows is mostly late
            part.now += 10 * (size + grace)
            ts = part.now
        else:  # a control record, often exactly closing a window (end + grace)
            nxt = (part.now - grace) // advance * advance + advance + grace
            ts = max(0, rng.choice((nxt - 1, nxt, nxt, part.now, part.now - size)))
            part.now = max(part.now, ts)
            records.append(InputRecord("in", part.partition, SENTINEL_KEY, None, ts, True))
            continue
        ts = max(ts, 0)
        payload = None if rng.random() < 0.05 else f"v{n}".encode()
        records.append(InputRecord("in", part.partition, part.key(), payload, ts))
    # Let every window close: a final tick past the last one's close time.
    closing = part.now + 2 * size + grace + rng.choice((0, 1))
    records.append(InputRecord("in", part.partition, SENTINEL_KEY, None, closing, True))
    return records


def _table_partition(
    part: _Partition, role: str, count: int, *, numbers: int, null_value: float
) -> list[InputRecord]:
    """Table updates or aggregation input: small numbers, so values repeat (emit-on-change)."""
    rng = part.rng
    records = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.75:
            part.now += rng.randrange(0, 400)
            ts = part.now
        elif roll < 0.85:  # older than what the key has (out-of-order table updates)
            ts = max(0, part.now - rng.randrange(1, 2_000))
        elif roll < 0.9:  # a control record
            ts = max(0, part.now + rng.randrange(-200, 400))
            part.now = max(part.now, ts)
            records.append(InputRecord(role, part.partition, SENTINEL_KEY, None, ts, True))
            continue
        else:
            ts = part.now
        value = None if rng.random() < null_value else str(rng.randrange(numbers)).encode()
        records.append(InputRecord(role, part.partition, part.key(), value, ts))
    return records


def _table_filter_partition(part: _Partition, count: int) -> list[InputRecord]:
    """``table-filter`` input: values ``a<p>``, ``b<p>`` (partition ``p``'s groups, so each
    group's updates reach the repartition topic from one task, in order), ``x`` (rejected by
    the filters) and deletes; the first key of the partition only ever gets ``x`` and deletes.
    Keys start rejected, deleted or accepted, get repeated deletes and repeated ``x``, move
    between groups, and get updates older than what they hold.

    A key never gets the accepted value it holds again with a strictly newer timestamp: the
    runtime's source table drops that update (emit-on-change), which ``compare`` allows for,
    but the group's count in Kafka Streams then takes the newer timestamp (subtract and add the
    same row) and stamps the group's later updates with it, the runtime's does not. That is a
    consequence of the documented difference that no record can be left out for; repeated
    ``x`` (never reaching the count) and deletes are generated."""
    rng = part.rng
    groups = [f"a{part.partition}", f"b{part.partition}"]
    only_rejected = part.keys[0]
    holds: dict[bytes, tuple[str | None, int]] = {}  # key -> (value, timestamp) it holds
    records = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.7:
            part.now += rng.randrange(0, 400)
            ts = part.now
        elif roll < 0.82:  # older than what the key has (out-of-order table updates)
            ts = max(0, part.now - rng.randrange(1, 2_000))
        elif roll < 0.88:  # a control record
            ts = max(0, part.now + rng.randrange(-200, 400))
            part.now = max(part.now, ts)
            records.append(InputRecord("in", part.partition, SENTINEL_KEY, None, ts, True))
            continue
        else:
            ts = part.now
        key = rng.choice(part.keys) if rng.random() < 0.97 else None
        roll = rng.random()
        value: str | None = None if roll < 0.2 else "x" if roll < 0.45 else rng.choice(groups)
        if key == only_rejected and value in groups:
            value = "x"
        if key is not None:
            held, held_ts = holds.get(key, (None, -1))
            if value in groups and value == held and ts > held_ts:
                value = groups[1 - groups.index(value)]  # not the same again, newer
            holds[key] = (value, ts)
        payload = None if value is None else value.encode()
        records.append(InputRecord("in", part.partition, key, payload, ts))
    return records


def _join_partition(
    stream: _Partition, table: _Partition, count: int, *, global_table: bool = False
) -> list[InputRecord]:
    """Both inputs of a stream-table join on one partition; timestamps are unique across the
    two (each is drawn from one shared clock), though each topic on its own may be out of
    order. With ``global_table``, stream values are ``TARGET:sN``, ``TARGET`` the table key to
    join (one the table may never have, or empty: none)."""
    rng = stream.rng
    targets = ["", "kz", *(key.decode() for key in table.keys)]
    used: set[int] = set()
    records = []
    clock = stream.now
    for n in range(count):
        clock += rng.randrange(1, 300)
        ts = clock if rng.random() < 0.85 else max(0, clock - rng.randrange(1, 1_500))
        while ts in used:
            ts += 1
        used.add(ts)
        roll = rng.random()
        if roll < 0.35:  # a table update, sometimes a delete
            value = None if rng.random() < 0.12 else str(rng.randrange(6)).encode()
            records.append(InputRecord("in2", table.partition, table.key(0.03), value, ts))
        elif roll < 0.42:
            role = "in" if rng.random() < 0.5 else "in2"
            records.append(InputRecord(role, stream.partition, SENTINEL_KEY, None, ts, True))
        else:
            value = f"{rng.choice(targets)}:s{n}" if global_table else f"s{n}"
            payload = None if rng.random() < 0.06 else value.encode()
            records.append(InputRecord("in", stream.partition, stream.key(0.08), payload, ts))
    return records


def _with_wall_clock(part: _Partition, records: list[InputRecord]) -> list[InputRecord]:
    """``records`` with the wall clock moving between them (role :data:`WALL_CLOCK`, the
    advance in ms as timestamp): not at all, by less than, exactly or just over one interval
    (:data:`topologies.WALL_CLOCK_INTERVAL_MS`), or by several at once (a punctuator fires once
    however many intervals passed)."""
    interval = WALL_CLOCK_INTERVAL_MS
    advances = (0, 1, interval - 1, interval, interval + 1, 3 * interval + 7)
    moved: list[InputRecord] = []
    for record in records:
        moved.append(record)
        if part.rng.random() < 0.3:
            advance = part.rng.choice(advances)
            moved.append(InputRecord(WALL_CLOCK, part.partition, None, None, advance))
    return moved


def generate(  # noqa: PLR0912 - a branch per kind of input
    case: str, seed: int, partitions: int, windows: SessionWindows, size: int
) -> list[InputRecord]:
    """The input of ``case`` for ``seed``: about ``size`` records per input partition, in the
    order to produce them (per partition, that is offset order)."""
    rng = random.Random(f"{case}:{seed}")  # noqa: S311 - reproducible test data
    keys = [[_key(i) for i in range(p, partitions * 3, partitions)] for p in range(partitions)]
    records: list[InputRecord] = []
    for p in range(partitions):
        part = _Partition(rng, p, keys[p])
        if case.startswith("session-") or case == "punctuated-count":
            records += _session_partition(part, "in", windows, size, "v")
        elif case == "wall-clock-punctuated":
            records += _with_wall_clock(part, _session_partition(part, "in", windows, size, "v"))
        elif case == "stream-global-join":
            records += _join_partition(part, _Partition(rng, p, keys[p]), size, global_table=True)
        elif case.startswith(("tumbling-", "hopping-", "sliding-")):
            records += _window_partition(part, windows, size)
        elif case == "merge-session-count":
            records += _session_partition(part, "in", windows, size // 2, "a")
            records += _session_partition(
                _Partition(rng, p, keys[p]), "in2", windows, size // 2, "b"
            )
        elif case in ("table-count", "table-reduce", "table-aggregate", "table-source"):
            null_value = 0.1 if case == "table-source" else 0.04
            records += _table_partition(part, "in", size, numbers=5, null_value=null_value)
        elif case == "table-filter":
            records += _table_filter_partition(part, size)
        elif case in JOIN_CASES:
            join = join_windows(case, windows)
            # The first case keeps ticks amid its input; the others leave them out and let
            # partners arrive after the other side's window passed (see the function).
            records += _stream_join_partition(part, join, size, ticks=case == JOIN_CASES[0])
        elif case == "stream-table-join":
            records += _join_partition(part, _Partition(rng, p, keys[p]), size)
        elif case == "repartition-count":
            records += _repartition_partition(part, size)
        elif case == "flat-map-split":
            records += _table_partition(part, "in", size, numbers=10_000, null_value=0.05)
        elif case in ("group-by-count", "to-table-suppress"):
            records += _repartition_partition(part, size)
        elif case.startswith("cogroup"):
            records += _cogroup_partition(case, part, windows, size)
        elif case in ("table-table-join", "fk-join"):
            records += _table_join_partition(part, size, foreign=case == "fk-join")
        else:
            raise ValueError(f"no input generator for {case!r}")
    return records


def _cogroup_partition(
    case: str, part: _Partition, windows: SessionWindows, count: int
) -> list[InputRecord]:
    """Both inputs of a cogroup on one partition: the input of the single-input case of the
    same shape (table updates for ``cogroup``, time- or session-window input), each record
    (control records too) given to either input, timestamps made unique across the two: which
    input a task takes first at equal timestamps is not defined."""
    if case == "cogroup":
        base = _table_partition(part, "in", count, numbers=10, null_value=0.05)
    elif case == "cogroup-tumbling":
        base = _window_partition(part, windows, count)
    else:
        base = _session_partition(part, "in", windows, count, "v")
    taken: dict[int, str] = {}
    latest = {"in": -1, "in2": -1}
    records = []

    def add(role: str, record: InputRecord, ts: int) -> None:
        while taken.setdefault(ts, role) != role:
            ts += 1
        latest[role] = max(latest[role], ts)
        records.append(
            InputRecord(role, record.partition, record.key, record.value, ts, record.control)
        )

    for record in base:
        role = "in" if part.rng.random() < 0.5 else "in2"
        now = max(latest.values())
        if case != "cogroup" and not record.control and latest[role] < now:
            # Windowed: bring the input's own stream time up to the other's first (see
            # tests/conformance/compare.py, 5.), with a control record.
            add(role, InputRecord(role, record.partition, SENTINEL_KEY, None, now, True), now)
        add(role, record, record.timestamp)
    return records


def _repartition_partition(part: _Partition, count: int) -> list[InputRecord]:
    """``select_key`` input: the new key (a user) comes from the value ``user:n``; every user
    lives in one input partition, so its records reach the repartition topic in order."""
    rng = part.rng
    users = [f"u{key.decode()[1:]}" for key in part.keys]
    records = []
    for n in range(count):
        part.now += rng.randrange(0, 500)
        ts = part.now if rng.random() < 0.8 else max(0, part.now - rng.randrange(1, 3_000))
        if rng.random() < 0.06:
            records.append(InputRecord("in", part.partition, SENTINEL_KEY, None, ts, True))
            continue
        user = rng.choice(users)
        key = None if rng.random() < 0.1 else rng.choice(part.keys)
        value = None if rng.random() < 0.05 else f"{user}:{n}".encode()
        if value is None:
            key = user.encode()  # a null value keeps its key: make it this user's
        records.append(InputRecord("in", part.partition, key, value, ts))
    return records


def _stream_join_partition(  # noqa: PLR0912, PLR0915 - one branch per kind of record
    part: _Partition, windows: JoinWindows, count: int, *, ticks: bool
) -> list[InputRecord]:
    """Both inputs of a windowed stream-stream join on one partition: in order, out of order
    within grace, late, on the window bounds of a record of the other side (difference d and
    d + 1), duplicates (same side, key and timestamp), null keys and values, far-future records,
    and with ``ticks`` control records on either input. A timestamp is never shared by the two
    inputs (which one Kafka Streams takes first is not defined then).

    Unjoined results come out where a scan looks (see ``streams_runtime.processors.joins``): at
    in-order data records, under one condition in both engines, and in the runtime at ticks too,
    where Kafka Streams does not look (a control record with a null value). With ``ticks``, a
    record late beyond grace therefore must not fall within the window of a record of the other
    side with its key: the runtime may have emitted that record unjoined at a tick where Kafka
    Streams still joins them. Such records get a null value. Without ``ticks`` both engines look
    at the same records, and partners come after the other side's window passed, written right
    after an in-order record of either input that takes stream time past that window.

    The input ends with a control record carrying a value on ``in``, far past every window: the
    runtime sees a tick, Kafka Streams a data record under the sentinel key; both scan there and
    emit every unjoined result still buffered (Kafka Streams' own results are under the
    sentinel key)."""
    rng, grace = part.rng, windows.grace_ms
    before, after = windows.before_ms, windows.after_ms
    d = max(before, after)
    owner: dict[int, str] = {}  # timestamp -> the input using it
    records: list[InputRecord] = []
    late: set[int] = set()  # indexes of records late beyond grace when written

    def free(ts: int, role: str) -> int:
        while owner.get(ts, role) != role:
            ts += 1
        owner[ts] = role
        return ts

    for n in range(count):
        role = "in" if rng.random() < 0.5 else "in2"
        other = [
            r
            for r in records
            if r.role != role and r.key is not None and r.value is not None and not r.control
        ]
        # A record of this input at t joins one of the other's at o when o - t lies in
        # [-before, after] (left) or [-after, before] (right).
        back, ahead = (after, before) if role == "in" else (before, after)
        roll = rng.random()
        key = part.key(0.05)
        if roll < 0.4:  # in order
            part.now += rng.randrange(0, int(d * 0.8))
            ts = part.now
        elif roll < 0.52 and other:  # on a window bound of the other side's record
            partner = other[-1] if rng.random() < 0.6 else rng.choice(other[-8:])
            key, ts, ahead_of_it = _on_window_bound(
                part, role, partner, free, back=back, ahead=ahead
            )
            records += ahead_of_it
        elif roll < 0.6 and other and not ticks:  # a partner after the other's window passed
            key, ts, trigger = _after_window_passed(part, rng.choice(other[-8:]), windows, free)
            records += trigger
            ts += rng.randrange(-back, ahead + 1)
        elif roll < 0.64:  # out of order within grace
            ts = part.now - rng.randrange(0, grace + 1)
        elif roll < 0.7:  # around the end of the window of a record at stream time
            ts = part.now - d + rng.choice((-1, 0, 1))
        elif roll < 0.78:  # late beyond grace
            ts = part.now - grace - rng.randrange(1, 3 * d)
        elif roll < 0.84 and records and not records[-1].control:  # a duplicate
            last = records[-1]
            role, key, ts = last.role, last.key, last.timestamp
        elif roll < 0.86:  # far in the future: what follows is mostly late
            part.now += 10 * (2 * d + grace)
            ts = part.now
        elif roll < 0.94 and ticks:  # a control record: time passes (or not) without data
            ts = free(max(0, part.now + rng.choice((-d, 0, rng.randrange(1, d + grace + 2)))), role)
            part.now = max(part.now, ts)
            records.append(InputRecord(role, part.partition, SENTINEL_KEY, None, ts, True))
            continue
        else:
            part.now += rng.randrange(0, d)
            ts = part.now
        ts = free(max(ts, 0), role)
        if ts < part.now - grace:
            late.add(len(records))
        part.now = max(part.now, ts)
        payload = None if rng.random() < 0.05 else f"{role[-1]}{n}".encode()
        records.append(InputRecord(role, part.partition, key, payload, ts))
    if ticks:
        _null_late_partners(records, late, d)
    end = free(part.now + 2 * (2 * d + grace) + 10, "in")
    records.append(InputRecord("in", part.partition, SENTINEL_KEY, b"end", end, True))
    return records


def _on_window_bound(
    part: _Partition,
    role: str,
    partner: InputRecord,
    free: Callable[[int, str], int],
    *,
    back: int,
    ahead: int,
) -> tuple[bytes | None, int, list[InputRecord]]:
    """Key and timestamp of a record of ``role`` on a bound of ``partner``'s window (on it, or
    1 ms outside): it joins when ``partner - t`` lies in ``[-back, ahead]``. A record earlier
    than its partner comes with a record of its own input to write first, later than the
    partner: an input is taken in offset order, so it is taken after its partner and reaches it
    with its window's upper bound."""
    offset = part.rng.choice((-back - 1, -back, ahead, ahead + 1))
    first: list[InputRecord] = []
    if offset < 0:
        part.now = free(max(part.now, partner.timestamp) + 1, role)
        first.append(InputRecord(role, part.partition, part.key(), b"first", part.now))
    return partner.key, max(0, partner.timestamp + offset), first


def _after_window_passed(
    part: _Partition, partner: InputRecord, windows: JoinWindows, free: Callable[[int, str], int]
) -> tuple[bytes | None, int, list[InputRecord]]:
    """``partner``'s key and timestamp, for a record of the other input to join it after its
    window passed (the caller adds an offset within reach), with an in-order record of either
    input (both trigger scans, each reaching its own way) to write first when stream time has
    not passed that window yet."""
    reach = windows.after_ms if partner.role == "in" else windows.before_ms
    closes = partner.timestamp + reach + windows.grace_ms
    trigger: list[InputRecord] = []
    if part.now <= closes:
        role = part.rng.choice(("in", "in2"))
        part.now = free(closes + 1 + part.rng.randrange(0, 3), role)
        trigger.append(InputRecord(role, part.partition, part.key(), b"t", part.now))
    return partner.key, partner.timestamp, trigger


def _null_late_partners(records: list[InputRecord], late: set[int], d: int) -> None:
    """Give a null value to every late record with a record of the other input of its key
    within ``d`` (see :func:`_stream_join_partition`)."""
    for index in late:
        record = records[index]
        if record.key is not None and any(
            r.role != record.role
            and r.key == record.key
            and r.value is not None
            and abs(r.timestamp - record.timestamp) <= d
            for r in records
        ):
            records[index] = InputRecord(
                record.role, record.partition, record.key, None, record.timestamp
            )


def _table_join_partition(part: _Partition, count: int, *, foreign: bool) -> list[InputRecord]:
    """Both tables of a table-table join on one partition (``fk-join``: orders on ``in``,
    values ``c<p><j>:<n>`` naming a customer of ``in2``, or ``-:<n>``, no customer).

    Timestamps are unique across the two tables (one shared clock; which table a task takes
    first at equal timestamps is not defined), some older than their predecessors. A key never
    gets the value it holds again and is deleted only while it holds one: the runtime's tables
    emit on change (a documented difference), and these joins would otherwise repeat a result
    with a newer timestamp, which Kafka Streams forwards and the runtime does not. Control
    records go to either table, null keys are dropped by both engines."""
    rng = part.rng
    customers = [f"c{part.partition}{j}".encode() for j in range(4)]
    right_keys = customers if foreign else part.keys
    holds: dict[tuple[str, bytes], bytes] = {}
    used: set[int] = set()
    records = []
    clock = part.now
    for n in range(count):
        clock += rng.randrange(1, 300)
        ts = clock if rng.random() < 0.85 else max(0, clock - rng.randrange(1, 1_500))
        while ts in used:
            ts += 1
        used.add(ts)
        role = "in" if rng.random() < 0.5 else "in2"
        roll = rng.random()
        if roll < 0.07:
            records.append(InputRecord(role, part.partition, SENTINEL_KEY, None, ts, True))
            continue
        if roll < 0.1:  # a null key: dropped
            records.append(InputRecord(role, part.partition, None, b"0", ts))
            continue
        key = rng.choice(part.keys if role == "in" else right_keys)
        held = holds.get((role, key))
        value: bytes | None
        if held is not None and rng.random() < 0.15:
            value = None
        elif role == "in" and foreign:
            customer = b"-" if rng.random() < 0.12 else rng.choice(customers)
            value = customer + f":{n}".encode()
        else:
            value = str(rng.randrange(7)).encode()
            while value == held:
                value = str(rng.randrange(7)).encode()
        if value is None:
            holds.pop((role, key))
        else:
            holds[(role, key)] = value
        records.append(InputRecord(role, part.partition, key, value, ts))
    return records

"""Windowed stream-stream joins (Kafka Streams' ``KStreamImplJoin``, ``KStreamJoinWindow``,
``KStreamKStreamJoinLeftSide``/``RightSide`` and the shared outer-join store of KIP-633's
spurious-result fix).

One :class:`StreamStreamJoinProcessor` per side. Each buffers its side's records in its own
window store and joins every record with the other side's buffered records of the same key whose
timestamps lie in ``[t - before, t + after]`` (left side; mirrored on the right), stamping the
result with the larger of the two timestamps. The two processors of one task share a
:class:`JoinState`: the join's observed stream time (the largest timestamp that reached either
side, null keys and values included, as Kafka Streams' ``TimeTracker``), and, for left and outer
joins, the buffer of records that found no partner yet.

**Buffers.** A side's window store holds its records as points ``[ts, ts]``; several records of
one key at one timestamp are all kept (Kafka Streams retains duplicates with a sequence number):
the entry's value is the list of their serialized values in arrival order (:func:`encode_list`),
which is also the order Kafka Streams' sequence numbers give. One entry per (key, ts) keeps the
store a plain session-shaped store (its changelog, restore and standbys unchanged); the cost is
rewriting the list on each duplicate, which is rare. A buffer is read only from
``observed - retention + 1`` on, where ``observed`` is the largest timestamp put into it and
``retention = before + after + grace``: what Kafka Streams' segmented window stores return.

**Non-joined results** (left and outer joins). A record that found no partner goes to the shared
outer buffer (a changelogged key-value store) under ``(ts, side, key)``; a later partner removes
it. Its window closes once ``ts + after + grace < stream time`` for the left side,
``ts + before + grace < stream time`` for the right; it is then forwarded joined with ``None``,
stamped with its own timestamp, in the order of Kafka Streams' store (timestamp, right side
before left, key bytes) -- but only when a scan looks, and scans follow
``KStreamKStreamJoin.emitNonJoinedOuterRecords`` exactly: an in-order data record scans when
``minTime + its side's after + grace < stream time`` (its side's after: ``after`` on the left,
``before`` on the right), where ``minTime`` is the lowest timestamp put in the buffer since the
last scan, or where that scan stopped (:meth:`JoinState.scan_due`). With asymmetric windows a
record of the side reaching less far ahead may therefore leave a closed record in the buffer,
and a late partner still joins it. An out-of-order record whose window already ended
(``t + after < stream time``) is forwarded unjoined at once, as Kafka Streams does.

The runtime's one extension: a control record scans too, under the same condition as a data
record of its input at its timestamp, so results come out on ticks alone. Kafka Streams reads a
control record as data; one with a null value (as ticks have) moves its time but never scans.
Kafka Streams also throttles scans by wall-clock time
(``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``, 1 s); the runtime scans
whenever the condition holds (the setting 0).

Records with a null key or a null value are dropped and counted, except that the outer side of a
join (left of a left join, both of an outer join) forwards a null-key record at once, joined with
``None`` (KIP-962).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streams_runtime.processors.base import NO_PROGRESS, Processor, ProcessorContext
from streams_runtime.processors.retention import RetentionPurge
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde
from streams_runtime.state import KeyValueStore, WindowStore
from streams_runtime.windows import JoinWindows

__all__ = ["JoinState", "StreamStreamJoinProcessor", "decode_list", "encode_list"]

_LENGTH = struct.Struct(">I")
_TIMESTAMP = struct.Struct(">q")
_RIGHT, _LEFT = 0, 1  # Kafka Streams' join-side byte: right sorts before left
_LONG_MAX = (1 << 63) - 1


def _as_long(value: int) -> int:
    """``value`` as Java's ``long`` arithmetic leaves it (two's complement, wrapping)."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def encode_list(values: list[bytes]) -> bytes:
    """Values as one store value: each as a 4-byte big-endian length, then its bytes."""
    return b"".join(_LENGTH.pack(len(v)) + v for v in values)


def decode_list(raw: bytes) -> list[bytes]:
    """The values :func:`encode_list` encoded."""
    values, offset = [], 0
    while offset < len(raw):
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        values.append(raw[offset : offset + length])
        offset += length
    return values


def _outer_key(timestamp: int, side: int, key: bytes) -> bytes:
    """Kafka Streams' ``TimestampedKeyAndJoinSide`` bytes: timestamp, side, key; sorting them
    gives its store's iteration order."""
    return _TIMESTAMP.pack(timestamp) + bytes((side,)) + key


@dataclass(eq=False)
class JoinState:
    """What the two sides of one join share in a task (Kafka Streams' ``TimeTracker`` and outer
    store): observed stream time, the observed time of each side's buffer (for its retention),
    the outer buffer of unjoined records (``(ts, side, key)`` bytes -> serialized values,
    mirrored in the outer store), and ``min_time``, the lower bound a scan of that buffer is
    gated on (:meth:`scan_due`)."""

    stream_time: int = -1
    scanned: int = NO_PROGRESS  # stream time of the last scan of the outer buffer
    min_time: int = _LONG_MAX
    """Kafka Streams' ``TimeTracker.minTime``: lowered by every record put in the outer buffer,
    set by a scan to the timestamp of the last entry it looked at (``Long.MAX_VALUE`` when the
    buffer was empty). In memory only, as in Kafka Streams."""
    observed: dict[str, int] = field(default_factory=dict)
    outer: dict[bytes, list[bytes]] = field(default_factory=dict)
    pending: tuple[list[bytes], list[bytes]] = field(default_factory=lambda: ([], []))
    """The outer keys per side (right, left), sorted: the store's order within a side."""
    outer_store: KeyValueStore | None = None

    def add_outer(self, side: int, timestamp: int, key: bytes, value: bytes) -> None:
        outer_key = _outer_key(timestamp, side, key)
        values = self.outer.setdefault(outer_key, [])
        if not values:
            bisect.insort(self.pending[side], outer_key)
        values.append(value)
        self.min_time = min(self.min_time, timestamp)
        if self.outer_store is not None:
            self.outer_store.put(outer_key, encode_list(values), timestamp)

    def remove_outer(self, side: int, timestamp: int, key: bytes) -> None:
        outer_key = _outer_key(timestamp, side, key)
        if self.outer.pop(outer_key, None) is None:
            return
        keys = self.pending[side]
        del keys[bisect.bisect_left(keys, outer_key)]
        if self.outer_store is not None:
            self.outer_store.put(outer_key, None, max(self.stream_time, timestamp))

    def load_outer(self, store: KeyValueStore) -> None:
        self.outer_store = store
        for outer_key, raw in store.items():
            self.outer[outer_key] = decode_list(raw)
            self.pending[outer_key[8]].append(outer_key)
        for keys in self.pending:
            keys.sort()

    def scan_due(self, reach_after: int, grace_ms: int) -> bool:
        """Kafka Streams' condition for an in-order record of a side reaching ``reach_after``
        ahead (left: ``after``, right: ``before``) to scan the outer buffer:
        ``minTime + reach_after + grace < streamTime``, in Java's 64-bit arithmetic (with
        ``minTime`` at ``Long.MAX_VALUE`` the sum wraps around and the scan goes ahead)."""
        return _as_long(self.min_time + reach_after + grace_ms) < self.stream_time

    def closed(self, windows: JoinWindows) -> list[tuple[int, int, bytes, list[bytes]]]:
        """Remove and return the unjoined records whose window closed at stream time, as
        ``(ts, side, key, values)`` in Kafka Streams' store order, and set :attr:`min_time` as
        its scan leaves it."""
        right, left = self.pending
        if not right and not left:
            self.min_time = _LONG_MAX
            self.scanned = max(self.scanned, self.stream_time)
            return []
        last = max(right[-1:] + left[-1:])
        found: list[tuple[bytes, list[bytes]]] = []
        first_open: list[bytes] = []
        for side, lookback in ((_RIGHT, windows.before_ms), (_LEFT, windows.after_ms)):
            keys = self.pending[side]
            cut = 0
            while cut < len(keys):
                timestamp = _TIMESTAMP.unpack_from(keys[cut])[0]
                if timestamp + lookback + windows.grace_ms >= self.stream_time:
                    first_open.append(keys[cut])  # open, and so is every later one of the side
                    break
                cut += 1
            for outer_key in keys[:cut]:
                found.append((outer_key, self.outer.pop(outer_key)))
                if self.outer_store is not None:
                    self.outer_store.put(outer_key, None, self.stream_time)
            del keys[:cut]
        # Kafka Streams iterates the store in order and stops at the first entry after both
        # sides had an open one; minTime is left at the timestamp of the entry it stopped at,
        # else of the last one (every closed entry lies before both first open ones).
        stop = last
        if len(first_open) == 2:
            bound = max(first_open)
            successors = [
                keys[i]
                for keys in self.pending
                if (i := bisect.bisect_right(keys, bound)) < len(keys)
            ]
            stop = min(successors, default=last)
        self.min_time = _TIMESTAMP.unpack_from(stop)[0]
        found.sort(key=lambda item: item[0])
        self.scanned = max(self.scanned, self.stream_time)
        return [(_TIMESTAMP.unpack_from(k)[0], k[8], k[9:], v) for k, v in found]


class StreamStreamJoinProcessor(Processor):
    """One side of a windowed stream-stream join (see the module docstring).

    ``left`` says which side this is; ``outer`` whether its unjoined records are emitted (left
    side of a left join, both sides of an outer join); ``outer_store`` names the shared buffer of
    unjoined records (left and outer joins; ``None`` for an inner join). ``joiner(left, right)``
    is the user's, called with ``None`` for the missing side.
    """

    name = "stream_stream_join"
    keeps_order = False

    def __init__(
        self,
        *,
        left: bool,
        outer: bool,
        windows: JoinWindows,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        key_serde: Serde[Any],
        left_value_serde: Serde[Any],
        right_value_serde: Serde[Any],
        joiner: Callable[[Any, Any], Any],
    ) -> None:
        super().__init__()
        self._left = left
        self._outer = outer
        self._windows = windows
        self._this_store_name = this_store
        self._other_store_name = other_store
        self._outer_store_name = outer_store
        self._key_serde = key_serde
        self._value_serdes = (right_value_serde, left_value_serde)  # by side
        self._this_serde = left_value_serde if left else right_value_serde
        self._joiner = joiner
        # The window this side's records reach into the other side's buffer.
        self._reach_before = windows.before_ms if left else windows.after_ms
        self._reach_after = windows.after_ms if left else windows.before_ms
        self._side = _LEFT if left else _RIGHT
        self._context: ProcessorContext | None = None
        self._this: WindowStore | None = None
        self._other: WindowStore | None = None
        self.state = JoinState()
        self._purge = RetentionPurge()

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._this = context.window_store(self._this_store_name)
        self._other = context.window_store(self._other_store_name)
        sibling = self._sibling()
        if sibling is not None and sibling.state.observed:
            self.state = sibling.state  # the other side made it already
        else:
            self.state = JoinState(stream_time=context.stream_time)
            if self._outer_store_name is not None:
                self.state.load_outer(context.kv_store(self._outer_store_name))
            if sibling is not None:
                sibling.state = self.state
        self.state.observed[self._this_store_name] = max(
            (start for _k, start, _e, _v in self._this.items()), default=-1
        )

    def _sibling(self) -> StreamStreamJoinProcessor | None:
        """The other side's processor of this join: the other parent of their merge."""
        for child in self.children:
            for parent in child.parents:
                if isinstance(parent, StreamStreamJoinProcessor) and parent is not self:
                    return parent
        return None

    def _join(self, this: Any, other: Any) -> Any:
        return self._joiner(this, other) if self._left else self._joiner(other, this)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        assert self._this is not None
        assert self._other is not None
        state, t = self.state, record.timestamp
        state.stream_time = max(state.stream_time, t)
        if record.key is None and record.value is not None and self._outer:
            # KIP-962: the outer side forwards a record without a key, joined with nothing.
            self.forward(Record(None, self._join(record.value, None), t, record.headers))
            return
        if record.key is None or record.value is None:
            reason = "null-key" if record.key is None else "null-value"
            self._context.record_dropped(self._this_store_name, reason)
            return
        if t == state.stream_time and self._scan_due():
            self._emit_closed(record.headers)
        key = self._key_serde.serialize(record.key) or b""
        time_from = max(0, t - self._reach_before)
        time_to = max(0, t + self._reach_after)
        retained = state.observed.get(self._other_store_name, -1) - self._windows.retention_ms + 1
        other_serde = self._value_serdes[1 - self._side]
        matched = False
        for other_ts, _end, raw in self._other.fetch_range(key, max(time_from, retained), time_to):
            if state.outer_store is not None:
                state.remove_outer(1 - self._side, other_ts, key)
            for other in decode_list(raw):
                matched = True
                joined = self._join(record.value, other_serde.deserialize(other))
                self.forward(Record(record.key, joined, max(t, other_ts), record.headers))
        value = self._this_serde.serialize(record.value) or b""
        if self._outer and not matched:
            if state.outer_store is None or time_to < state.stream_time:
                # Its window ended already (an out-of-order record): nothing can join it.
                self.forward(Record(record.key, self._join(record.value, None), t, record.headers))
            else:
                state.add_outer(self._side, t, key, value)
        self._buffer(key, t, value)

    def _buffer(self, key: bytes, t: int, value: bytes) -> None:
        """Keep the record for the other side's joins (Kafka Streams' ``KStreamJoinWindow``,
        which puts after the join): a record already beyond retention would never be read."""
        assert self._this is not None
        observed = max(self.state.observed.get(self._this_store_name, -1), t)
        self.state.observed[self._this_store_name] = observed
        if t < observed - self._windows.retention_ms + 1:
            return
        raw = self._this.fetch(key, t, t)
        values = [] if raw is None else decode_list(raw)
        values.append(value)
        self._this.put(key, t, t, encode_list(values), t)

    def advance(self, timestamp: int) -> None:
        self.state.stream_time = max(self.state.stream_time, timestamp)
        # Our extension: a tick scans where an in-order data record of this side would (Kafka
        # Streams reads a control record as data, and a null-valued one does not scan).
        if timestamp == self.state.stream_time and self._scan_due():
            self._emit_closed(None)
        super().advance(timestamp)

    def _scan_due(self) -> bool:
        return self.state.outer_store is not None and self.state.scan_due(
            self._reach_after, self._windows.grace_ms
        )

    def _emit_closed(self, headers: Headers | None) -> None:
        """Forward the unjoined records whose window closed, joined with ``None``, stamped with
        their own timestamp (with the headers of the record that triggered the scan, as Kafka
        Streams does; none on a tick)."""
        for timestamp, side, key_bytes, values in self.state.closed(self._windows):
            key = self._key_serde.deserialize(key_bytes)
            serde = self._value_serdes[side]
            for raw in values:
                value = serde.deserialize(raw)
                joined = self._joiner(value, None) if side == _LEFT else self._joiner(None, value)
                self.forward(Record(key, joined, timestamp, headers))

    def control_progress(self) -> int:
        # Joined results are stamped max(t, other) >= t. Unjoined ones carry their own
        # timestamp: after a scan at stream time s, every record still buffered unjoined is at
        # least s - max(before, after) - grace (its window is open), and is emitted later
        # stamped so; until the next scan, s stays the bound (however far time moves on). An
        # inner join buffers nothing unjoined and holds nothing back.
        seen = max(self.parents_progress(), self.state.scanned)
        if self._outer_store_name is None or seen < 0:
            return seen
        windows = self._windows
        held = seen - max(windows.before_ms, windows.after_ms) - windows.grace_ms
        return held if held >= 0 else NO_PROGRESS

    def flush(self) -> None:
        # Retention: remove the buffered records no join reads any more.
        assert self._this is not None
        observed = self.state.observed.get(self._this_store_name, -1)
        cutoff = observed - self._windows.retention_ms + 1
        self._purge.run(self._this, lambda start, _end: start < cutoff, observed)

"""Time windows (Kafka Streams' ``KStreamWindowAggregate``: tumbling and hopping) and sliding
windows (``KStreamSlidingWindowAggregate``). Like session windows they are time-driven: each
keeps its own observed stream time, moved by data and control records.

Both keep every window in a window store as ``ValueAndTimestamp(aggregate, timestamp)``, the
timestamp being the largest record timestamp aggregated into the window (Kafka Streams'
``TimestampedWindowStore``); every update is forwarded with that timestamp and with the headers
of the record that caused it, keyed by :class:`~streams_runtime.windowed.Windowed`; with the
record cache on, once per window and cache flush (Kafka Streams' ``CachingWindowStore``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from streams_runtime.processors.base import (
    ProcessorContext,
)
from streams_runtime.processors.windowed_aggregate import WindowedAggregateProcessor
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import ValueAndTimestamp
from streams_runtime.state import WindowStore
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SlidingWindows, TimeWindows

__all__ = ["SlidingWindowAggregateProcessor", "TimeWindowAggregateProcessor"]

W = TypeVar("W", TimeWindows, SlidingWindows)


class _Aggregate(NamedTuple):
    """A window's aggregate and the largest timestamp in it."""

    value: Any
    timestamp: int


@dataclass
class _Scan:
    """What a sliding-window aggregation found among a key's windows around a record at ``t``."""

    starts: set[int] = field(default_factory=set)  # the starts of every window seen
    left: _Aggregate | None = None  # the window ending just before t's left window
    right: _Aggregate | None = None  # the latest window containing t (before the update)
    left_created: bool = False  # t's left window [t - d, t] exists
    right_created: bool = False  # t's right window [t + 1, t + 1 + d] exists
    previous: int | None = None  # the timestamp of the record before t, if within reach


class _TimestampedWindowAggregate(WindowedAggregateProcessor[WindowStore, W]):
    """What time and sliding windows share: windows kept as ``ValueAndTimestamp`` in a window
    store, every update forwarded with the causing record's headers."""

    def _open_store(self, context: ProcessorContext) -> WindowStore:
        return context.window_store(self._store_name)

    def _decode(self, raw: bytes) -> _Aggregate:
        stored = ValueAndTimestamp.from_bytes(raw)
        return _Aggregate(self._value_serde.deserialize(stored.value), stored.timestamp)

    def _put(
        self, record: Record[Any, Any], key_bytes: bytes, start: int, end: int, agg: _Aggregate
    ) -> None:
        """Store ``agg`` as the window's aggregate (``None`` deletes it) and forward it (the
        cache forwards it when it flushes, when the store is cached)."""
        raw = self._value_serde.serialize(agg.value)
        stored = None if raw is None else ValueAndTimestamp(raw, agg.timestamp).to_bytes()
        self._write(key_bytes, start, end, stored, record.timestamp, record.headers)
        if not self.cached:
            self.forward(
                Record(Windowed(record.key, start, end), agg.value, agg.timestamp, record.headers)
            )

    def _flushed_record(  # noqa: PLR0917 - one flushed window
        self,
        key: Any,
        start: int,
        end: int,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> Record[Any, Any]:
        # Stamped with the aggregate's timestamp; a delete with its write's (Kafka Streams'
        # TimestampedCacheFlushListener).
        if value is None:
            return Record(Windowed(key, start, end), None, timestamp, headers)
        agg = self._decode(value)
        return Record(Windowed(key, start, end), agg.value, agg.timestamp, headers)


class TimeWindowAggregateProcessor(_TimestampedWindowAggregate[TimeWindows]):
    """Tumbling and hopping windows (Kafka Streams' ``KStreamWindowAggregate``).

    A record at ``t`` updates every window ``[start, start + size)`` containing it, in ascending
    start order; a window with ``end + grace <= stream time`` (the record's own timestamp
    included) no longer takes records: the record is dropped from it and counted (once per such
    window, as Kafka Streams). A window's first record starts it from ``initializer()``; a
    ``None`` aggregate deletes the window and is forwarded as a tombstone.
    """

    name = "time_window_aggregate"

    def _aggregate(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        key_bytes = self._store_key(record)
        if key_bytes is None:
            return
        t = record.timestamp
        self.observed_stream_time = max(self.observed_stream_time, t)
        for start in self._windows.window_starts(t):
            end = start + self._windows.size_ms
            if self._windows.is_late(end, self.observed_stream_time):
                self._late()
                continue
            self._accepted = max(self._accepted, t)
            raw = self._store.fetch(key_bytes, start, end)
            old = None if raw is None else self._decode(raw)
            if old is None or old.value is None:
                value, timestamp = self._initializer(), t
            else:
                value, timestamp = old.value, max(t, old.timestamp)
            aggregate = self._aggregator(record.key, record.value, value)
            self._put(record, key_bytes, start, end, _Aggregate(aggregate, timestamp))

    def _expired(self, start: int, end: int) -> bool:
        return self._windows.is_late(end, self.observed_stream_time)


class SlidingWindowAggregateProcessor(_TimestampedWindowAggregate[SlidingWindows]):
    """Sliding windows (Kafka Streams' ``KStreamSlidingWindowAggregate``, as it runs on stores
    that iterate backwards, its default).

    Windows ``[start, start + d]`` (``d`` the time difference, both bounds inclusive) exist only
    where records are: a record at ``t`` creates its left window ``[t - d, t]`` and, when later
    records are within ``d``, its right window ``[t + 1, t + 1 + d]``; it also creates the
    right window of the record before it, and updates every existing window containing ``t``.
    Records before ``d`` share the window ``[0, d]``. A window with ``end + grace < stream time``
    no longer takes records (dropped and counted, once per window); a record whose left window is
    already closed is dropped whole. Records with a null key or value are dropped and counted.

    Stored windows are visible while their start is after ``latest start stored - retention``
    (Kafka Streams' segmented window store bound), the same windows Kafka Streams finds.
    """

    name = "sliding_window_aggregate"
    _latest_start = -1  # the store's own stream time: the latest window start put

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        assert self._store is not None
        for _key, start, _end, _value in self._store.items():
            self._latest_start = max(self._latest_start, start)

    def _fetch(
        self, key_bytes: bytes, time_from: int, time_to: int
    ) -> list[tuple[int, _Aggregate]]:
        """Visible windows of the key starting in ``[time_from, time_to]``, ascending."""
        assert self._store is not None
        lowest = max(time_from, self._latest_start - self._windows.retention_ms + 1)
        return [
            (start, self._decode(raw))
            for start, _end, raw in self._store.fetch_range(key_bytes, lowest, time_to)
        ]

    def _update(
        self, record: Record[Any, Any], key_bytes: bytes, start: int, agg: _Aggregate
    ) -> None:
        """Kafka Streams' ``updateWindowAndForward``: fold the record into the window, unless
        the window is closed (then count the record dropped)."""
        end = start + self._windows.time_difference_ms
        if self._windows.is_late(end, self.observed_stream_time):
            self._late()
            return
        self._accepted = max(self._accepted, record.timestamp)
        # An aggregate of None is a window without one (ValueAndTimestamp.make(null, ...) is null)
        t = record.timestamp
        timestamp = t if agg.value is None else max(t, agg.timestamp)
        aggregate = self._aggregator(record.key, record.value, agg.value)
        self._put_window(record, key_bytes, start, _Aggregate(aggregate, timestamp))

    def _put_window(
        self, record: Record[Any, Any], key_bytes: bytes, start: int, agg: _Aggregate
    ) -> None:
        self._latest_start = max(self._latest_start, start)
        self._put(record, key_bytes, start, start + self._windows.time_difference_ms, agg)

    def _aggregate(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        if record.value is None and record.key is not None:
            assert self._context is not None
            self._context.record_dropped(self._store_name, "null-value")
            return
        key_bytes = self._store_key(record)
        if key_bytes is None:
            return
        t, d = record.timestamp, self._windows.time_difference_ms
        self.observed_stream_time = max(self.observed_stream_time, t)
        if self._windows.is_late(t + d, self.observed_stream_time):
            self._late()
            return
        if t < d:
            self._process_early(record, key_bytes)
        else:
            self._process_reverse(record, key_bytes)

    def _process_reverse(self, record: Record[Any, Any], key_bytes: bytes) -> None:
        """Kafka Streams' ``processReverse``: the key's windows starting from ``t - 2d`` to
        ``t + 1``, latest first, updated while they contain ``t``; then the missing ones."""
        t, d = record.timestamp, self._windows.time_difference_ms
        scan = _Scan()
        for start, agg in reversed(self._fetch(key_bytes, max(0, t - 2 * d), t + 1)):
            scan.starts.add(start)
            end = start + d
            if start == t + 1:
                scan.right_created = True
            elif end > t:
                if scan.right is None:
                    scan.right = agg
                self._update(record, key_bytes, start, agg)
            elif end == t:
                scan.left_created = True
                self._update(record, key_bytes, start, agg)
                if agg.timestamp >= t:
                    return  # a record at t already created every window it needs
                scan.previous = agg.timestamp
            else:
                scan.left, scan.previous = agg, agg.timestamp
                break
        self._create_windows(record, key_bytes, scan)

    def _create_windows(self, record: Record[Any, Any], key_bytes: bytes, scan: _Scan) -> None:
        """Kafka Streams' ``createWindows``: the previous record's right window, the record's
        left window and its right one, unless they exist (or would be empty)."""
        t, d = record.timestamp, self._windows.time_difference_ms
        previous, left, right = scan.previous, scan.left, scan.right
        if previous is not None:
            previous_right = previous + 1
            if previous_right not in scan.starts and previous_right + d >= t:
                self._update(record, key_bytes, previous_right, _Aggregate(self._initializer(), t))
        if not scan.left_created:
            if previous is not None and left is not None and t - d <= previous:
                agg = _Aggregate(left.value, t)
            else:
                agg = _Aggregate(self._initializer(), t)
            self._update(record, key_bytes, t - d, agg)
        if not scan.right_created and right is not None and right.timestamp > t:
            self._put_window(record, key_bytes, t + 1, right)

    def _process_early(self, record: Record[Any, Any], key_bytes: bytes) -> None:
        """A record before ``d``: it goes into the window ``[0, d]``, which holds every early
        record (no window starts before 0)."""
        t = record.timestamp
        combined: _Aggregate | None = None
        right: _Aggregate | None = None
        right_created = False
        starts: set[int] = set()
        previous: int | None = None
        for start, agg in self._fetch(key_bytes, 0, t + 1):
            starts.add(start)
            if start == 0:
                combined = agg
                if agg.timestamp < t:
                    previous = agg.timestamp
            elif start <= t:
                right = agg
                self._update(record, key_bytes, start, agg)
            elif start == t + 1:
                right_created = True
        if right is None and combined is not None and combined.timestamp > t:
            right = combined
        if not right_created and right is not None and right.timestamp > t:
            self._put_window(record, key_bytes, t + 1, right)
        if previous is not None and previous + 1 not in starts:
            self._update(record, key_bytes, previous + 1, _Aggregate(self._initializer(), t))
        if combined is None:
            self._update(record, key_bytes, 0, _Aggregate(self._initializer(), t))
        else:
            self._update(record, key_bytes, 0, combined)

    def _expired(self, start: int, end: int) -> bool:
        return start <= self._latest_start - self._windows.retention_ms

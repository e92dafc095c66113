"""Session windows (Kafka Streams' ``KStreamSessionWindowAggregate``) and the suppression of
their updates until each session's final result (``KTableSuppressProcessor``). Both are
time-driven: they keep their own observed stream time, moved by data and control records."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from streams_runtime.processors.base import (
    Processor,
    ProcessorContext,
)
from streams_runtime.processors.windowed_aggregate import WindowedAggregateProcessor
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.state.changelog import session_changelog_key, split_session_changelog_key
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, WindowSpec

__all__ = ["SessionAggregateProcessor", "SuppressProcessor"]


class SessionAggregateProcessor(WindowedAggregateProcessor[SessionStore, SessionWindows]):
    """Session-window aggregation (Kafka Streams' ``KStreamSessionWindowAggregate``).

    A record at ``t`` merges with every *retained* session of its key where
    ``start - gap <= t <= end + gap``; it is late, dropped and counted when the merged session
    ends before ``stream time - grace - gap``. A session is retained while its end is after
    ``stream time - gap - grace`` (:attr:`SessionWindows.retention_ms`), so once its final result
    is due it never changes again. Merged sessions are deleted and forwarded as tombstones, the
    merged session as an update, both with the session's end as timestamp and without headers
    (Kafka Streams forwards new records here, not the input's). With the record cache on, the
    updates of a commit interval are forwarded when the cache flushes, once per session, with
    the headers of its latest write; a session made and merged away in between is never
    forwarded (Kafka Streams' ``CachingSessionStore``).
    """

    name = "session_aggregate"

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(
            store_name,
            windows,
            key_serde,
            value_serde,
            initializer=initializer,
            aggregator=aggregator,
        )
        self._merger = merger

    def _open_store(self, context: ProcessorContext) -> SessionStore:
        return context.session_store(self._store_name)

    def _aggregate(self, record: Record[Any, Any]) -> None:
        store = self._store
        assert store is not None
        assert self._context is not None
        key_bytes = self._store_key(record)
        if key_bytes is None:
            return
        t = record.timestamp
        windows = self._windows
        gap = windows.gap_ms
        # Only retained sessions merge, as in Kafka Streams' session stores: a session ending at
        # or before the retention cutoff already had its final result, so merging a record into
        # it would give a second, overlapping one. The cutoff is taken before this record moves
        # stream time (the store has not seen it yet).
        retained_after = self.observed_stream_time - windows.retention_ms
        found = [
            session
            for session in store.find_sessions(key_bytes, t - gap, t + gap)
            if session[1] > retained_after
        ]
        self.observed_stream_time = max(self.observed_stream_time, t)
        # merge_sessions, without a SessionWindow per session (the store's are valid ones).
        merged_start = merged_end = t
        for start, end, _ in found:
            merged_start = min(merged_start, start)
            merged_end = max(merged_end, end)
        if windows.is_late(merged_end, self.observed_stream_time):
            self._late()
            return
        self._accepted = max(self._accepted, t)
        key = record.key
        aggregate = self._initializer()
        # Every session the record merges with is replaced, and its removal forwarded, even one
        # with the merged session's bounds (as Kafka Streams does); only a record landing on a
        # single-point session at its own timestamp updates it in place.
        replaced = merged_start != t or merged_end != t
        # Cached, the writes keep the record's headers: Kafka Streams' cache entries take the
        # input record's context, and its flush listener forwards them with it.
        cached, headers = self.cached, record.headers
        for _, _, raw in found:
            aggregate = self._merger(key, aggregate, self._value_serde.deserialize(raw))
        aggregate = self._aggregator(key, record.value, aggregate)
        raw_aggregate = self._value_serde.serialize(aggregate)
        # Removed once the aggregate is known (Kafka Streams' KStreamSessionWindowAggregate):
        # a record the aggregator or the serde refuses leaves the sessions it would merge.
        if replaced:
            for start, end, _ in found:
                self._write(key_bytes, start, end, None, t, headers)
                if not cached:
                    self.forward(Record(Windowed(key, start, end), None, end))
        self._write(key_bytes, merged_start, merged_end, raw_aggregate, t, headers)
        if not cached:
            self.forward(Record(Windowed(key, merged_start, merged_end), aggregate, merged_end))

    def _flushed_record(  # noqa: PLR0917 - one flushed window
        self,
        key: Any,
        start: int,
        end: int,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> Record[Any, Any]:
        # Stamped with the session's end (Kafka Streams' SessionCacheFlushListener).
        aggregate = None if value is None else self._value_serde.deserialize(value)
        return Record(Windowed(key, start, end), aggregate, end, headers)

    def _expired(self, start: int, end: int) -> bool:
        return end <= self.observed_stream_time - self._windows.retention_ms


class SuppressProcessor(Processor):
    """Suppress until window closes (Kafka Streams' ``KTableSuppressProcessor`` with final
    results): keeps the latest update of every window and forwards it once the window is final
    (``windows.is_final``): sessions once ``end + gap + grace <= observed stream time``, time and
    sliding windows once ``end + grace <= observed stream time``. Tombstones (merged-away
    sessions, deleted windows) remove the window, so it is never emitted. The buffer is a
    changelogged store, so a restart neither loses nor repeats final results (time and sliding
    windows keep each update's timestamp there too; headers are not kept across a restart);
    control records advance the observed stream time too, and so does a cached aggregation
    above it when its stream time closes windows (:meth:`observe`).

    Progress passes through unchanged: every window still buffered starts after the
    aggregation's bound (sessions: end after ``stream time - gap - grace``; time and sliding
    windows: start after ``stream time - size (difference) - grace``), since the others were
    emitted, and an update's timestamp is never before its window's start."""

    name = "suppress"
    keeps_order = True

    def __init__(
        self,
        store_name: str,
        windows: WindowSpec,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._windows = windows
        # Sessions' updates are stamped with their end; other windows' timestamps are stored.
        self._timestamped = not isinstance(windows, SessionWindows)
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None
        self._pending: dict[bytes, Record[Any, Any]] = {}
        self._by_end: list[tuple[int, bytes]] = []  # heap; may hold stale entries
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)
        for buffer_key, raw in self._store.items():
            key_bytes, start, end = split_session_changelog_key(buffer_key)
            windowed = Windowed(self._key_serde.deserialize(key_bytes), start, end)
            data, timestamp = raw, end
            if self._timestamped:
                data, timestamp = ValueAndTimestamp.from_bytes(raw)
            value = self._value_serde.deserialize(data)
            self._pending[buffer_key] = Record(windowed, value, timestamp)
            self._by_end.append((end, buffer_key))
        heapq.heapify(self._by_end)
        context.suppress_buffer_size(self._store_name, len(self._pending))

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        windowed: Windowed[Any] = record.key
        buffer_key = session_changelog_key(
            self._key_serde.serialize(windowed.key) or b"", windowed.start, windowed.end
        )
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        if record.value is None:
            if self._pending.pop(buffer_key, None) is not None:
                self._store.put(buffer_key, None, record.timestamp)
        else:
            if buffer_key not in self._pending:
                heapq.heappush(self._by_end, (windowed.end, buffer_key))
            self._pending[buffer_key] = record
            raw = self._value_serde.serialize(record.value)
            if self._timestamped:
                raw = ValueAndTimestamp(raw or b"", record.timestamp).to_bytes()
            self._store.put(buffer_key, raw, record.timestamp)
        self._emit_closed()

    def advance(self, timestamp: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        self._emit_closed()
        super().advance(timestamp)

    @property
    def observed_time(self) -> int:
        return self.observed_stream_time

    def earliest_end(self) -> int | None:
        """The smallest end of the windows buffered (or of one emitted or merged away since:
        never above the truth)."""
        return self._by_end[0][0] if self._by_end else None

    def observe(self, stream_time: int) -> None:
        """The aggregation's stream time, which a record cache kept from reaching here: emit
        what it closed, as the update carrying that time would have (nothing downstream is
        told: no time passed there without data)."""
        if stream_time > self.observed_stream_time:
            self.observed_stream_time = stream_time
            self._emit_closed()

    def _emit_closed(self) -> None:
        assert self._store is not None
        assert self._context is not None
        heap, windows, now = self._by_end, self._windows, self.observed_stream_time
        emitted = False
        while heap and windows.is_final(heap[0][0], now):
            _, buffer_key = heapq.heappop(heap)
            record = self._pending.pop(buffer_key, None)
            if record is None:
                continue  # merged away (tombstone) after it was buffered
            self._store.put(buffer_key, None, max(record.timestamp, now))
            self.forward(record)
            emitted = True
        if len(heap) > 2 * len(self._pending) + 64:
            # Stale entries of merged-away sessions: rebuild rather than let them pile up.
            self._by_end = [(r.key.end, k) for k, r in self._pending.items()]
            heapq.heapify(self._by_end)
        if emitted:
            self._context.suppress_buffer_size(self._store_name, len(self._pending))

    def flush(self) -> None:
        assert self._context is not None
        self._context.suppress_buffer_size(self._store_name, len(self._pending))

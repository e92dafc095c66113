"""A windowed count suppressed until each window closes, run as one operator: the chain
``source -> SessionAggregateProcessor or TimeWindowAggregateProcessor (a count) ->
SuppressProcessor`` of a task with one input, a batch of records per call into a core (the
native one, or its pure-Python reference: :mod:`streams_runtime.fused.session_core` and
:mod:`~streams_runtime.fused.time_window_core` state the semantics, those of the chain).

What stays Python: the source's serdes (every record is deserialized as through the chain, so a
bad record meets the same policy), and everything below the suppression, which sees only final
results. The stores are the chain's, with the same contents once written: the core writes
behind, at every commit, or as soon as its unwritten changes outgrow the record cache's budget
(0: after every batch), to the window (or session) store and to the suppression's buffer
store, each change with the input offset that caused it (restore's committed-input rule
holds)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from streams_runtime.errors import StreamsError
from streams_runtime.fused import session_core_type, time_window_core_type
from streams_runtime.fused.window_core import Final
from streams_runtime.processors import (
    NO_PROGRESS,
    Processor,
    SessionAggregateProcessor,
    SourceProcessor,
    SuppressProcessor,
    TimeWindowAggregateProcessor,
)
from streams_runtime.record import Record, SourceRecord
from streams_runtime.serdes import Serde, SerializationError, String, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore, SourcePosition
from streams_runtime.state.changelog import session_changelog_key, split_session_changelog_key
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, TimeWindows

__all__ = ["FusedWindowCount", "fusable_window_count"]

_QUERY_TRIES = 100


Counting = SessionAggregateProcessor | TimeWindowAggregateProcessor
Chain = tuple[SourceProcessor, Counting, SuppressProcessor]


def fusable_window_count(processors: Sequence[Processor]) -> Chain | None:
    """The chain this operator can run in place of, if the processors have it: one source whose
    only child is a session or time window count whose only child is a suppression, with no
    other parent."""
    sources = [p for p in processors if isinstance(p, SourceProcessor)]
    if len(sources) != 1:
        return None
    (source,) = sources
    match source.children:
        case [SessionAggregateProcessor() | TimeWindowAggregateProcessor() as aggregate] if (
            aggregate.is_count
        ):
            pass
        case _:
            return None
    match aggregate.children:
        case [SuppressProcessor() as suppress] if suppress.parents == [aggregate]:
            return source, aggregate, suppress
        case _:
            return None


class FusedWindowCount(Processor):
    """The fused chain in the task's processor graph: the source's child, the parent of the
    suppression's children."""

    name = "fused_window_count"
    reorders = True  # windows are stamped behind their input

    def __init__(
        self,
        chain: Chain,
        *,
        session_store: SessionStore,
        buffer_store: KeyValueStore,
        position: SourcePosition,
        write_budget: int,
    ) -> None:
        super().__init__()
        source, aggregate, suppress = chain
        self.store_name = aggregate._store_name
        self.buffer_name = suppress._store_name
        windows = aggregate._windows
        assert isinstance(windows, SessionWindows | TimeWindows)
        self._windows = windows
        # Time windows keep their count's timestamp (ValueAndTimestamp), sessions their end.
        self._timed = isinstance(windows, TimeWindows)
        self._source_key_serde: Serde[Any] = source._key_serde
        self._source_value_serde: Serde[Any] = source._value_serde
        self._key_serde: Serde[Any] = aggregate._key_serde
        # Any failure of the quick way sends the batch the careful way (serdes' own errors).
        strings = type(self._source_key_serde) is String and type(self._key_serde) is String
        self._quick_key_of = self._string_key_of if strings else self._key_of
        self._value_serde: Serde[Any] = aggregate._value_serde
        self._sessions = session_store
        self._buffer = buffer_store
        self._position = position
        self._write_budget = write_budget
        self.core: Any = None
        # In the graph in place of the chain.
        source.children = [self]
        self.parents = [source]
        self.children = suppress.children
        for child in self.children:
            child.parents = [self if parent is suppress else parent for parent in child.parents]
        self._context: Any = None
        self.on_error: Callable[[Exception], None] | None = None
        """Takes what user code below the suppression raises for one emitted window (the
        others are still emitted); unset, it is raised."""

    def init(self, context: Any) -> None:
        """Start from the stores: every window the suppression still holds is pending (a
        window the store keeps past its final result is removed)."""
        self._context = context
        self.core = core = self._make_core(context.stream_time)
        pending = set()
        for state_key, raw in self._buffer.items():
            key, start, end = split_session_changelog_key(state_key)
            if self._timed:
                stored = ValueAndTimestamp.from_bytes(raw)
                core.load(
                    key, start, end, self._value_serde.deserialize(stored.value), stored.timestamp
                )
            else:
                core.load(key, start, end, self._value_serde.deserialize(raw))
            pending.add(state_key)
        for key, start, end, _ in list(self._sessions.items()):
            if session_changelog_key(key, start, end) not in pending:
                self._sessions.put(key, start, end, None, context.stream_time)
        context.suppress_buffer_size(self.buffer_name, core.pending())

    def _make_core(self, stream_time: int) -> Any:
        windows = self._windows
        keep_headers = self._write_budget > 0  # as through the record cache
        if isinstance(windows, TimeWindows):
            time_core = time_window_core_type()
            return time_core(
                windows.size_ms, windows.advance_ms, windows.grace_ms, stream_time, keep_headers
            )
        session_core = session_core_type()
        return session_core(windows.gap_ms, windows.grace_ms, stream_time, keep_headers)

    def process_batch(
        self, records: Sequence[SourceRecord], on_bad: Callable[[SourceRecord, Exception], None]
    ) -> None:
        """Count a batch of data records (control records go to :meth:`advance`); a record
        its serdes refuse goes to ``on_bad``, in order."""
        try:
            keys = [self._quick_key_of(record) for record in records]
        except Exception:  # a bad record among them: the careful way
            self._process_one_by_one(records, on_bad)
            return
        self._count(
            keys,
            [record.timestamp for record in records],
            [record.offset for record in records],
            [record.headers for record in records],
        )

    def _process_one_by_one(
        self, records: Sequence[SourceRecord], on_bad: Callable[[SourceRecord, Exception], None]
    ) -> None:
        keys: list[bytes | None] = []
        timestamps: list[int] = []
        offsets: list[int] = []
        headers: list[Any] = []
        for record in records:
            try:
                key = self._key_of(record)
            except SerializationError as exc:
                self._count(keys, timestamps, offsets, headers)
                keys, timestamps, offsets, headers = [], [], [], []
                on_bad(record, exc)
                continue
            keys.append(key)
            timestamps.append(record.timestamp)
            offsets.append(record.offset)
            headers.append(record.headers)
        self._count(keys, timestamps, offsets, headers)

    def _key_of(self, record: SourceRecord) -> bytes | None:
        """The record's key as the count stores it, after both of the source's serdes took
        the record (as the chain deserializes it)."""
        key = self._source_key_serde.deserialize(record.key)
        self._source_value_serde.deserialize(record.value)
        return None if key is None else self._key_serde.serialize(key) or b""

    def _string_key_of(self, record: SourceRecord) -> bytes | None:
        """:meth:`_key_of` when the source and the count both take keys as UTF-8 text: the
        key's bytes are what the count stores (checked to decode, as the serde would)."""
        key = record.key
        if key is not None:
            key.decode()
        self._source_value_serde.deserialize(record.value)
        return key

    def _count(
        self,
        keys: list[bytes | None],
        timestamps: list[int],
        offsets: list[int],
        headers: list[Any],
    ) -> None:
        if not keys:
            return
        finals, late, keyless = self.core.process(keys, timestamps, offsets, headers)
        context = self._context
        for _ in range(late):
            context.record_dropped(self.store_name, "late")
        for _ in range(keyless):
            context.record_dropped(self.store_name, "null-key")
        self._emit(finals)
        if self.core.dirty_bytes > self._write_budget:
            self._write_behind()

    def advance(self, timestamp: int) -> None:
        self._emit(self.core.advance(timestamp, self._position.offset))
        if self.core.dirty_bytes > self._write_budget:
            self._write_behind()
        super().advance(timestamp)

    def _emit(self, finals: list[Final]) -> None:
        if not finals:
            return
        deserialize = self._key_serde.deserialize
        on_error = self.on_error
        for key, start, end, count, timestamp, headers in finals:
            record = Record(Windowed(deserialize(key), start, end), count, timestamp, headers)
            if on_error is None:
                self.forward(record)
                continue
            try:
                self.forward(record)
            except StreamsError:
                raise  # the runtime's own failure (a fenced producer...), not the window's
            except Exception as exc:
                on_error(exc)
        self._context.suppress_buffer_size(self.buffer_name, self.core.pending())

    def control_progress(self) -> int:
        # As the windowed aggregation's (WindowedAggregateProcessor.control_progress).
        seen = max(self.core.accepted_time, super().control_progress())
        held = seen - self._windows.output_lag_ms
        return held if seen >= 0 and held >= 0 else NO_PROGRESS

    def flush(self) -> None:
        self._write_behind()
        self._context.suppress_buffer_size(self.buffer_name, self.core.pending())

    def _write_behind(self) -> None:
        """Write every change since the last time to both stores (and so their changelogs),
        each with the input offset that caused it."""
        position = self._position
        saved = position.offset
        serialize = self._value_serde.serialize
        try:
            for state_key, count, value_ts, offset, timestamp in self.core.take_writes():
                key, start, end = split_session_changelog_key(state_key)
                raw = None if count is None else serialize(count)
                if raw is not None and self._timed:
                    raw = ValueAndTimestamp(raw, value_ts).to_bytes()
                position.offset = offset
                self._sessions.put(key, start, end, raw, timestamp)
                self._buffer.put(state_key, raw, timestamp)
        finally:
            position.offset = saved

    def query_store(self) -> SessionStore:
        """The store as interactive queries read it: the windows processed so far, not those
        of the last write-behind."""
        return _QueriedSessions(self._sessions, self)


class _QueriedSessions(SessionStore):
    """The window or session store, its windows read from the fused operator (from the
    query's thread: a read that meets the stream thread inside the core is tried again)."""

    def __init__(self, store: SessionStore, fused: FusedWindowCount) -> None:
        super().__init__(store.name, store.partition, store.engine, None)
        self._fused = fused

    def find_sessions(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        fused = self._fused
        serialize = fused._value_serde.serialize
        for _ in range(_QUERY_TRIES):
            try:
                windows = fused.core.fetch(key)
                break
            except RuntimeError:  # the core is borrowed by the stream thread
                time.sleep(0.001)
        else:
            raise RuntimeError(f"store {self.name} stayed busy")
        found = []
        for start, end, count, *timestamp in windows:
            if end >= earliest_end and start <= latest_start:
                raw = serialize(count) or b""
                if timestamp:  # a time window's count, as the window store keeps it
                    raw = ValueAndTimestamp(raw, timestamp[0]).to_bytes()
                found.append((start, end, raw))
        return found

"""A windowed aggregation the native core runs (a count, sum, min, max, a reduce by the user's
reducer, or an aggregate by the user's initializer, aggregator and merger) suppressed until each
window closes, run as one operator: the chain ``source -> steps on values ->
SessionAggregateProcessor or TimeWindowAggregateProcessor -> SuppressProcessor``, which
:mod:`streams_runtime.fused.planner` replaces with this node when the topology is built; a
batch of records per call into the native core (``native/src``; its semantics are the
chain's, which its pure-Python twins in the tests state as an oracle).

What stays Python: the source's serdes (every record is deserialized as through the chain, so a bad
record meets the same policy); the steps on values (``filter``, ``map_values``, ``peek``, a
stream-table join), each the chain's own processor called through ``apply`` record by record, with
no record object or forward between them (a batch's steps all run before its aggregation: a
``peek`` sees a batch's records before any of their windows is emitted); the value serde (an
aggregate takes the round trip through it that the chain's store gives it, where that could change
it, and is serialized when written), and everything below the suppression, which sees only final
results. A reducer or serde raising for a record sends that record to the bad-record policy, as the
chain's processing error. The stores are the chain's, with the same contents once written: the core
writes behind, at every commit, or as soon as its unwritten changes outgrow the record cache's
budget (0: after every batch), to the window (or session) store and to the suppression's buffer
store, each change with the input offset that caused it (restore's committed-input rule holds)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from streams_runtime.errors import StreamsError
from streams_runtime.fused import BatchContext, Failure, Final
from streams_runtime.operations import (
    ReadTopics,
    SuppressUntilWindowCloses,
    WindowedAggregation,
)
from streams_runtime.processors import (
    DROPPED,
    NO_PROGRESS,
    BatchSourceProcessor,
    OnBadRecord,
    ProcessorContext,
    ValueStep,
)
from streams_runtime.record import Record, SourceRecord, TopicPartitionId
from streams_runtime.serdes import (
    Float,
    Integer,
    Json,
    Serde,
    SerializationError,
    String,
    ValueAndTimestamp,
)
from streams_runtime.state import KeyValueStore, SessionStore, SourcePosition
from streams_runtime.state.changelog import session_changelog_key, split_session_changelog_key
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, TimeWindows

__all__ = ["FusedWindowAggregate"]

_QUERY_TRIES = 100
_T = TypeVar("_T")


# Value serdes whose round trip keeps an int of 64 bits, a float (NaN aside) as they are:
# (ints, floats).
_EXACT: dict[type[Any], tuple[bool, bool]] = {
    Integer: (True, False),
    Float: (False, True),
    Json: (True, True),
}


class FusedWindowAggregate(BatchSourceProcessor):
    """The source, the windowed aggregation and the suppression of a fused chain as one node
    (:mod:`streams_runtime.fused.planner` puts it in the topology); the parent of the
    suppression's children. The task gives it each batch of its one input's records
    (:meth:`process_batch`)."""

    name = "fused_window_aggregate"
    keeps_order = False  # windows are stamped behind their input

    def __init__(
        self,
        source: ReadTopics,
        steps: Sequence[Callable[[], Any]],
        aggregate: WindowedAggregation,
        suppress: SuppressUntilWindowCloses,
        *,
        write_budget: int,
    ) -> None:
        super().__init__(source.key_serde, source.value_serde)
        self._step_factories = steps
        self._steps: list[Callable[[Any, Any], Any]] = []  # their processors' apply: at init
        kind = aggregate.aggregation.kind
        self._kind = kind
        self._counts = kind == "count"
        # The user's functions, called from the core: a reduce's reducer, an aggregate's three
        # (the built-ins' are the core's own).
        user = aggregate.aggregation
        self._functions: Any = (
            user.reducer
            if kind == "reduce"
            else (user.initializer, user.aggregator, user.merger)
            if kind == "aggregate"
            else None
        )
        self._needs_keys = kind == "aggregate"  # its functions take the record's key
        self.store_name = aggregate.store
        self.buffer_name = suppress.store
        windows = aggregate.windows
        assert isinstance(windows, SessionWindows | TimeWindows)
        self._windows = windows
        # Time windows keep their aggregate's timestamp (ValueAndTimestamp), sessions their end.
        self._timed = isinstance(windows, TimeWindows)
        # The stores' serdes (the source's are SourceProcessor's _key_serde and _value_serde).
        self._store_key_serde: Serde[Any] = aggregate.key_serde
        if self.contextual:  # serdes given the record's topic and headers, as on the chain
            self._key_value_of = self._key_value_in_context  # type: ignore[method-assign]
        # Any failure of the quick way sends the batch the careful way (serdes' own errors).
        strings = (
            type(self._key_serde) is String
            and type(self._store_key_serde) is String
            and not self.contextual
        )
        self._quick_key_of = self._string_key_of if strings else self._key_of
        self._quick_key_value_of = self._string_key_value_of if strings else self._key_value_of
        self._store_value_serde: Serde[Any] = aggregate.value_serde
        self._write_budget = write_budget
        self.core: Any = None
        self._context: Any = None
        self._sessions: SessionStore  # the stores, the task's input and position: at init
        self._buffer: KeyValueStore
        self._input: TopicPartitionId
        self._position: SourcePosition

    def init(self, context: ProcessorContext) -> None:
        """Start from the stores: every window the suppression still holds is pending (a
        window the store keeps past its final result is removed)."""
        assert isinstance(context, BatchContext)
        super().init(context)
        self._context = context
        self._input = context.batch_input  # what every write names
        for factory in self._step_factories:
            step = factory()
            assert isinstance(step, ValueStep)  # the planner fuses steps on values only
            step.init(context)
            self._steps.append(step.apply)
        self._position = context.position  # the current input: what a tick's writes name
        self._sessions = context.session_store(self.store_name)
        self._buffer = context.kv_store(self.buffer_name)
        self.core = core = self._make_core(context.stream_time)
        pending = set()
        for state_key, raw in self._buffer.items():
            key, start, end = split_session_changelog_key(state_key)
            if self._timed:
                stored = ValueAndTimestamp.from_bytes(raw)
                core.load(
                    key,
                    start,
                    end,
                    self._store_value_serde.deserialize(stored.value),
                    stored.timestamp,
                )
            else:
                core.load(key, start, end, self._store_value_serde.deserialize(raw))
            pending.add(state_key)
        for key, start, end, _ in list(self._sessions.items()):
            if session_changelog_key(key, start, end) not in pending:
                self._sessions.put(key, start, end, None, context.stream_time)
        context.suppress_buffer_size(self.buffer_name, core.pending())

    def _make_core(self, stream_time: int) -> Any:
        windows = self._windows
        keep_headers = self._write_budget > 0  # as through the record cache
        aggregation: dict[str, Any] = {}
        if not self._counts:
            serde = self._store_value_serde
            exact_ints, exact_floats = _EXACT.get(type(serde), (False, False))

            def normalize(aggregate: Any) -> Any:
                # What the chain reads back of what it stored.
                return serde.deserialize(serde.serialize(aggregate))

            aggregation = {
                "aggregation": self._kind,
                "functions": self._functions,
                "normalize": normalize,
                "exact_ints": exact_ints,
                "exact_floats": exact_floats,
            }
        from streams_runtime._native import SessionCore, TimeWindowCore  # fused only if built

        if isinstance(windows, TimeWindows):
            return TimeWindowCore(
                windows.size_ms,
                windows.advance_ms,
                windows.grace_ms,
                stream_time,
                keep_headers,
                **aggregation,
            )
        return SessionCore(
            windows.gap_ms, windows.grace_ms, stream_time, keep_headers, **aggregation
        )

    def process_batch(self, records: Sequence[SourceRecord], on_bad: OnBadRecord) -> None:
        """Aggregate a batch of data records (control records go to :meth:`advance`); a record
        its serdes refuse, or whose steps or aggregation raise, goes to ``on_bad``, in order."""
        if self._steps:
            self._process_through_steps(records, on_bad)
            return
        values: list[Any] | None = None
        try:
            if self._counts:
                keys = [self._quick_key_of(record) for record in records]
            else:
                pairs = [self._quick_key_value_of(record) for record in records]
                keys = [key for key, _ in pairs]
                values = [value for _, value in pairs]
        except StreamsError:
            raise  # the runtime's own failure (a registry out of reach), not a record's
        except Exception:  # a bad record among them: the careful way
            self._process_one_by_one(records, on_bad)
            return
        self._aggregate(records, keys, values, on_bad)

    def _process_through_steps(self, records: Sequence[SourceRecord], on_bad: OnBadRecord) -> None:
        """Deserialize each record and run it through the steps; aggregate those that come
        through, in runs between the records that meet ``on_bad``."""
        steps = self._steps
        store_key = self._store_key_serde.serialize
        key_value_of = self.source_key_value
        kept: list[SourceRecord] = []
        keys: list[bytes | None] = []
        values: list[Any] | None = None if self._counts else []
        key_objects: list[Any] | None = [] if self._needs_keys else None
        failure: tuple[str, Exception]
        for record in records:
            try:
                key, value = key_value_of(record)
            except SerializationError as exc:
                failure = ("deserialization", exc)
            else:
                try:
                    for step in steps:
                        value = step(key, value)
                        if value is DROPPED:
                            break
                    else:
                        keys.append(None if key is None else store_key(key) or b"")
                        kept.append(record)
                        if values is not None:
                            values.append(value)
                        if key_objects is not None:
                            key_objects.append(key)
                    continue
                except StreamsError:
                    raise  # the runtime's own failure, not the record's
                except Exception as exc:
                    failure = ("processing", exc)
            # What came before the refused record is aggregated first, then it meets on_bad.
            self._aggregate(kept, keys, values, on_bad, key_objects)
            kept, keys = [], []
            values = None if self._counts else []
            key_objects = [] if self._needs_keys else None
            on_bad(record, *failure)
        self._aggregate(kept, keys, values, on_bad, key_objects)

    def _process_one_by_one(self, records: Sequence[SourceRecord], on_bad: OnBadRecord) -> None:
        good: list[SourceRecord] = []
        keys: list[bytes | None] = []
        values: list[Any] | None = None if self._counts else []
        for record in records:
            try:
                key, value = self._key_value_of(record)
            except SerializationError as exc:
                self._aggregate(good, keys, values, on_bad)
                good, keys, values = [], [], None if self._counts else []
                on_bad(record, "deserialization", exc)
                continue
            good.append(record)
            keys.append(key)
            if values is not None:
                values.append(value)
        self._aggregate(good, keys, values, on_bad)

    def _key_of(self, record: SourceRecord) -> bytes | None:
        """The record's key as the aggregation stores it, after both of the source's serdes took
        the record (as the chain deserializes it)."""
        return self._key_value_of(record)[0]

    def _key_value_of(self, record: SourceRecord) -> tuple[bytes | None, Any]:
        """The record's key as the aggregation stores it, and its value."""
        key = self._key_serde.deserialize(record.key)
        value = self._value_serde.deserialize(record.value)
        return None if key is None else self._store_key_serde.serialize(key) or b"", value

    def _key_value_in_context(self, record: SourceRecord) -> tuple[bytes | None, Any]:
        """:meth:`_key_value_of` with context-aware source serdes."""
        key, value = self.key_value_of(record)
        return None if key is None else self._store_key_serde.serialize(key) or b"", value

    def _source_key(self, record: SourceRecord) -> Any:
        """The record's key as the source deserializes it: what an aggregate's functions take
        (the record deserialized fine before)."""
        if self.contextual:
            return self.key_value_of(record)[0]
        return self._key_serde.deserialize(record.key)

    def _string_key_of(self, record: SourceRecord) -> bytes | None:
        """:meth:`_key_of` when the source and the aggregation both take keys as UTF-8 text:
        the key's bytes are what the aggregation stores (checked to decode, as the serde
        would)."""
        key = record.key
        if key is not None:
            key.decode()
        self._value_serde.deserialize(record.value)
        return key

    def _string_key_value_of(self, record: SourceRecord) -> tuple[bytes | None, Any]:
        """:meth:`_key_value_of` with keys as UTF-8 text (see :meth:`_string_key_of`)."""
        key = record.key
        if key is not None:
            key.decode()
        return key, self._value_serde.deserialize(record.value)

    def _aggregate(
        self,
        records: Sequence[SourceRecord],
        keys: list[bytes | None],
        values: list[Any] | None,
        on_bad: OnBadRecord,
        key_objects: list[Any] | None = None,
    ) -> None:
        """Aggregate ``records`` (their store keys and values; ``key_objects``: their keys as
        the source gave them, when known); what raises meets ``on_bad`` and the rest goes on."""
        if key_objects is None and self._needs_keys:
            key_objects = [self._source_key(record) for record in records]
        while keys:
            failure: Failure | None
            finals, late, keyless, failure = self.core.process(
                keys,
                [record.timestamp for record in records],
                [record.offset for record in records],
                [record.headers for record in records],
                values,
                key_objects,
            )
            context = self._context
            for _ in range(late):
                context.record_dropped(self.store_name, "late")
            for _ in range(keyless):
                context.record_dropped(self.store_name, "null-key")
            self._emit(finals)
            if self.core.dirty_bytes > self._write_budget:
                self._write_behind()
            if failure is None:
                return
            at, exc = failure
            on_bad(records[at], "processing", exc)
            records, keys = records[at + 1 :], keys[at + 1 :]
            values = None if values is None else values[at + 1 :]
            key_objects = None if key_objects is None else key_objects[at + 1 :]

    def advance(self, timestamp: int) -> None:
        # The source's control time first, as when the chain's source passed the time on.
        self._control_time = max(self._control_time, timestamp)
        self._emit(self.core.advance(timestamp, self._position.offset))
        if self.core.dirty_bytes > self._write_budget:
            self._write_behind()
        super().advance(timestamp)

    def _emit(self, finals: list[Final]) -> None:
        if not finals:
            return
        deserialize = self._store_key_serde.deserialize
        on_error = self.on_error
        for key, start, end, aggregate, timestamp, headers in finals:
            record = Record(Windowed(deserialize(key), start, end), aggregate, timestamp, headers)
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
        tp = self._input
        serialize = self._store_value_serde.serialize
        for state_key, aggregate, value_ts, offset, timestamp in self.core.take_writes():
            key, start, end = split_session_changelog_key(state_key)
            raw = None if aggregate is None else serialize(aggregate)
            if raw is not None and self._timed:
                raw = ValueAndTimestamp(raw, value_ts).to_bytes()
            source = (tp, offset)
            self._sessions.put(key, start, end, raw, timestamp, source=source)
            self._buffer.put(state_key, raw, timestamp, source=source)

    def query_store(self, name: str) -> SessionStore | None:
        """The store ``name`` as interactive queries read it, if the operator keeps it: the
        windows processed so far, not those of the last write-behind."""
        return _QueriedSessions(self._sessions, self) if name == self.store_name else None


class _QueriedSessions(SessionStore):
    """The window or session store, its windows read from the fused operator (from the
    query's thread: a read that meets the stream thread inside the core is tried again)."""

    def __init__(self, store: SessionStore, fused: FusedWindowAggregate) -> None:
        super().__init__(store.name, store.partition, store.engine, None)
        self._fused = fused

    def find_sessions(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        return [
            (start, end, raw)
            for start, end, raw in self._windows(key)
            if end >= earliest_end and start <= latest_start
        ]

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        found = [
            (key, start, end, raw)
            for key in self._borrowed(lambda core: core.keys())
            for start, end, raw in self._windows(key)
            if time_from <= start <= time_to
        ]
        found.sort(key=lambda w: (w[1], w[0], w[2]))
        return found

    def _windows(self, key: bytes) -> list[tuple[int, int, bytes]]:
        """The key's open windows, their values as the store keeps them."""
        serialize = self._fused._store_value_serde.serialize
        found = []
        for start, end, aggregate, *timestamp in self._borrowed(lambda core: core.fetch(key)):
            raw = serialize(aggregate) or b""
            if timestamp:  # a time window's aggregate, as the window store keeps it
                raw = ValueAndTimestamp(raw, timestamp[0]).to_bytes()
            found.append((start, end, raw))
        return found

    def _borrowed(self, read: Callable[[Any], _T]) -> _T:
        """``read(core)``, tried again while the stream thread has the core borrowed."""
        for _ in range(_QUERY_TRIES):
            try:
                return read(self._fused.core)
            except RuntimeError:  # the core is borrowed by the stream thread
                time.sleep(0.001)
        raise RuntimeError(f"store {self.name} stayed busy")

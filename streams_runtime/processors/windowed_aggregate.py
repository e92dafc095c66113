"""What session, time and sliding window aggregations share: they are time-driven (each keeps
its own observed stream time, moved by data and control records), hold progress back by how far
behind the latest time their output can be stamped, and purge expired windows from their store
(:class:`~streams_runtime.processors.retention.RetentionPurge`).

With the record cache on, their store is a
:class:`~streams_runtime.state.CachingSessionStore`: updates are forwarded when the cache
flushes them, once per window and flush (Kafka Streams' ``SessionCacheFlushListener`` and
``TimestampedCacheFlushListener``), not as they happen.

**Windows close on time with the cache on** (docs/runtime/windows.md). A suppression sees only
what the cache forwards, so without more it would learn that a window closed at the next commit
or eviction: up to a commit interval late. So when the aggregation's stream time passes the
close of a window the cache still holds dirty or a suppression below still buffers, the
aggregation flushes its cache there and then: after the record that moved time (as if Kafka
Streams had committed right after it), or before a control record's time reaches the
suppression. Every update of a closing window reaches the suppression before the time that
closes it, and the suppression evaluates at the aggregation's stream time (the time it would
have seen with the cache off): final results are those without the cache, and come out at the
record or tick that closes them."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from streams_runtime.processors.base import NO_PROGRESS, AggregateProcessor, ProcessorContext
from streams_runtime.processors.retention import RetentionPurge
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde
from streams_runtime.state import SessionStore
from streams_runtime.windows import WindowSpec

__all__ = ["FinalResults", "WindowedAggregateProcessor"]

S = TypeVar("S", bound=SessionStore)
W = TypeVar("W", bound=WindowSpec)


@runtime_checkable
class FinalResults(Protocol):
    """A child holding a windowed aggregation's updates until their window closes (a
    suppression), which the aggregation tells when its stream time moved."""

    def earliest_end(self) -> int | None:
        """The smallest end of the windows it still holds (``None``: none)."""
        ...

    @property
    def observed_time(self) -> int:
        """The stream time it evaluated at last."""
        ...

    def observe(self, stream_time: int) -> None:
        """The aggregation's stream time is ``stream_time``: emit the windows now closed."""
        ...


class WindowedAggregateProcessor(AggregateProcessor, Generic[S, W]):
    """Base of the windowed aggregations over a store of windows ``S`` (a session or window
    store) shaped by ``W``."""

    keeps_order = False

    def __init__(
        self,
        store_name: str,
        windows: W,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(
            store_name, key_serde, value_serde, initializer=initializer, aggregator=aggregator
        )
        self._windows = windows
        self._store: S | None = None
        self.observed_stream_time = -1
        self._accepted = NO_PROGRESS  # largest timestamp aggregated (not dropped)
        self._purge = RetentionPurge()
        self._cached = False  # updates are forwarded by the cache's flushes
        # Cached: the smallest end of the windows written since this processor last saw the
        # cache flushed (never above the truth: an eviction's flush does not lower it), and
        # the children holding results until their window closes.
        self._dirty_end: int | None = None
        self._finals: list[FinalResults] = []

    @property
    def cached(self) -> bool:
        """Whether the store is cached, and so updates are forwarded when flushed."""
        return self._cached

    @abstractmethod
    def _open_store(self, context: ProcessorContext) -> S:
        """The store this aggregation keeps its windows in."""

    @abstractmethod
    def _expired(self, start: int, end: int) -> bool:
        """Whether no record can update the window ``[start, end]`` any more."""

    @abstractmethod
    def _flushed_record(  # noqa: PLR0917 - one flushed window
        self,
        key: Any,
        start: int,
        end: int,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> Record[Any, Any]:
        """What to forward for the flushed window ``[start, end]`` of ``key``: its value
        (``None``: deleted), the timestamp and the headers of its latest write."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._store = store = self._open_store(context)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)
        self._cached = store.set_flush_listener(self._forward_flushed)
        if self._cached:
            self._finals = [child for child in self.children if isinstance(child, FinalResults)]

    def process(self, record: Record[Any, Any]) -> None:
        self._aggregate(record)
        if self._finals:
            self._flush_if_closing()

    @abstractmethod
    def _aggregate(self, record: Record[Any, Any]) -> None:
        """Fold ``record`` into its windows (moving :attr:`observed_stream_time`)."""

    def _flush_if_closing(self) -> None:
        """After a record: if a window the cache holds dirty, or a suppression buffers, is
        closed now, flush the cache (its updates reach the suppression first) and let the
        suppressions evaluate at this stream time (module docstring). A dirty window may be
        closed without time moving: a record at exactly a session's or a sliding window's
        close still updates it."""
        now, is_final = self.observed_stream_time, self._windows.is_final
        dirty_end = self._dirty_end
        if dirty_end is None or not is_final(dirty_end, now):
            for final in self._finals:
                end = final.earliest_end()
                if end is not None and is_final(end, now) and now > final.observed_time:
                    break
            else:
                return
        store = self._store
        assert store is not None
        store.flush_cache()
        self._dirty_end = None
        for final in self._finals:
            final.observe(now)

    def _forward_flushed(  # noqa: PLR0917 - the flush listener's signature
        self,
        key: bytes,
        start: int,
        end: int,
        new: bytes | None,
        old: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        # The old value is not forwarded: uncached updates carry none either (the windowed
        # tables downstream, suppression and toStream, never read it).
        key_object = self._key_serde.deserialize(key)
        self.forward(self._flushed_record(key_object, start, end, new, timestamp, headers))

    def _write(  # noqa: PLR0917 - the store's put, plus the record context
        self,
        key: bytes,
        start: int,
        end: int,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        """Write the window; a cached store keeps ``headers`` for when it forwards the update."""
        store = self._store
        assert store is not None
        store.put(key, start, end, value, timestamp, headers)
        if self._cached and (self._dirty_end is None or end < self._dirty_end):
            self._dirty_end = end

    def _late(self) -> None:
        assert self._context is not None
        self._context.record_dropped(self._store_name, "late")

    def advance(self, timestamp: int) -> None:
        store = self._store
        if timestamp > self.observed_stream_time and self._cached:
            assert store is not None
            # Time-driven children (suppression) must see every update before the time that
            # may close its window, or a final result would miss the cached update. Kafka
            # Streams has no control records, so this flush never changes what it would emit.
            store.flush_cache()
            self._dirty_end = None
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        super().advance(timestamp)

    def control_progress(self) -> int:
        # Past the latest time seen, nothing can come out stamped more than the windows' output
        # lag earlier (sessions: a record can still replace sessions ending gap + grace before;
        # time and sliding windows: an update is stamped no earlier than its window's start,
        # and windows take records until end + grace). Suppressed final results are among those
        # updates, so a suppression needs no hold of its own.
        seen = max(self._accepted, self.parents_progress())
        held = seen - self._windows.output_lag_ms
        return held if seen >= 0 and held >= 0 else NO_PROGRESS

    def flush(self) -> None:
        # Retention: remove the windows no record can update any more (already invisible to
        # process()).
        assert self._store is not None
        self._dirty_end = None  # the task flushed the cache just before
        if self.observed_stream_time >= 0:
            self._purge.run(self._store, self._expired, self.observed_stream_time)

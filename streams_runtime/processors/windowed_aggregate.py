"""What session, time and sliding window aggregations share: they are time-driven (each keeps
its own observed stream time, moved by data and control records), hold progress back by how far
behind the latest time their output can be stamped, and purge expired windows from their store
(:class:`~streams_runtime.processors.retention.RetentionPurge`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from streams_runtime.processors.base import NO_PROGRESS, AggregateProcessor, ProcessorContext
from streams_runtime.processors.retention import RetentionPurge
from streams_runtime.serdes import Serde
from streams_runtime.state import SessionStore
from streams_runtime.windows import WindowSpec

__all__ = ["WindowedAggregateProcessor"]

S = TypeVar("S", bound=SessionStore)
W = TypeVar("W", bound=WindowSpec)


class WindowedAggregateProcessor(AggregateProcessor, Generic[S, W]):
    """Base of the windowed aggregations over a store of windows ``S`` (a session or window
    store) shaped by ``W``."""

    reorders = True

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

    @abstractmethod
    def _open_store(self, context: ProcessorContext) -> S:
        """The store this aggregation keeps its windows in."""

    @abstractmethod
    def _expired(self, start: int, end: int) -> bool:
        """Whether no record can update the window ``[start, end]`` any more."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._store = self._open_store(context)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)

    def _late(self) -> None:
        assert self._context is not None
        self._context.record_dropped(self._store_name, "late")

    def advance(self, timestamp: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        super().advance(timestamp)

    def control_progress(self) -> int:
        # Past the latest time seen, nothing can come out stamped more than the windows' output
        # lag earlier (sessions: a record can still replace sessions ending gap + grace before;
        # time and sliding windows: an update is stamped no earlier than its window's start,
        # and windows take records until end + grace). Suppressed final results are among those
        # updates, so a suppression needs no hold of its own.
        seen = max(self._accepted, super().control_progress())
        held = seen - self._windows.output_lag_ms
        return held if seen >= 0 and held >= 0 else NO_PROGRESS

    def flush(self) -> None:
        # Retention: remove the windows no record can update any more (already invisible to
        # process()).
        assert self._store is not None
        if self.observed_stream_time >= 0:
            self._purge.run(self._store, self._expired, self.observed_stream_time)

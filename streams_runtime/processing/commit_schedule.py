"""When the stream thread commits (Kafka Streams' ``StreamThread.maybeCommit``): every commit
interval, and at once when ticks wait for committed bounds (:mod:`streams_runtime.progress`).
Times are the thread's monotonic clock, in seconds."""

from __future__ import annotations

__all__ = ["CommitSchedule"]


class CommitSchedule:
    """The next commit's due time for one thread."""

    def __init__(self, interval_s: float, now: float) -> None:
        self.interval_s = interval_s
        self._next = now + interval_s

    def seconds_left(self, now: float) -> float:
        """Until the interval's commit (negative once due)."""
        return self._next - now

    def commit_now(self, now: float) -> None:
        """Make the next commit due at once (ticks wait for it)."""
        self._next = min(self._next, now)

    def due(self, now: float) -> bool:
        return now >= self._next

    def committed(self, now: float) -> None:
        """A commit ended at ``now``: the next one is an interval later."""
        self._next = now + self.interval_s

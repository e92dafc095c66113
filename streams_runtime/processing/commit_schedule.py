"""When the stream thread commits (Kafka Streams' ``StreamThread.maybeCommit``): every commit
interval; at once when ticks wait for committed bounds (:mod:`streams_runtime.progress`); and,
which Kafka Streams does not do, once its input is drained.

The drained commit: when the thread has processed records since its last commit and every input
partition of its tasks is read to its end with nothing buffered, it commits at once instead of
at the end of the interval, so a backlog is durable (its offsets committed, its outputs flushed
or its transaction committed) as soon as it is processed. At most one drained commit per commit
interval: a thread keeping up with a live input drains after nearly every fetch, and must not
commit after each. An idle thread never commits early: nothing was processed. Times are the
thread's monotonic clock, in seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from streams_runtime.record import TopicPartitionId

__all__ = ["CommitSchedule", "input_drained"]


def input_drained(
    partitions: Iterable[TopicPartitionId],
    buffered: Callable[[TopicPartitionId], int],
    lag: Callable[[TopicPartitionId], int | None],
) -> bool:
    """Whether the thread's input is drained: it reads some ``partitions``, and every one is read
    to its end (KIP-695's ``lag`` 0, from cached watermarks: no broker round trip) with nothing
    ``buffered`` in its task."""
    some = False
    for tp in partitions:
        if buffered(tp) or lag(tp) != 0:
            return False
        some = True
    return some


class CommitSchedule:
    """The next commit's due time for one thread, and whether a drained input commits."""

    def __init__(self, interval_s: float, now: float) -> None:
        self.interval_s = interval_s
        self._next = now + interval_s
        self._uncommitted = False  # records processed since the last commit
        self._drained_commit_at = float("-inf")

    def processed(self, records: int) -> None:
        """``records`` were processed in this loop turn."""
        if records:
            self._uncommitted = True

    def seconds_left(self, now: float) -> float:
        """Until the interval's commit (negative once due)."""
        return self._next - now

    def commit_now(self, now: float) -> None:
        """Make the next commit due at once (ticks wait for it)."""
        self._next = min(self._next, now)

    def due(self, now: float) -> bool:
        return now >= self._next

    def drained_commit_due(self, now: float) -> bool:
        """Whether the input, found drained at ``now``, commits now: records were processed since
        the last commit, and no drained commit came within the last interval."""
        return self._uncommitted and now - self._drained_commit_at >= self.interval_s

    def committed(self, now: float, *, drained: bool = False) -> None:
        """A commit ended at ``now`` (``drained``: because the input drained): the next one is
        an interval later."""
        self._next = now + self.interval_s
        self._uncommitted = False
        if drained:
            self._drained_commit_at = now

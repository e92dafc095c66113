"""Per-task input buffering and record choice: Kafka Streams' ``RecordQueue`` and
``PartitionGroup``, with KIP-695 lag-gated idling (``max.task.idle.ms``), docs/design.md §5.

Pure logic: lag and wall clock come in as callables, so the consumer loop owns all I/O and tests
can drive time by hand.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streams_runtime.record import SourceRecord, TopicPartitionId

__all__ = [
    "UNKNOWN",
    "Clock",
    "IdleDecision",
    "LagProvider",
    "PartitionGroup",
    "ReadyReason",
    "RecordQueue",
]

UNKNOWN = -1
"""Partition or stream time before any record was taken (Kafka's ``RecordQueue.UNKNOWN``)."""

LagProvider = Callable[[TopicPartitionId], int | None]
"""Records on the broker not yet fetched for a partition; ``None`` when not known yet."""

Clock = Callable[[], int]
"""Monotonic milliseconds."""


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RecordQueue:
    """FIFO of one input partition's fetched SourceRecords.

    ``partition_time`` is the largest timestamp polled from this partition (or restored from
    commit metadata), ``-1`` until known; it never decreases.
    """

    __slots__ = ("_partition_time", "_records", "tp")

    def __init__(self, tp: TopicPartitionId) -> None:
        self.tp = tp
        self._records: deque[SourceRecord] = deque()
        self._partition_time = UNKNOWN

    @property
    def partition_time(self) -> int:
        """Largest timestamp taken from (or restored for) this partition; ``-1`` until known."""
        return self._partition_time

    def advance_partition_time(self, t: int) -> None:
        """Raise partition time to ``t`` (restore from commit metadata); never lowers it."""
        self._partition_time = max(self._partition_time, t)

    def add(self, records: Iterable[SourceRecord]) -> None:
        """Append records in fetch (offset) order.

        Raises ``ValueError`` — adding none of them — if a record belongs to another partition or
        has a negative timestamp (the caller must drop and count those before buffering).
        """
        batch = list(records)
        for record in batch:
            if (record.topic, record.partition) != self.tp:
                raise ValueError(
                    f"record from {record.topic}-{record.partition} added to queue of {self.tp}"
                )
            if record.timestamp < 0:
                raise ValueError(
                    f"record {record.topic}-{record.partition}@{record.offset} has negative "
                    f"timestamp {record.timestamp}; negative timestamps must be dropped upstream"
                )
        self._records.extend(batch)

    def head(self) -> SourceRecord | None:
        """The oldest buffered record, without removing it; ``None`` when empty."""
        return self._records[0] if self._records else None

    def poll(self) -> SourceRecord | None:
        """Remove and return the oldest buffered record, advancing partition time to its
        timestamp if larger; ``None`` when empty."""
        if not self._records:
            return None
        record = self._records.popleft()
        if record.timestamp > self._partition_time:  # noqa: PLR1730 (hot path: no call)
            self._partition_time = record.timestamp
        return record

    def poll_many(self, n: int) -> tuple[list[SourceRecord], int]:
        """Remove and return up to ``n`` of the oldest buffered records, as ``n`` calls of
        :meth:`poll` would, and the largest timestamp among them (``UNKNOWN``: none)."""
        records = self._records
        taken = [records.popleft() for _ in range(min(n, len(records)))]
        latest = max((r.timestamp for r in taken), default=UNKNOWN)
        self._partition_time = max(self._partition_time, latest)
        return taken, latest

    def clear(self) -> None:
        """Drop buffered records (on revoke or offset reset); partition time is kept."""
        self._records.clear()

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return (
            f"RecordQueue({self.tp.topic}-{self.tp.partition}, buffered={len(self._records)}, "
            f"partition_time={self._partition_time})"
        )


class ReadyReason(enum.Enum):
    """Why :meth:`PartitionGroup.ready_to_process` answered as it did."""

    NOTHING_BUFFERED = "nothing-buffered"
    ALL_BUFFERED = "all-buffered"
    IDLING_DISABLED = "idling-disabled"
    """``max_task_idle_ms == -1``: process whatever is buffered, never wait."""
    LAG_UNKNOWN = "lag-unknown"
    """An empty partition's lag is not known yet: wait for the fetch, without timeout."""
    DATA_ON_BROKER = "data-on-broker"
    """An empty partition has lag > 0: wait for the fetch, without timeout."""
    IDLING = "idling"
    """An empty partition is caught up (lag 0) but its idle deadline has not passed yet."""
    ENFORCED = "enforced"
    """Every empty partition is caught up and past its deadline: process anyway."""


@dataclass(frozen=True, slots=True)
class IdleDecision:
    """One :meth:`PartitionGroup.ready_to_process` decision, for logging and metrics.

    ``partition`` is the empty partition the decision waited on (``None`` unless waiting on
    one), ``lag`` its lag and ``deadline`` its idle deadline (clock milliseconds) where known.
    """

    ready: bool
    reason: ReadyReason
    partition: TopicPartitionId | None = None
    lag: int | None = None
    deadline: int | None = None


_NOTHING_BUFFERED = IdleDecision(ready=False, reason=ReadyReason.NOTHING_BUFFERED)
_ALL_BUFFERED = IdleDecision(ready=True, reason=ReadyReason.ALL_BUFFERED)
_IDLING_DISABLED = IdleDecision(ready=True, reason=ReadyReason.IDLING_DISABLED)
_ENFORCED = IdleDecision(ready=True, reason=ReadyReason.ENFORCED)
# Decisions without a partition are constants (frozen): the hot path allocates none.


class PartitionGroup:
    """The input partitions of one task: a :class:`RecordQueue` each, the choice of the next
    record by smallest head timestamp, stream time, and the KIP-695 idling decision.

    ``max_task_idle_ms`` is ``-1`` (never wait for empty partitions) or ``>= 0`` (wait for an
    empty, caught-up partition at most that long; see :meth:`ready_to_process`). ``lag`` reports
    each partition's broker lag (``None`` = unknown); ``clock`` gives monotonic milliseconds.
    """

    def __init__(
        self,
        partitions: Iterable[TopicPartitionId],
        *,
        max_task_idle_ms: int,
        lag: LagProvider,
        clock: Clock | None = None,
    ) -> None:
        if max_task_idle_ms < -1:
            raise ValueError(f"max_task_idle_ms must be >= -1, got {max_task_idle_ms}")
        # A dict keeps the constructor order, which breaks ties between equal head timestamps.
        self._queues: dict[TopicPartitionId, RecordQueue] = {}
        for tp in partitions:
            if tp in self._queues:
                raise ValueError(f"partition {tp} listed twice")
            self._queues[tp] = RecordQueue(tp)
        if not self._queues:
            raise ValueError("a partition group needs at least one partition")
        self._queue_list = tuple(self._queues.values())
        self._single = self._queue_list[0] if len(self._queue_list) == 1 else None
        self._max_task_idle_ms = max_task_idle_ms
        self._lag = lag
        self._clock = clock or _monotonic_ms
        self._deadlines: dict[TopicPartitionId, int] = {}
        self._stream_time = UNKNOWN
        self._buffered = 0
        self._enforced_processing_total = 0
        self._last_decision = _NOTHING_BUFFERED

    # -- introspection ---------------------------------------------------------------------------

    @property
    def max_task_idle_ms(self) -> int:
        """The configured ``max.task.idle.ms``."""
        return self._max_task_idle_ms

    @property
    def stream_time(self) -> int:
        """Task stream time: max timestamp taken (or restored); ``-1`` until known. Never
        decreases."""
        return self._stream_time

    @property
    def enforced_processing_total(self) -> int:
        """How many :meth:`ready_to_process` calls returned True only because idle deadlines of
        empty, caught-up partitions had passed (Kafka's ``enforced-processing-total``)."""
        return self._enforced_processing_total

    @property
    def last_decision(self) -> IdleDecision:
        """The most recent :meth:`ready_to_process` decision, with its reason."""
        return self._last_decision

    def partitions(self) -> tuple[TopicPartitionId, ...]:
        """The group's partitions, in constructor order."""
        return tuple(self._queues)

    def partition_time(self, tp: TopicPartitionId) -> int:
        """Partition time of ``tp``; ``-1`` until known."""
        return self._queue(tp).partition_time

    def buffered(self, tp: TopicPartitionId | None = None) -> int:
        """Records buffered for ``tp``, or across all partitions when ``tp`` is None."""
        if tp is None:
            return self._buffered
        return len(self._queue(tp))

    def head(self, tp: TopicPartitionId) -> SourceRecord | None:
        """The next buffered record of ``tp`` (e.g. its offset for commits), without taking it."""
        return self._queue(tp).head()

    def idle_partitions(self) -> list[TopicPartitionId]:
        """Empty partitions that were caught up (lag 0) at the last decision and whose idle
        deadline has passed: the ones enforced processing is going ahead without."""
        now = self._clock()
        return [
            tp
            for tp, deadline in self._deadlines.items()
            if not self._queues[tp] and now >= deadline
        ]

    # -- mutation --------------------------------------------------------------------------------

    def set_partition_time(self, tp: TopicPartitionId, t: int) -> None:
        """Restore ``tp``'s partition time (from commit metadata) and raise stream time to it."""
        self._queue(tp).advance_partition_time(t)
        self._stream_time = max(self._stream_time, t)

    def add_records(self, tp: TopicPartitionId, records: Iterable[SourceRecord]) -> int:
        """Buffer fetched ``records`` of ``tp`` (offset order); returns that queue's new size.

        A partition that receives data stops idling: its deadline is dropped, so a later empty
        spell starts a fresh ``max_task_idle_ms`` wait.
        """
        queue = self._queue(tp)
        before = len(queue)
        queue.add(records)
        after = len(queue)
        self._buffered += after - before
        if after > before:
            self._deadlines.pop(tp, None)
        return after

    def next_record(self) -> SourceRecord | None:
        """Take the head record with the smallest timestamp among non-empty queues (ties: the
        partition listed first); ``None`` when nothing is buffered.

        Advances that partition's time and stream time. Callers ask :meth:`ready_to_process`
        first; this method does not wait for empty partitions.
        """
        best = self._single
        if best is None:
            best_ts = 0
            # Linear scan: a task has one partition per co-partitioned input topic, so a handful;
            # the strict < keeps the first-listed partition on ties.
            for queue in self._queue_list:
                head = queue.head()
                if head is not None and (best is None or head.timestamp < best_ts):
                    best, best_ts = queue, head.timestamp
            if best is None:
                return None
        record = best.poll()
        if record is None:
            return None  # the single queue is empty
        self._buffered -= 1
        if record.timestamp > self._stream_time:  # noqa: PLR1730 (hot path: no call)
            self._stream_time = record.timestamp
        return record

    def take(self, n: int) -> list[SourceRecord]:
        """Up to ``n`` records as ``n`` calls of :meth:`next_record` would take them, for a task
        with a single input (``ValueError`` otherwise): a fused chain's batch."""
        if self._single is None:
            raise ValueError("take() needs a single input partition")
        taken, latest = self._single.poll_many(n)
        self._buffered -= len(taken)
        self._stream_time = max(self._stream_time, latest)
        return taken

    def clear(self) -> None:
        """Drop all buffered records and idle deadlines (revoke / reset). Partition and stream
        times are kept: they never decrease."""
        for queue in self._queues.values():
            queue.clear()
        self._buffered = 0
        self._deadlines.clear()

    # -- KIP-695 ---------------------------------------------------------------------------------

    def ready_to_process(self) -> bool:
        """Whether the task may take a record now (Kafka Streams ``readyToProcess``, KIP-695).

        - nothing buffered: False;
        - every partition buffered: True (all idle deadlines dropped);
        - ``max_task_idle_ms == -1``: True;
        - otherwise, for each empty partition in order: lag unknown or > 0 → False (wait for
          the fetch, no timeout; its deadline is dropped); lag 0 → a deadline ``now +
          max_task_idle_ms`` is set once, and False until ``now >= deadline``;
        - all empty partitions caught up and past their deadlines: True, counted in
          :attr:`enforced_processing_total`.

        The reason is kept in :attr:`last_decision`.
        """
        decision = self._last_decision = self._decide()
        if decision is _ENFORCED:
            self._enforced_processing_total += 1
        return decision.ready

    def ready_batch(self) -> int:
        """:meth:`ready_to_process`, answered as how many records the task may take before it
        must ask again (0: not ready), so the hot path decides once per batch, not per record.

        The answer covers only records whose own :meth:`ready_to_process` call would have given
        the same decision with no other effect, so taking them without asking is the same as
        asking before each: while every queue is non-empty (``min`` of their lengths: until one
        may run empty) every call is ALL_BUFFERED; with idling disabled and a queue empty, every
        call is IDLING_DISABLED until nothing is buffered (queues only shrink while the task
        takes records); with every empty partition caught up and past its deadline, every call
        is ENFORCED until a non-empty queue may run empty, and each record taken counts as one
        enforced decision (Kafka Streams counts one per record). Nothing is fetched while a
        task takes a batch: a lag the consumer learns meanwhile is seen at the next batch, as if
        learnt just after this one."""
        decision = self._decide()
        self._last_decision = decision
        if decision is _ALL_BUFFERED:
            return min([len(queue) for queue in self._queue_list])
        if decision is _IDLING_DISABLED:
            return self._buffered
        if decision is _ENFORCED:
            ready = min([len(queue) for queue in self._queue_list if queue])
            self._enforced_processing_total += ready
            return ready
        return 1 if decision.ready else 0

    def _decide(self) -> IdleDecision:
        if self._buffered == 0:
            return _NOTHING_BUFFERED
        single = self._single
        if single is not None and single:
            if self._deadlines:
                self._deadlines.clear()
            return _ALL_BUFFERED
        empty = [queue.tp for queue in self._queue_list if not queue]
        if not empty:
            self._deadlines.clear()
            return _ALL_BUFFERED
        if self._max_task_idle_ms == -1:
            return _IDLING_DISABLED

        waiting = self._wait_for(empty, self._clock())
        if waiting is not None:
            return waiting
        return _ENFORCED

    def _wait_for(self, empty: list[TopicPartitionId], now: int) -> IdleDecision | None:
        """The decision to keep waiting for one of the ``empty`` partitions, or None when all of
        them are caught up and past their idle deadlines."""
        # As in Kafka, the first empty partition that must wait decides; later ones are not
        # looked at (so their deadlines start only once the earlier ones are caught up).
        for tp in empty:
            lag = self._lag(tp)
            if lag is None:
                self._deadlines.pop(tp, None)
                return IdleDecision(ready=False, reason=ReadyReason.LAG_UNKNOWN, partition=tp)
            if lag > 0:
                self._deadlines.pop(tp, None)
                return IdleDecision(
                    ready=False, reason=ReadyReason.DATA_ON_BROKER, partition=tp, lag=lag
                )
            # Caught up (a negative lag, from stale cached watermarks, counts as caught up too):
            # idle for at most max_task_idle_ms from the first time we saw it so;
            # setdefault keeps the deadline from being pushed back by repeated calls.
            deadline = self._deadlines.setdefault(tp, now + self._max_task_idle_ms)
            if now < deadline:
                return IdleDecision(
                    ready=False, reason=ReadyReason.IDLING, partition=tp, lag=0, deadline=deadline
                )
        return None

    # -- helpers ---------------------------------------------------------------------------------

    def _queue(self, tp: TopicPartitionId) -> RecordQueue:
        try:
            return self._queues[tp]
        except KeyError:
            raise KeyError(f"partition {tp} is not in this partition group") from None

    def __repr__(self) -> str:
        return (
            f"PartitionGroup(partitions={list(self._queues)}, buffered={self._buffered}, "
            f"stream_time={self._stream_time}, max_task_idle_ms={self._max_task_idle_ms})"
        )

"""Per topic-partition activity, fed by delivery reports, and the deadlines of idle partitions.

Idleness is measured on the local monotonic clock since the last *data* ack, never from record
timestamps: a producer backfilling old events is busy, not idle. Only acks of the host's own data
records arrive here; control records go through a separate producer whose acks never reset state.

The ack path is the host's hot path, so it does the least possible: one lock-free dict store of
the acked record per ack (:attr:`PartitionActivity.pending`). The host's producer calls
:meth:`PartitionActivity.commit_pending` when the call that served those acks (``poll()``, a chunk
of ``flush()``) returns: one clock reading stamps them all, and each partition's last record moves
to :attr:`PartitionActivity.latest` as ``(record, monotonic ack time)``, with a call to
:meth:`PartitionActivity.track` the first time a partition is seen. Everything else happens on the
scheduler thread, in :meth:`PartitionActivity.take_due`: it notices new acks by their entry,
resets the idle period, and reads the record's timestamp only then.

Deadlines live in a heap with one entry per tracked partition. An idle partition is re-checked at
least every ``start_ms``, so new data (which never touches the heap) restarts its schedule on time.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from progress_control.ticks.schedule import TickSchedule

__all__ = ["DueTick", "PartitionActivity", "PartitionState", "TopicPartition"]

TopicPartition = tuple[str, int]

_EPSILON_S = 1e-6  # float slack when comparing deadlines computed along different paths


class TimestampedRecord(Protocol):
    """What the ack path stores: a delivered ``confluent_kafka.Message``."""

    def timestamp(self) -> tuple[int, int]: ...


AckSource = TimestampedRecord | int
"""The acked record, or directly its timestamp (reports, tests)."""

AckEntry = tuple[AckSource, float]
"""``(acked record or its timestamp, monotonic ack time)``: one new tuple per ack."""


@dataclass(slots=True)
class PartitionState:
    """The scheduler's view of one partition's current idle period."""

    seen_ack: AckEntry
    """The ``latest`` entry the idle period counts from; any other entry (compared by identity,
    as two acks may share a clock reading) restarts it."""
    last_data_timestamp_ms: int
    ticks_sent: int = 0
    """Ticks sent since that ack."""
    last_tick_monotonic: float | None = None
    armed_at: float = 0.0
    """Time of this partition's heap entry."""


@dataclass(frozen=True, slots=True)
class DueTick:
    """A control record that is due now."""

    topic: str
    partition: int
    tick: int
    """0-based number of this tick in the partition's idle period."""
    last_data_timestamp_ms: int
    last_ack_monotonic: float


class PartitionActivity:
    """Latest data ack per ``TopicPartition``, and the schedule of ticks for idle ones."""

    def __init__(
        self,
        schedule: TickSchedule,
        *,
        include_topic: Callable[[str], bool] = lambda _topic: True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._schedule = schedule
        self._include_topic = include_topic
        self._clock = clock
        self._wall_clock = wall_clock
        self._recheck_s = schedule.start_ms / 1000
        self._lock = threading.Lock()
        self._states: dict[TopicPartition, PartitionState] = {}
        self._deadlines: list[tuple[float, TopicPartition]] = []
        self.latest: dict[TopicPartition, AckEntry] = {}
        """``partition -> (acked record or its timestamp, monotonic ack time)``."""
        self.pending: dict[TopicPartition, TimestampedRecord] = {}
        """``partition -> last acked record`` since the last :meth:`commit_pending`; written by
        the ack path without a lock (a single dict store is atomic)."""
        self._commit_lock = threading.Lock()

    def record_data_ack(
        self, topic: str, partition: int, timestamp_ms: int, ack_monotonic: float | None = None
    ) -> float | None:
        """Record a data ack by timestamp (at ``ack_monotonic``, default now); return a deadline
        when the partition is new."""
        key = (topic, partition)
        new = key not in self.latest
        now = self._clock()
        self.latest[key] = (timestamp_ms, now if ack_monotonic is None else min(ack_monotonic, now))
        return self.track(key) if new else None

    def commit_pending(self) -> list[TopicPartition]:
        """Move :attr:`pending` into :attr:`latest`, every record stamped with one clock reading
        taken now (call it right after the host's call that served the acks); return the
        partitions seen for the first time, for :meth:`track`."""
        pending = self.pending
        if not pending:
            return []
        new: list[TopicPartition] = []
        latest = self.latest
        # Serialises commits from hosts serving acks on several threads, so that a later
        # clock reading is never overwritten by an earlier one.
        with self._commit_lock:
            now = self._clock()
            while pending:
                try:
                    # popitem, not iteration: another thread's acks may arrive meanwhile.
                    key, record = pending.popitem()
                except KeyError:
                    break
                if key not in latest:
                    new.append(key)
                latest[key] = (record, now)
        return new

    def record_acks(self, acks: list[tuple[TopicPartition, int, float]]) -> list[TopicPartition]:
        """Record acks stamped where they happened (the native recorder): each
        ``(partition, data timestamp ms, monotonic ack time)`` becomes the partition's latest
        entry; return the partitions seen for the first time, for :meth:`track`."""
        new: list[TopicPartition] = []
        latest = self.latest
        with self._commit_lock:
            now = self._clock()
            for key, timestamp_ms, ack in acks:
                if key not in latest:
                    new.append(key)
                latest[key] = (timestamp_ms, min(ack, now))
        return new

    def wall_clock_at(self, ack_monotonic: float) -> int:
        """Wall-clock milliseconds at a past monotonic time (a record without a timestamp)."""
        return int((self._wall_clock() - (self._clock() - ack_monotonic)) * 1000)

    def track(self, key: TopicPartition) -> float | None:
        """Start scheduling a partition seen for the first time; return its first deadline, or
        ``None`` when its topic is excluded or it is already tracked."""
        if not self._include_topic(key[0]):
            return None
        with self._lock:
            if key in self._states:
                return None
            entry = self.latest[key]
            source, ack = entry
            deadline = ack + self._recheck_s
            self._states[key] = PartitionState(
                entry, self._timestamp(source, ack, self._clock()), armed_at=deadline
            )
            heapq.heappush(self._deadlines, (deadline, key))
            return deadline

    def resume(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        ack_monotonic: float,
        ticks_seen: int = 0,
    ) -> float | None:
        """Start tracking a partition whose idle period began before we looked (a restarted
        sidecar): its last data record has ``timestamp_ms`` and was written at ``ack_monotonic``
        (on our clock, estimated), and ``ticks_seen`` ticks already followed it.

        The schedule continues where it is: after ``ticks_seen`` ticks, or, when more were due
        by now, with the latest of those sent at once (one catch-up tick, not a burst) while the
        schedule still has ticks to come. A partition idle past its schedule gets none. Return
        the partition's first deadline, ``None`` when its topic is excluded or it is already
        tracked (then live activity knows better)."""
        key = (topic, partition)
        if not self._include_topic(topic):
            return None
        now = self._clock()
        ack = min(ack_monotonic, now)
        with self._lock:
            if key in self._states:
                return None
            entry: AckEntry = (timestamp_ms, ack)
            self.latest[key] = entry
            due = self._schedule.ticks_due_by((now - ack) * 1000)
            if ticks_seen >= due:
                position = ticks_seen
            elif self._schedule.offset_ms(due) is not None:
                position = due - 1  # still in its schedule: catch up with the latest due tick
            else:
                position = due  # past its schedule: nothing more to send
            self._states[key] = PartitionState(
                entry, timestamp_ms, ticks_sent=position, armed_at=now
            )
            heapq.heappush(self._deadlines, (now, key))
            return now

    def ticks_sent(self, key: TopicPartition) -> int | None:
        """Schedule position of a tracked partition: ticks sent (or skipped as past) in its idle
        period as of the scheduler's last look; ``None`` when not tracked."""
        with self._lock:
            state = self._states.get(key)
            return None if state is None else state.ticks_sent

    def take_due(self, now: float | None = None) -> list[DueTick]:
        """Pop every tick due at ``now`` and arm the partitions' next deadlines."""
        now = self._clock() if now is None else now
        due: list[DueTick] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                at, key = heapq.heappop(self._deadlines)
                state = self._states[key]
                if state.armed_at != at:
                    continue  # superseded by a later entry for the same partition
                entry = self.latest[key]
                source, ack = entry
                if entry is not state.seen_ack:  # new data: a new idle period
                    state.seen_ack = entry
                    state.last_data_timestamp_ms = self._timestamp(source, ack, now)
                    state.ticks_sent = 0
                    state.last_tick_monotonic = None
                offset = self._offset(state, now)
                if offset is not None and self._tick_due(state, offset, now):
                    due.append(
                        DueTick(key[0], key[1], state.ticks_sent, state.last_data_timestamp_ms, ack)
                    )
                    state.ticks_sent += 1
                    state.last_tick_monotonic = now
                    offset = self._offset(state, now)
                state.armed_at = self._next_check(state, offset, now)
                heapq.heappush(self._deadlines, (state.armed_at, key))
        return due

    def next_deadline(self) -> float | None:
        """The earliest heap entry, ``None`` when no partition is tracked."""
        with self._lock:
            return self._deadlines[0][0] if self._deadlines else None

    def idle_partitions(self) -> int:
        """Partitions ticked since their last data ack (as of the scheduler's last look)."""
        with self._lock:
            return sum(1 for state in self._states.values() if state.ticks_sent > 0)

    def data_timestamp(self, source: AckSource, ack: float) -> int:
        """Timestamp of an acked record; wall-clock at its ack when the record has none."""
        return self._timestamp(source, ack, self._clock())

    def _offset(self, state: PartitionState, now: float) -> float | None:
        """Offset of the partition's next tick, ``None`` once its idle period is over."""
        end_ms = self._schedule.end_ms
        if end_ms is not None and (now - state.seen_ack[1]) * 1000 > end_ms + _EPSILON_S * 1000:
            return None  # woken late, past end.ms
        return self._schedule.offset_ms(state.ticks_sent)

    def _tick_due(self, state: PartitionState, offset_ms: float, now: float) -> bool:
        if state.seen_ack[1] + offset_ms / 1000 > now + _EPSILON_S:
            return False
        if state.last_tick_monotonic is None:
            return True
        # Woken late, several ticks overdue: keep the planned spacing instead of a burst.
        spacing_s = self._schedule.spacing_ms(state.ticks_sent) / 1000
        return now - state.last_tick_monotonic >= spacing_s - _EPSILON_S

    def _next_check(self, state: PartitionState, offset_ms: float | None, now: float) -> float:
        recheck = now + self._recheck_s
        if offset_ms is None:
            return recheck  # schedule ended: only watch for new data
        planned = state.seen_ack[1] + offset_ms / 1000
        if state.last_tick_monotonic is not None:
            spacing_s = self._schedule.spacing_ms(state.ticks_sent) / 1000
            planned = max(planned, state.last_tick_monotonic + spacing_s)
        # Never re-arm at or before now: take_due would pop the same entry forever.
        return max(min(planned, recheck), now + _EPSILON_S)

    def _timestamp(self, source: AckSource, ack: float, now: float) -> int:
        if isinstance(source, int):
            return source
        kind, timestamp_ms = source.timestamp()
        if kind != TIMESTAMP_NOT_AVAILABLE and timestamp_ms >= 0:
            return timestamp_ms
        return int((self._wall_clock() - (now - ack)) * 1000)

"""When punctuators fire (Kafka Streams' ``PunctuationSchedule`` and ``PunctuationQueue``).

A task keeps two queues, one on stream time and one on the wall clock. Each schedule is due at
``anchor + k * interval``; after it fires at time ``t`` its next time is the first of those after
``t``: a jump in time fires it once, never once per interval missed. A schedule cancelled,
from anywhere, including its own punctuator, fires no more.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["Cancellable", "PunctuationQueue", "PunctuationSchedule", "PunctuationType"]


class PunctuationType(Enum):
    """What time a punctuator follows (Kafka Streams' ``PunctuationType``)."""

    STREAM_TIME = "stream-time"
    """The task's stream time: the largest timestamp it took from its inputs, data or ticks.
    Moves only when records (or ticks) arrive; never on an idle task without ticks."""
    WALL_CLOCK_TIME = "wall-clock-time"
    """The system clock (ms since the epoch), checked on every turn of the poll loop, also while
    the task has no input."""


class Cancellable:
    """A handle on a schedule: :meth:`cancel` stops it (Kafka Streams' ``Cancellable``)."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        """Fire no more; safe to call more than once and from the punctuator itself."""
        self.cancelled = True


@dataclass(order=True)
class PunctuationSchedule:
    """One punctuator's next time: ``due``, then every ``interval`` from it."""

    due: int
    seq: int  # ties fire in the order they were scheduled
    interval: int = field(compare=False)
    fire: Callable[[int], None] = field(compare=False)
    """Called with the time it fires at (the task wraps the user's punctuator)."""
    handle: Cancellable = field(compare=False, default_factory=Cancellable)

    def next_after(self, now: int) -> int:
        """The first time on this schedule's grid after ``now``."""
        missed = max(0, (now - self.due) // self.interval)
        return self.due + (missed + 1) * self.interval


class PunctuationQueue:
    """The schedules of one time, earliest first."""

    def __init__(self) -> None:
        self._heap: list[PunctuationSchedule] = []
        self._seq = itertools.count()
        self.due = sys.maxsize
        """The earliest time a schedule is due at (``sys.maxsize`` when none): one comparison
        per record tells a task whether to punctuate."""

    def schedule(self, due: int, interval: int, fire: Callable[[int], None]) -> Cancellable:
        """Fire ``fire(t)`` first when time ``t`` reaches ``due``, then on ``due``'s grid."""
        if interval < 1:
            raise ValueError(f"a punctuation interval is at least 1 ms, got {interval}")
        entry = PunctuationSchedule(due, next(self._seq), interval, fire)
        heapq.heappush(self._heap, entry)
        self.due = self._heap[0].due
        return entry.handle

    def punctuate(self, now: int) -> int:
        """Fire every schedule due at ``now``, each once; how many fired. A punctuator that
        raises was rescheduled first (the error is the caller's to handle)."""
        heap = self._heap
        fired = 0
        try:
            while heap and heap[0].due <= now:
                entry = heapq.heappop(heap)
                if entry.handle.cancelled:
                    continue
                entry.due = entry.next_after(now)
                entry.seq = next(self._seq)
                heapq.heappush(heap, entry)
                fired += 1
                entry.fire(now)
        finally:
            self.due = heap[0].due if heap else sys.maxsize
        return fired

    def clear(self) -> None:
        """Drop every schedule (the task closes)."""
        self._heap.clear()
        self.due = sys.maxsize

    def __len__(self) -> int:
        return sum(not e.handle.cancelled for e in self._heap)

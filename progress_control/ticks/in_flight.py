"""Records sent and not acknowledged yet, per topic: :class:`RecordsInFlight`.

Ticks go through a producer of their own, so a record the host sent before a tick but that is
still in flight (lingering in its queue, or slow to be acknowledged) may land after the tick. A
tick is therefore never dated above the oldest record in flight to its topic: the topic's, not
the partition's, because a record's partition may be chosen by the partitioner only after it is
sent. On a busy topic that holds an idle partition's ticks back by about one delivery latency.

The native recorder keeps the same multiset in C (``interceptor/_ackplugin.c``); this is the
Python path's, fed by the producer's ``produce()`` and its wrapped delivery callbacks.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, deque
from typing import TypeVar

__all__ = ["RecordsInFlight"]

_T = TypeVar("_T")


class _TopicFlight:
    """One topic's timestamps in flight: a count per timestamp, and the timestamps in
    ascending order (settled ones leave it once they reach its front)."""

    __slots__ = ("counts", "order")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.order: deque[int] = deque()


class RecordsInFlight:
    """Per topic, the timestamps of records sent and not yet settled (delivered or failed).

    The host's threads only append to two logs (:meth:`sent`, :meth:`settled`: one atomic
    deque append each, no lock on the hot path); the scheduler folds them into a multiset when
    it asks for :meth:`oldest`, and every quarter second (:meth:`fold`) to bound them. Settles
    are folded before sends: a record's send is logged before its settle, so every settle folded
    finds its send folded too.

    A send may be registered below its record's real timestamp (librdkafka dates a record sent
    without one, after the producer registered it at an earlier clock reading): a settle whose
    timestamp was never sent removes the greatest one below it, so what stays is never above
    what is really in flight."""

    def __init__(self) -> None:
        self.sends: deque[tuple[str, int]] = deque()
        """The log :meth:`sent` appends to (a hot path may append ``(topic, timestamp)``)."""
        self.settles: deque[tuple[str, int, bool]] = deque()
        """The log :meth:`settled` appends to (``(topic, timestamp, log_append_time)``)."""
        self._fold_lock = threading.Lock()
        self._topics: dict[str, _TopicFlight] = {}
        self._log_append_time: set[str] = set()

    def sent(self, topic: str, timestamp_ms: int) -> None:
        """A record was handed to the producer (at ``timestamp_ms`` or later)."""
        self.sends.append((topic, timestamp_ms))

    def settled(self, topic: str, timestamp_ms: int, *, log_append_time: bool = False) -> None:
        """A record's delivery report came (delivered or failed), or its send failed. A
        delivered record dated by the broker (``log_append_time``) cannot be matched to its
        send: the topic is not tracked from then on (the broker dates ticks and data alike
        there, so nothing needs holding back)."""
        self.settles.append((topic, timestamp_ms, log_append_time))

    def oldest(self) -> dict[str, int]:
        """Per topic with records in flight, the oldest one's timestamp."""
        with self._fold_lock:
            self._fold()
            return {topic: f.order[0] for topic, f in self._topics.items() if f.order}

    def fold(self) -> None:
        """Fold the logs into the multiset (the scheduler calls it periodically)."""
        with self._fold_lock:
            self._fold()

    def _fold(self) -> None:
        # Counted in C first: records share a timestamp by the hundred on a busy producer.
        settles = Counter(_take(self.settles))  # first: see the class docstring
        sends = Counter(_take(self.sends))
        for (topic, timestamp_ms), count in sends.items():
            self._add(topic, timestamp_ms, count)
        for (topic, timestamp_ms, log_append_time), count in settles.items():
            if log_append_time:
                self._log_append_time.add(topic)
                self._topics.pop(topic, None)
            else:
                self._remove(topic, timestamp_ms, count)

    def _add(self, topic: str, timestamp_ms: int, count: int) -> None:
        flight = self._topics.get(topic)
        if flight is None:
            if topic in self._log_append_time:
                return
            flight = self._topics[topic] = _TopicFlight()
        counts = flight.counts
        held = counts.get(timestamp_ms, 0)
        counts[timestamp_ms] = held + count
        if held:
            return
        order = flight.order
        if not order or order[-1] < timestamp_ms:
            order.append(timestamp_ms)  # in order: the common case
        elif order[-1] != timestamp_ms and timestamp_ms not in order:
            # Out of order (not a timestamp settled and still queued, which is live again)
            order.insert(bisect.bisect_left(order, timestamp_ms), timestamp_ms)

    def _remove(self, topic: str, timestamp_ms: int, count: int) -> None:
        flight = self._topics.get(topic)
        if flight is None:
            return
        counts = flight.counts
        while count:
            at = timestamp_ms
            if at not in counts:  # registered below its timestamp: the greatest one below
                at = timestamp_ms - 1  # mostly: the clock ticked between the reading and the send
                if at not in counts:
                    below = [t for t in counts if t < timestamp_ms]
                    if not below:
                        return  # never registered: nothing of ours to remove
                    at = max(below)
            held = counts[at]
            taken = min(held, count)
            count -= taken
            if held > taken:
                counts[at] = held - taken
            else:
                del counts[at]
        order = flight.order
        while order and order[0] not in counts:
            order.popleft()


def _take(log: deque[_T]) -> list[_T]:
    """What the log holds now (appends meanwhile stay for the next take)."""
    return [log.popleft() for _ in range(len(log))]

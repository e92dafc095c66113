"""Which reported activity the sidecar accepts (DESIGN §2 "Trust", applied to reports).

Any process in the pod can send a UDP datagram to the report port, so a report gets the checks a
control record gets, and more, before it can schedule ticks or take memory:

1. the reported data timestamp is not negative: else ``negative-timestamp``;
2. it is at most ``max_skew_ms`` ahead of our wall clock: else ``future-timestamp`` (ticks
   extrapolated from it would carry a far-future time);
3. the topic exists on the broker: else ``unknown-topic``;
4. the topic filter (include, exclude, internal topics) lets it through: else ``excluded-topic``;
5. the partition exists: else ``unknown-partition``;
6. the partition is already tracked, or fewer than ``max_tracked_partitions`` are: else
   ``too-many-partitions``.

A dropped report is counted per reason and logged once per reason and source, never raised.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import Counter

from interceptor.activity import TopicPartition

__all__ = ["ActivityAdmission", "DropReason"]

logger = logging.getLogger(__name__)

_MAX_LOGGED = 1_000  # spoofed reports may carry endless source ids: remember this many


class DropReason(enum.StrEnum):
    """Why reported activity was dropped (the ``reason`` label of the drop metric)."""

    NEGATIVE_TIMESTAMP = "negative-timestamp"
    FUTURE_TIMESTAMP = "future-timestamp"
    UNKNOWN_TOPIC = "unknown-topic"
    EXCLUDED_TOPIC = "excluded-topic"
    UNKNOWN_PARTITION = "unknown-partition"
    TOO_MANY_PARTITIONS = "too-many-partitions"


class ActivityAdmission:
    """Checks activity before it is tracked; thread-safe."""

    def __init__(
        self,
        *,
        include_topic: Callable[[str], bool],
        partition_count: Callable[[str], int | None],
        tracked: Callable[[TopicPartition], bool],
        tracked_count: Callable[[], int],
        max_skew_ms: int,
        max_tracked_partitions: int,
        dropped: Counter,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._include_topic = include_topic
        self._partition_count = partition_count
        self._tracked = tracked
        self._tracked_count = tracked_count
        self._max_skew_ms = max_skew_ms
        self._max_tracked = max_tracked_partitions
        self._dropped = dropped
        """A counter with labels ``origin`` and ``reason``."""
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._logged: set[tuple[str, DropReason]] = set()

    def admit_report(self, source: str, topic: str, partition: int, timestamp_ms: int) -> bool:
        """Whether an interceptor's report of a data ack may be tracked."""
        reason = self._report_verdict(topic, partition, timestamp_ms)
        if reason is None:
            reason = self._bound_verdict((topic, partition))
        if reason is None:
            return True
        self._drop("report", reason, source, (topic, partition), f"timestamp {timestamp_ms}")
        return False

    def admit_watched(self, key: TopicPartition) -> bool:
        """Whether a partition the broker watch found active may be tracked (the bound only:
        the watch reads partitions that exist, with broker-side timestamps)."""
        reason = self._bound_verdict(key)
        if reason is None:
            return True
        self._drop("watch", reason, "broker-watch", key, "")
        return False

    def _report_verdict(self, topic: str, partition: int, timestamp_ms: int) -> DropReason | None:
        if timestamp_ms < 0:
            return DropReason.NEGATIVE_TIMESTAMP
        if timestamp_ms > self._clock_ms() + self._max_skew_ms:
            return DropReason.FUTURE_TIMESTAMP
        # Existence before the filter: the filter caches its decisions per topic name.
        count = self._partition_count(topic)
        if count is None:
            return DropReason.UNKNOWN_TOPIC
        if not self._include_topic(topic):
            return DropReason.EXCLUDED_TOPIC
        if not 0 <= partition < count:
            return DropReason.UNKNOWN_PARTITION
        return None

    def _bound_verdict(self, key: TopicPartition) -> DropReason | None:
        if self._tracked(key) or self._tracked_count() < self._max_tracked:
            return None
        return DropReason.TOO_MANY_PARTITIONS

    def _drop(
        self, origin: str, reason: DropReason, source: str, key: TopicPartition, detail: str
    ) -> None:
        self._dropped.labels(origin=origin, reason=reason.value).inc()
        with self._lock:
            first = (source, reason) not in self._logged and len(self._logged) < _MAX_LOGGED
            if first:
                self._logged.add((source, reason))
        if first:
            logger.warning(
                "dropped %s activity from %r for %r[%d]: %s %s; further ones from this source "
                "for this reason are counted, not logged",
                origin,
                source,
                key[0][:255],
                key[1],
                reason.value,
                detail,
            )

    @property
    def logged(self) -> int:
        """How many (source, reason) pairs were logged (bounded)."""
        with self._lock:
            return len(self._logged)

"""Which reported activity the sidecar accepts (docs/concepts/trust.md, applied to reports).

Any process in the pod can send a UDP datagram to the report port, so a report gets the checks a
control record gets, and more, before it can schedule ticks or take memory:

1. the reported data timestamp is not negative: else ``negative-timestamp``;
2. it is at most ``max_skew_ms`` ahead of our wall clock: else ``future-timestamp`` (ticks
   extrapolated from it would carry a far-future time);
3. the topic exists on the broker: else ``unknown-topic`` (a report for a topic missing from our
   metadata is parked until the next metadata refresh, at most a second away: the topic may be
   newer than our metadata; parked reports are bounded too);
4. the topic filter (include, exclude, internal topics) lets it through: else ``excluded-topic``;
5. the partition exists: else ``unknown-partition``;
6. the partition is already tracked, or fewer than ``max_tracked_partitions`` are: else
   ``too-many-partitions``.

A dropped report is counted per reason and logged once per reason and source, never raised.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from progress_control.logging import OncePerKey
from progress_control.ticks.activity import TopicPartition

__all__ = ["ActivityAdmission", "DropReason", "ReportedAck"]

logger = logging.getLogger(__name__)

_MAX_PARKED = 1_024  # reports waiting for a metadata refresh


@dataclass(frozen=True, slots=True)
class ReportedAck:
    """One partition of an interceptor's report."""

    source: str
    topic: str
    partition: int
    timestamp_ms: int
    ack_monotonic: float


class DropReason(enum.StrEnum):
    """Why reported activity was dropped (the ``reason`` label of the drop metric)."""

    NEGATIVE_TIMESTAMP = "negative-timestamp"
    FUTURE_TIMESTAMP = "future-timestamp"
    UNKNOWN_TOPIC = "unknown-topic"
    EXCLUDED_TOPIC = "excluded-topic"
    UNKNOWN_PARTITION = "unknown-partition"
    TOO_MANY_PARTITIONS = "too-many-partitions"
    SENDER_NOT_ALLOWED = "sender-not-allowed"


class ActivityAdmission:
    """Checks activity before it is tracked. Reports are checked in the report listener's
    thread only; :meth:`admit_watched` may run in any thread."""

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
        self._logged = OncePerKey()
        self._parked: dict[TopicPartition, ReportedAck] = {}
        """Reports for topics not in our metadata yet (used by the report thread only)."""

    def admit_report(self, ack: ReportedAck) -> bool:
        """Whether an interceptor's report of a data ack may be tracked now. A report for a
        topic not in our metadata is parked (see :meth:`retry_parked`), and ``False``."""
        reason = self._timestamp_verdict(ack.timestamp_ms)
        if reason is None and self._partition_count(ack.topic) is None:
            key = (ack.topic, ack.partition)
            if key in self._parked or len(self._parked) < _MAX_PARKED:
                self._parked[key] = ack
                return False
            reason = DropReason.UNKNOWN_TOPIC
        if reason is None:
            reason = self._topic_verdict(ack.topic, ack.partition)
        return self._decide(ack, reason)

    @property
    def parked(self) -> int:
        """Reports waiting for a metadata refresh."""
        return len(self._parked)

    def retry_parked(self) -> list[ReportedAck]:
        """After a metadata refresh: the parked reports that may be tracked now; the others are
        dropped (``unknown-topic`` when their topic still does not exist)."""
        parked, self._parked = self._parked, {}
        admitted = []
        for ack in parked.values():
            reason = self._timestamp_verdict(ack.timestamp_ms)
            if reason is None and self._partition_count(ack.topic) is None:
                reason = DropReason.UNKNOWN_TOPIC
            if reason is None:
                reason = self._topic_verdict(ack.topic, ack.partition)
            if self._decide(ack, reason):
                admitted.append(ack)
        return admitted

    def _decide(self, ack: ReportedAck, reason: DropReason | None) -> bool:
        key = (ack.topic, ack.partition)
        if reason is None:
            reason = self._bound_verdict(key)
        if reason is None:
            return True
        self._drop("report", reason, ack.source, key, f"timestamp {ack.timestamp_ms}")
        return False

    def admit_watched(self, key: TopicPartition) -> bool:
        """Whether a partition the broker watch found active may be tracked (the bound only:
        the watch reads partitions that exist, with broker-side timestamps)."""
        reason = self._bound_verdict(key)
        if reason is None:
            return True
        self._drop("watch", reason, "broker-watch", key, "")
        return False

    def _timestamp_verdict(self, timestamp_ms: int) -> DropReason | None:
        if timestamp_ms < 0:
            return DropReason.NEGATIVE_TIMESTAMP
        if timestamp_ms > self._clock_ms() + self._max_skew_ms:
            return DropReason.FUTURE_TIMESTAMP
        return None

    def _topic_verdict(self, topic: str, partition: int) -> DropReason | None:
        """For a topic that exists. Existence is checked first: the filter caches its
        decisions per topic name, which must not grow with made-up names."""
        if not self._include_topic(topic):
            return DropReason.EXCLUDED_TOPIC
        if not 0 <= partition < (self._partition_count(topic) or 0):
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
        if self._logged.first((source, reason)):
            logger.warning(
                "dropped %(origin)s activity from %(source)r for %(topic)r[%(partition)d]: "
                "%(reason)s %(detail)s; further ones from this source for this reason are "
                "counted, not logged",
                {
                    "origin": origin,
                    "source": source,
                    "topic": key[0][:255],
                    "partition": key[1],
                    "reason": reason.value,
                    "detail": detail,
                },
            )

    def refuse_sender(self, uid: int) -> None:
        """A report from a process whose user is not in ``report_allowed_uids``: dropped
        unread, counted, logged once per user."""
        self._dropped.labels(origin="report", reason=DropReason.SENDER_NOT_ALLOWED.value).inc()
        if self._logged.first(("uid", uid)):
            logger.warning(
                "dropped activity reports from uid %(uid)d, not in report_allowed_uids; further "
                "ones from it are counted, not logged",
                {"uid": uid},
            )

    @property
    def logged(self) -> int:
        """How many (source, reason) pairs were logged (bounded)."""
        return len(self._logged)

"""The consumer's input partitions as the stream thread and its task manager share them: which
are assigned, which are paused, and how far each was fetched (for KIP-695's lag)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from streams_runtime.record import TopicPartitionId

__all__ = ["InputPartitions"]

logger = logging.getLogger(__name__)


class InputPartitions:
    """Assignment, pauses and fetch positions of one consumer's input partitions."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self.assigned: set[TopicPartitionId] = set()
        self.paused: set[TopicPartitionId] = set()
        self._fetched: dict[TopicPartitionId, int] = {}
        self._eof: dict[TopicPartitionId, int] = {}

    # -- fetch positions ----------------------------------------------------------------------

    def fetched(self, tp: TopicPartitionId, next_offset: int) -> None:
        """Records of ``tp`` were fetched up to ``next_offset`` (exclusive)."""
        self._fetched[tp] = next_offset

    def reached_end(self, tp: TopicPartitionId, offset: int) -> None:
        """A partition-EOF event of ``tp`` at ``offset``."""
        self._eof[tp] = offset

    def lag(self, tp: TopicPartitionId) -> int | None:
        """Records on the broker not yet fetched by the task, from cached metadata only;
        ``None`` when unknown. Under read_committed a transaction marker can leave
        ``high - position`` at 1 forever: a partition-EOF event at or past the position means
        caught up."""
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            high = self._consumer.get_watermark_offsets(ktp, cached=True)[1]
        except KafkaException:
            return None
        if high < 0:
            return None
        eof = self._eof.get(tp, -1)
        position = self._fetched.get(tp, -1)
        if position < 0 and eof < 0:
            position = self._consumer.position([ktp])[0].offset
            if position < 0:
                return None
        return max(0, high - max(position, eof))

    # -- pauses and seeks -----------------------------------------------------------------------

    def pause(self, partitions: list[TopicPartitionId]) -> None:
        self._consumer.pause([TopicPartition(t.topic, t.partition) for t in partitions])
        self.paused.update(partitions)

    def resume(self, partitions: list[TopicPartitionId]) -> None:
        self._consumer.resume([TopicPartition(t.topic, t.partition) for t in partitions])
        self.paused.difference_update(partitions)

    def hold(self, tp: TopicPartitionId, offset: int) -> None:
        """Fetched, but no task owns ``tp`` yet: go back to ``offset`` and pause it until one
        does (:meth:`start`), so none of its records is skipped."""
        logger.warning(
            "no task owns %(topic)s[%(partition)d] yet; pausing it",
            {"topic": tp.topic, "partition": tp.partition, "offset": offset},
        )
        ktp = TopicPartition(tp.topic, tp.partition, offset)
        self._consumer.seek(ktp)
        self._consumer.pause([ktp])
        self.paused.add(tp)
        self._fetched.pop(tp, None)

    def start(self, tp: TopicPartitionId, committed: int, *, seek: bool) -> None:
        """A new task owns ``tp``: forget its fetch position; with ``seek``, or when it was held
        back, read it from the ``committed`` offset (the beginning when none)."""
        self._fetched.pop(tp, None)
        self._eof.pop(tp, None)
        if seek or tp in self.paused:
            ktp = TopicPartition(
                tp.topic, tp.partition, committed if committed >= 0 else OFFSET_BEGINNING
            )
            self._consumer.seek(ktp)
            if tp in self.paused:
                self._consumer.resume([ktp])
                self.paused.discard(tp)

    def forget(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Revoked or lost."""
        partitions = set(partitions)
        self.assigned.difference_update(partitions)
        self.paused.difference_update(partitions)
        for tp in partitions:
            self._fetched.pop(tp, None)
            self._eof.pop(tp, None)

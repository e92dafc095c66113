"""The consumer's input partitions as the stream thread and its task manager share them: which
are assigned, which are paused, and how far each was fetched (for KIP-695's lag).

Every call here may name a partition a rebalance has just taken away, or one whose fetcher has
not started yet (librdkafka answers a seek then with ``_STATE``, "Erroneous state"): neither is
an error of the application. A partition no longer assigned is left alone; a seek the consumer
cannot take yet is kept, with the partition paused, and tried again every loop turn
(:meth:`InputPartitions.retry_seeks`), so its records are never read from anywhere else.

librdkafka can lose a seek to an absolute offset taken while it looks up a logical one (the
beginning or end, for ``auto.offset.reset``): the lookup's answer comes back outdated by the seek,
and librdkafka then looks the logical offset up again and fetches from there, behind the seek
(rdkafka_partition.c, ``rd_kafka_toppar_handle_Offset``: an outdated reply restarts the offset
query). :meth:`InputPartitions.fetched` catches the first such move back after each seek: the
records behind the position are dropped and the partition is sought again."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.record import TopicPartitionId

__all__ = ["InputPartitions"]

logger = logging.getLogger(__name__)


class InputPartitions:
    """Assignment, pauses and fetch positions of one consumer's input partitions."""

    def __init__(self, consumer: ConsumerLanes) -> None:
        self._consumer = consumer
        self.assigned: set[TopicPartitionId] = set()
        self.paused: set[TopicPartitionId] = set()
        self._fetched: dict[TopicPartitionId, int] = {}
        self._eof: dict[TopicPartitionId, int] = {}
        # Seeks the consumer could not take yet: offset, and whether to resume after it.
        self._pending_seeks: dict[TopicPartitionId, tuple[int, bool]] = {}
        # Partitions sought to an absolute offset whose first move back is still to be caught.
        self._sought: set[TopicPartitionId] = set()

    # -- fetch positions ----------------------------------------------------------------------

    def fetched(self, tp: TopicPartitionId, first_offset: int, next_offset: int) -> int:
        """Records of ``tp`` were fetched from ``first_offset`` up to ``next_offset``
        (exclusive). Returns the offset from which they are new: ``first_offset``, unless
        librdkafka moved the partition back behind a seek of ours (see the module's docstring);
        then the records before the position are not to be processed again, and the partition
        is sought back to it if none of the batch is new."""
        if tp in self._sought:
            position = self._fetched.get(tp, first_offset)
            if first_offset < position:
                logger.warning(
                    "librdkafka moved %(topic)s[%(partition)d] back behind a seek; dropping "
                    "the records before the position",
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "offset": first_offset,
                        "position": position,
                    },
                )
                # Caught once per seek of ours: after a fetch out of range, librdkafka's reset
                # to auto.offset.reset is a real move back and goes through the next time.
                if next_offset <= position:
                    self._seek(tp, position, resume=False)
                    self._sought.discard(tp)
                    return next_offset
                self._sought.discard(tp)
                first_offset = position
        self._fetched[tp] = next_offset
        return first_offset

    def reached_end(self, tp: TopicPartitionId, offset: int) -> None:
        """A partition-EOF event of ``tp`` at ``offset``."""
        self._eof[tp] = offset

    def end_reached(self, tp: TopicPartitionId) -> int:
        """The offset of ``tp``'s latest partition-EOF event since its task started (past any
        transaction markers at the end); -1 when none came."""
        return self._eof.get(tp, -1)

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
        partitions = [tp for tp in partitions if tp in self.assigned]
        if partitions:
            self._consumer.pause([TopicPartition(t.topic, t.partition) for t in partitions])
            self.paused.update(partitions)

    def resume(self, partitions: list[TopicPartitionId]) -> None:
        # Not before a pending seek is taken: the fetch would start at the wrong offset.
        partitions = [
            tp for tp in partitions if tp in self.assigned and tp not in self._pending_seeks
        ]
        if partitions:
            self._consumer.resume([TopicPartition(t.topic, t.partition) for t in partitions])
            self.paused.difference_update(partitions)

    def hold(self, tp: TopicPartitionId, offset: int) -> None:
        """Fetched, but no task owns ``tp`` yet: go back to ``offset`` and pause it until one
        does (:meth:`start`), so none of its records is skipped."""
        logger.warning(
            "no task owns %(topic)s[%(partition)d] yet; pausing it",
            {"topic": tp.topic, "partition": tp.partition, "offset": offset},
        )
        self.pause([tp])
        self._fetched.pop(tp, None)
        self._seek(tp, offset, resume=False)

    def start(self, tp: TopicPartitionId, committed: int, *, seek: bool) -> None:
        """A new task owns ``tp``: forget its fetch position; with ``seek``, or when it was held
        back, read it from the ``committed`` offset (the beginning when none)."""
        self._fetched.pop(tp, None)
        self._sought.discard(tp)
        self._eof.pop(tp, None)
        if tp not in self.assigned:
            return  # revoked or lost meanwhile
        if seek or tp in self.paused:
            self._seek(tp, committed if committed >= 0 else OFFSET_BEGINNING, resume=True)

    def retry_seeks(self) -> None:
        """Try the seeks the consumer could not take before (the stream thread calls this
        every loop turn)."""
        for tp, (offset, resume) in list(self._pending_seeks.items()):
            del self._pending_seeks[tp]
            self._seek(tp, offset, resume=resume)

    def _seek(self, tp: TopicPartitionId, offset: int, *, resume: bool) -> None:
        ktp = TopicPartition(tp.topic, tp.partition, offset)
        # Resumed before the seek, not after: a resume outdates the offset lookup that a seek
        # to a logical offset (the beginning) starts, and librdkafka tries that lookup again
        # only about half a second later. Records fetched from the old position meanwhile are
        # outdated by the seek (or by the pause again if it fails) and never delivered.
        resuming = resume and tp in self.paused
        if resuming:
            self._consumer.resume([TopicPartition(tp.topic, tp.partition)])
        try:
            self._consumer.seek(ktp)
        except KafkaException as exc:
            # Not fetching yet (its committed offset is still being looked up) or being taken
            # away: paused until the seek is taken, or the partition is forgotten.
            logger.debug(
                "seek of %(topic)s[%(partition)d] to %(offset)d deferred: %(error)s",
                {"topic": tp.topic, "partition": tp.partition, "offset": offset, "error": exc},
            )
            if resuming:
                self._consumer.pause([TopicPartition(tp.topic, tp.partition)])
            elif tp not in self.paused:
                self.pause([tp])
            self._pending_seeks[tp] = (offset, resume)
            return
        if resuming:
            self.paused.discard(tp)
        # The fetch position is the seek's (for the lag, and to catch a move back behind it).
        if offset >= 0:
            self._fetched[tp] = offset
            self._sought.add(tp)
        else:
            self._fetched.pop(tp, None)
            self._sought.discard(tp)

    def forget(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Revoked or lost."""
        partitions = set(partitions)
        self.assigned.difference_update(partitions)
        self.paused.difference_update(partitions)
        for tp in partitions:
            self._fetched.pop(tp, None)
            self._eof.pop(tp, None)
            self._pending_seeks.pop(tp, None)
        self._sought.difference_update(partitions)

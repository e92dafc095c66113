"""How far behind each local copy of a store is (Kafka Streams' ``LagInfo`` as
``allLocalStorePartitionLags`` reports it), and the offsets that takes: changelog end offsets
and watermarks, and the application's committed input offsets, asked from the broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams_runtime.cluster.membership import LagInfo, StorePartition, epoch_ms
from streams_runtime.cluster.standby import StandbyReplica
from streams_runtime.record import TopicPartitionId

__all__ = ["GroupOffsets", "local_lags"]

logger = logging.getLogger(__name__)


class GroupOffsets:
    """One consumer of the application's group id, to read offsets: it never subscribes, so it
    never joins the group. Safe to share between threads (calls are serialized)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._consumer = Consumer(dict(config))
        self._lock = threading.Lock()

    def end_offset(self, tp: TopicPartitionId) -> int:
        """The partition's high watermark, asked from the broker (-1 when unknown)."""
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            with self._lock:
                return int(self._consumer.get_watermark_offsets(ktp, timeout=5)[1])
        except (KafkaException, RuntimeError) as exc:
            logger.debug(
                "no end offset for %(topic)s[%(partition)d]: %(error)s",
                {"topic": tp.topic, "partition": tp.partition, "error": str(exc)},
            )
            return -1

    def watermarks(self, tp: TopicPartitionId) -> tuple[int, int]:
        """Low and high watermark of ``tp`` ((-1, -1) when unknown: nothing lies within)."""
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            with self._lock:
                low, high = self._consumer.get_watermark_offsets(ktp, timeout=5)
        except (KafkaException, RuntimeError) as exc:
            logger.debug(
                "no watermarks for %(topic)s[%(partition)d]: %(error)s",
                {"topic": tp.topic, "partition": tp.partition, "error": str(exc)},
            )
            return -1, -1
        return int(low), int(high)

    def committed(self, partitions: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """The group's committed offsets of ``partitions`` (those it has); raises
        :class:`KafkaException` when the broker does not answer."""
        with self._lock:
            offsets = self._consumer.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=5
            )
        return {
            TopicPartitionId(tp.topic, tp.partition): tp.offset
            for tp in offsets
            if tp.error is None and tp.offset >= 0
        }

    def close(self) -> None:
        try:
            with self._lock:
                self._consumer.close()
        except RuntimeError:
            pass  # closed already


def local_lags(
    active: Iterable[StorePartition],
    restoring: Iterable[StorePartition],
    standbys: Mapping[StorePartition, StandbyReplica],
    wanted_standbys: set[StorePartition] | None,
    *,
    end_offset: Callable[[StorePartition], int],
) -> dict[StorePartition, LagInfo]:
    """Lag of every local copy: a running active is the changelog's writer (lag 0, current =
    end); a restoring one is reported as behind by the whole changelog (its progress is
    internal to the restore); a standby from its read position (only those in
    ``wanted_standbys``, unless ``None``). ``end_offset`` asks the broker for a store
    partition's changelog end."""
    now = epoch_ms()
    lags: dict[StorePartition, LagInfo] = {}
    active = set(active)
    for sp in active:
        end = end_offset(sp)
        lags[sp] = LagInfo(end, end, 0, 0)
    for sp in set(restoring) - active:
        end = end_offset(sp)
        lags[sp] = LagInfo(-1, end, max(end, 0), -1)
    for sp, replica in standbys.items():
        if sp in active or (wanted_standbys is not None and sp not in wanted_standbys):
            continue
        lags[sp] = replica.lag(now)
    return lags

"""Purging repartition topics (KIP-284): they keep records without time limit
(``retention.ms=-1``), so replayed old data is never deleted before its downstream task reads it,
and the runtime deletes what it has committed instead (``DeleteRecords``), so disk stays bounded."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Set
from concurrent.futures import Future

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

__all__ = ["REPARTITION_TOPIC_CONFIG", "RepartitionPurger"]

logger = logging.getLogger(__name__)

REPARTITION_TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    # Purged records free disk a segment at a time: keep segments short, as Kafka Streams does.
    "segment.ms": "600000",
}


class RepartitionPurger:
    """Deletes repartition records below committed offsets, at most every ``interval_s``.

    Requests are asynchronous and never fail the caller: a failed purge only leaves records on
    disk a little longer, so it is logged and tried again after a later commit. Everything runs
    on the caller's thread (finished requests are collected at the next call).
    """

    def __init__(
        self,
        client_config: dict[str, str | int | float | bool],
        topics: Set[str],
        interval_s: float,
    ) -> None:
        self._topics = topics
        self._interval_s = interval_s
        self._admin = AdminClient(client_config) if topics else None
        self._pending: dict[tuple[str, int], int] = {}
        self._purged: dict[tuple[str, int], int] = {}
        self._in_flight: dict[TopicPartition, Future[object]] = {}
        self._next = time.monotonic() + interval_s

    def committed(self, offsets: Iterable[TopicPartition]) -> None:
        """Note committed offsets; purge what the repartition topics among them allow, when due."""
        if self._admin is None:
            return
        for tp in offsets:
            if tp.topic in self._topics and tp.offset > 0:
                self._pending[(tp.topic, tp.partition)] = tp.offset
        self._collect()
        now = time.monotonic()
        if now < self._next or self._in_flight or not self._pending:
            return
        self._next = now + self._interval_s
        requests = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self._pending.items()
            if offset > self._purged.get((topic, partition), 0)
        ]
        self._pending.clear()
        if requests:
            self._in_flight = self._admin.delete_records(requests)

    def _collect(self) -> None:
        if not self._in_flight or not all(f.done() for f in self._in_flight.values()):
            return
        for tp, future in self._in_flight.items():
            try:
                future.result()
            except Exception as exc:  # any failure only delays the purge
                logger.warning(
                    "purging %(topic)s[%(partition)d] below offset %(offset)d failed: %(error)s",
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "offset": tp.offset,
                        "error": str(exc),
                    },
                )
            else:
                self._purged[(tp.topic, tp.partition)] = tp.offset
        self._in_flight = {}

"""What the broker knows about the watched partitions: end offsets and max timestamps (KIP-734)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from interceptor.activity import TopicPartition
from progress_control.protocol import is_control_record

__all__ = ["BrokerWatch"]

_LATEST: Any = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_MAX_TIMESTAMP: Any = OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]


class BrokerWatch:
    """Batched admin requests (one ``list_offsets`` call per question for all partitions), and
    reading the few records appended to a quiet partition to tell data from ticks."""

    def __init__(
        self,
        client_config: dict[str, Any],
        include_topic: Callable[[str], bool],
        *,
        timeout_s: float,
        metadata_refresh_s: float,
    ) -> None:
        self._client_config = client_config
        self._admin = AdminClient(client_config)
        self._consumer: Consumer | None = None
        self._include_topic = include_topic
        self._timeout_s = timeout_s
        self._refresh_s = metadata_refresh_s
        self._partitions: list[TopicPartition] = []
        self._refreshed_at: float | None = None

    def partitions(self) -> list[TopicPartition]:
        """Watched partitions; metadata is re-read every ``metadata_refresh_s`` so new topics and
        partitions are picked up. Internal topics (``__*``) are never watched."""
        now = time.monotonic()
        if self._refreshed_at is None or now - self._refreshed_at >= self._refresh_s:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
            self._partitions = sorted(
                (name, partition)
                for name, topic in metadata.topics.items()
                if topic.error is None and not name.startswith("__") and self._include_topic(name)
                for partition in topic.partitions
            )
            self._refreshed_at = now
        return self._partitions

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offset of each partition."""
        return {key: info.offset for key, info in self._list(partitions, _LATEST)}

    def max_timestamps(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Largest record timestamp of each non-empty partition (-1 when empty)."""
        return {key: info.timestamp for key, info in self._list(partitions, _MAX_TIMESTAMP)}

    def data_timestamps(
        self, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, int | None]:
        """Read the records in ``[start, end)`` of each partition: the largest timestamp of a data
        record, or ``None`` when only control records (ours or another replica's) were appended."""
        found: dict[TopicPartition, int | None] = dict.fromkeys(ranges)
        if not ranges:
            return found
        consumer = self._reader()
        consumer.assign([KafkaTopicPartition(t, p, start) for (t, p), (start, _) in ranges.items()])
        pending = set(ranges)
        deadline = time.monotonic() + self._timeout_s
        try:
            while pending and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.2):
                    key = (msg.topic() or "", msg.partition() or 0)
                    error = msg.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(error)
                        pending.discard(key)
                        continue
                    offset = msg.offset() or 0
                    if offset >= ranges[key][1] - 1:
                        pending.discard(key)
                    if offset < ranges[key][1] and not is_control_record(msg):
                        current, timestamp_ms = found[key], msg.timestamp()[1]
                        found[key] = timestamp_ms if current is None else max(current, timestamp_ms)
        finally:
            consumer.unassign()
        for key in pending:  # not read in time: assume data (-1: timestamp unknown)
            if found[key] is None:
                found[key] = -1
        return found

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._client_config,
                    "group.id": "progress-control-sidecar",  # never joins: assign() only
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                }
            )
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()

    def _list(self, partitions: Iterable[TopicPartition], spec: Any) -> list[tuple[Any, Any]]:
        request = {KafkaTopicPartition(topic, partition): spec for topic, partition in partitions}
        if not request:
            return []
        futures = self._admin.list_offsets(request, request_timeout=self._timeout_s)
        return [
            ((tp.topic, tp.partition), future.result(timeout=self._timeout_s))
            for tp, future in futures.items()
        ]

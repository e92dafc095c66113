"""What the broker knows about the watched partitions: end offsets and max timestamps (KIP-734)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from interceptor.activity import TopicPartition

__all__ = ["BrokerWatch"]

_LATEST: Any = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_MAX_TIMESTAMP: Any = OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]


class BrokerWatch:
    """Batched admin requests: one ``list_offsets`` call per question for all partitions."""

    def __init__(
        self,
        admin: AdminClient,
        include_topic: Callable[[str], bool],
        *,
        timeout_s: float,
        metadata_refresh_s: float,
    ) -> None:
        self._admin = admin
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

    def _list(self, partitions: Iterable[TopicPartition], spec: Any) -> list[tuple[Any, Any]]:
        request = {KafkaTopicPartition(topic, partition): spec for topic, partition in partitions}
        if not request:
            return []
        futures = self._admin.list_offsets(request, request_timeout=self._timeout_s)
        return [
            ((tp.topic, tp.partition), future.result(timeout=self._timeout_s))
            for tp, future in futures.items()
        ]

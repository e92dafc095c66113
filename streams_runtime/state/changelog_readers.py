"""The consumers a thread restores changelogs with (Kafka Streams' restore consumer, one per
``StreamThread``): made on first use and kept for the thread's next task, so a restore pays a
client's start-up (threads, connection, metadata) once per thread, not once per task."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer

from streams_runtime.state.restore import changelog_consumer

__all__ = ["ChangelogReaders"]


class ChangelogReaders:
    """A read_committed consumer for the records and a read_uncommitted one for the high
    watermarks, of one application, for one thread at a time."""

    def __init__(self, consumer_config: Mapping[str, str], application_id: str, owner: str) -> None:
        self._config = dict(consumer_config)
        self._group_prefix = f"{application_id}-restore-{owner}"
        self._records: Consumer | None = None
        self._watermarks: Consumer | None = None

    def records(self) -> Consumer:
        """The consumer that reads changelog records (assigned, never subscribed)."""
        if self._records is None:
            self._records = self._new("read_committed")
        return self._records

    def watermarks(self) -> Consumer:
        """The consumer that reads low and high watermarks."""
        if self._watermarks is None:
            self._watermarks = self._new("read_uncommitted")
        return self._watermarks

    def release(self) -> None:
        """A restore is over: drop what it assigned, keep the clients for the next one."""
        if self._records is not None:
            self._records.unassign()

    def close(self) -> None:
        """Close both clients (the next use makes new ones): when the thread ends, or after a
        restore failed and left them in a state not worth trusting."""
        for consumer in (self._records, self._watermarks):
            if consumer is not None:
                consumer.close()
        self._records = self._watermarks = None

    def _new(self, isolation: str) -> Consumer:
        return changelog_consumer(
            self._config, f"{self._group_prefix}-{uuid.uuid4().hex[:8]}", isolation
        )

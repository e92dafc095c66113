"""Helpers for tests against a real broker: unique names and waiting with a deadline."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.waiting import unique_name, wait_for
from progress_control.protocol import is_control_record

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

__all__ = [
    "TopicReader",
    "delete_topics",
    "exposed_metrics",
    "registry_client",
    "ticks_by_partition",
    "undocumented_metrics",
    "unique_name",
    "wait_for",
    "wait_for_leaders",
]

REGISTRY_TIMEOUT_S = 10


def registry_client(url: str) -> SchemaRegistryClient:
    """A client of the tests' schema registry whose requests time out (and are tried again):
    confluent-kafka's client waits forever by default, and one request the registry never
    answered has held a whole test run."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url, "timeout": REGISTRY_TIMEOUT_S})


def delete_topics(
    bootstrap_servers: str, names: Iterable[str], prefixes: Iterable[str] = ()
) -> None:
    """Delete the topics ``names`` and every topic whose name starts with one of ``prefixes`` (an
    application's internal topics), once a test is done with them. A suite that creates
    thousands of partitions on one broker otherwise runs it out of file handles (one per
    partition's open segment; ``ulimit -n`` is often 20,000 or less)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    wanted, starts = set(names), tuple(prefixes)
    doomed = [
        t for t in admin.list_topics(timeout=10).topics if t in wanted or t.startswith(starts)
    ]
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):  # already gone
                future.result(timeout=30)


class TopicReader:
    """Reads every record of a topic from the beginning, incrementally."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_name("reader"),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # Never skip to the end: a reader must see every record there is.
                "auto.offset.reset": "earliest",
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.records: list[Message] = []

    def read(self, quiet_s: float = 0.3, max_s: float = 1.0) -> list[Message]:
        """Read until nothing arrived for ``quiet_s`` (at most ``max_s``, for busy topics)."""
        give_up = time.monotonic() + max_s
        while (msg := self._consumer.poll(quiet_s)) is not None:  # tombstones are falsy
            if msg.error() is None:
                self.records.append(msg)
            if time.monotonic() > give_up:
                break
        return self.records

    def ticks(self) -> list[Message]:
        return [m for m in self.read() if is_control_record(m)]

    def close(self) -> None:
        self._consumer.close()


def ticks_by_partition(ticks: list[Message]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for tick in ticks:
        counts[tick.partition() or 0] = counts.get(tick.partition() or 0, 0) + 1
    return counts


def exposed_metrics(exposition: str) -> list[str]:
    """The names of our metrics (``progress_control_*``, ``streams_*``) in a Prometheus text
    exposition."""
    return re.findall(r"^# TYPE ((?:progress_control|streams)_\w+) ", exposition, re.MULTILINE)


def undocumented_metrics(names: Iterable[str]) -> list[str]:
    """Those of ``names`` (metrics', or samples': a histogram's end in ``_bucket``, ``_sum``,
    ``_count``) that docs/operations/metrics.md does not name as its tables and lists write
    them: in backticks, counters with ``_total``, followed by their labels or the backtick."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "operations" / "metrics.md").read_text()
    return sorted(
        name
        for name in set(names)
        if not re.search(
            rf"`{re.escape(re.sub(r'_(bucket|sum|count)$', '', name))}(_total)?[{{`]", page
        )
    )


def wait_for_leaders(admin: AdminClient, topics: Iterable[str], timeout_s: float = 30) -> None:
    """Wait until the broker serves each of ``topics`` in its metadata with a leader for every
    partition: a topic's creation is acknowledged by the controller, and the broker serves it
    a little later (seconds on a loaded machine), so a client looking in between misses it."""
    wanted = list(topics)

    def served(topic: str) -> bool:
        # One topic's metadata: the shared test broker holds thousands of topics.
        metadata = admin.list_topics(topic, timeout=5).topics.get(topic)
        return (
            metadata is not None
            and metadata.error is None
            and bool(metadata.partitions)
            and all(p.leader >= 0 for p in metadata.partitions.values())
        )

    wait_for(
        lambda: all(served(topic) for topic in wanted),
        timeout_s=timeout_s,
        message=f"the broker serving {wanted}",
    )

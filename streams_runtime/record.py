"""Records as the runtime sees them: raw source records from the consumer, and typed records
flowing between processors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

__all__ = ["Headers", "Record", "SourceRecord", "TaskId", "TopicPartitionId"]

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")

Headers = list[tuple[str, bytes | None]]


class TopicPartitionId(NamedTuple):
    """A hashable (topic, partition) pair; ``confluent_kafka.TopicPartition`` is not hashable by
    value in every version, and carries offsets we do not want in dict keys."""

    topic: str
    partition: int


@dataclass(frozen=True, order=True)
class TaskId:
    """A task: one partition of a sub-topology's (co-partitioned) inputs (``<sub>_<partition>``,
    as Kafka Streams names it)."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"


@dataclass(slots=True)
class SourceRecord:
    """One record fetched from an input partition, still in serialized form.

    ``is_control`` is decided once, from the ``progress-control`` header, when the record is
    fetched; control records carry no key or value the runtime ever looks at. ``rejected``: it
    carries the header but failed validation (:mod:`progress_control.trust`), so it is neither
    data nor time, only an offset to move past.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    is_control: bool = False
    rejected: bool = False

    @property
    def tp(self) -> TopicPartitionId:
        return TopicPartitionId(self.topic, self.partition)


@dataclass(slots=True)
class Record(Generic[K, V]):
    """A deserialized record flowing through the processor graph.

    A table's update also carries the key's previous value in ``old_value`` (Kafka Streams'
    ``Change.oldValue``; ``None`` when the key had none), so derived tables know whether a row
    was in them before."""

    key: K
    value: V
    timestamp: int
    headers: Headers | None = None
    old_value: V | None = None

    def with_key(self, key: K2) -> Record[K2, V]:
        """A copy with another key (Kafka Streams' ``Record.withKey``)."""
        return Record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: V2) -> Record[K, V2]:
        """A copy with another value (``Record.withValue``)."""
        return Record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record[K, V]:
        """A copy with another timestamp (``Record.withTimestamp``)."""
        return Record(self.key, self.value, timestamp, self.headers, self.old_value)

    def with_headers(self, headers: Headers | None) -> Record[K, V]:
        """A copy with other headers (``Record.withHeaders``)."""
        return Record(self.key, self.value, self.timestamp, headers, self.old_value)

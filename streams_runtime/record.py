"""Records as the runtime sees them: raw source records from the consumer, and typed records
flowing between processors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

__all__ = ["Headers", "Record", "SourceRecord", "TaskId", "TopicPartitionId"]

K = TypeVar("K")
V = TypeVar("V")

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

"""Stateless processors (Kafka Streams' ``KStreamFilter``, ``KStreamMap``, ``KStreamFlatMap``,
``KStreamFlatMapValues``, ``KStreamBranch``, ``KStreamPeek``...) and the two ends of a
sub-topology: the source that deserializes input records and the sink that serializes and sends
output records. They keep their input's order, so the data a sink sends moves its progress (see
:mod:`streams_runtime.processors.base`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from streams_runtime.processors.base import NO_PROGRESS, Processor, ProcessorContext
from streams_runtime.record import Record, SourceRecord
from streams_runtime.serde_context import (
    SerdeContext,
    deserialize_in,
    is_contextual,
    serialize_in,
)
from streams_runtime.serdes import Serde, SessionWindowedSerde, TimeWindowedSerde
from streams_runtime.state import SessionStore

__all__ = [
    "DROPPED",
    "BranchProcessor",
    "FilterProcessor",
    "FlatMapProcessor",
    "FlatMapValuesProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "PassThroughProcessor",
    "PeekProcessor",
    "SinkProcessor",
    "SourceProcessor",
    "ValueStep",
]


class PassThroughProcessor(Processor):
    name = "merge"
    keeps_order = True


class SourceProcessor(Processor):
    """Deserializes source records; the task forwards them (and applies the bad-record policy to
    serde errors and to exceptions raised further down). Context-aware serdes
    (:mod:`streams_runtime.serde_context`) are given the record's topic and headers."""

    name = "source"
    keeps_order = True

    def __init__(self, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__()
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._control_time = NO_PROGRESS
        self.contextual = is_contextual(key_serde) or is_contextual(value_serde)
        """Whether a serde takes the record's topic and headers (:meth:`key_value_of`)."""
        if self.contextual:  # plain serdes keep the plain path
            self.deserialize = self._deserialize_in_context  # type: ignore[method-assign]

    def advance(self, timestamp: int) -> None:
        self._control_time = max(self._control_time, timestamp)
        super().advance(timestamp)

    def control_progress(self) -> int:
        return self._control_time

    def deserialize(self, source: SourceRecord) -> Record[Any, Any]:
        return Record(
            self._key_serde.deserialize(source.key),
            self._value_serde.deserialize(source.value),
            source.timestamp,
            source.headers,
        )

    def key_value_of(self, source: SourceRecord) -> tuple[Any, Any]:
        """The record's key and value, each serde given the record's topic and headers."""
        topic, headers = source.topic, source.headers
        return (
            deserialize_in(self._key_serde, source.key, SerdeContext(topic, "key", headers)),
            deserialize_in(self._value_serde, source.value, SerdeContext(topic, "value", headers)),
        )

    def _deserialize_in_context(self, source: SourceRecord) -> Record[Any, Any]:
        key, value = self.key_value_of(source)
        return Record(key, value, source.timestamp, source.headers)


OnBadRecord = Callable[[SourceRecord, str, Exception], None]
"""Takes a record the source refused, the reason (``deserialization`` or ``processing``) and
the exception."""


class BatchSourceProcessor(SourceProcessor):
    """A source that takes a batch of its task's one input's records at a time, where a source
    has the task forward each record itself: a fused operator
    (:mod:`streams_runtime.fused`)."""

    on_error: Callable[[Exception], None] | None = None
    """Takes what user code below raises for one result it emits (the others are still
    emitted); unset, it is raised. The task sets it per batch."""

    def source_key_value(self, record: SourceRecord) -> tuple[Any, Any]:
        """The record's key and value as this source deserializes them."""
        if self.contextual:
            return self.key_value_of(record)
        return self._key_serde.deserialize(record.key), self._value_serde.deserialize(record.value)

    @abstractmethod
    def process_batch(self, records: Sequence[SourceRecord], on_bad: OnBadRecord) -> None:
        """Process a run of data records (control records go to :meth:`advance`); a record
        refused, or whose processing raises, goes to ``on_bad``, in order."""

    def query_store(self, name: str) -> SessionStore | None:
        """The store ``name`` as interactive queries read it, where this source keeps what the
        store will hold itself (``None``: read the store)."""
        return None


DROPPED: Any = object()
"""What :meth:`ValueStep.apply` gives for a record it drops."""


class ValueStep(Processor):
    """A processor that gives each record on with its key, timestamp and headers, its value
    changed or not, or drops it (filter, map_values, peek, a stream-table join): what a fused
    operator runs record by record inside a batch (:mod:`streams_runtime.fused`), without a
    :class:`Record` or a forward per step."""

    keeps_order = True

    @abstractmethod
    def apply(self, key: Any, value: Any) -> Any:
        """The record's value after this step, or :data:`DROPPED`."""

    def process(self, record: Record[Any, Any]) -> None:
        value = self.apply(record.key, record.value)
        if value is not DROPPED:
            self.forward(Record(record.key, value, record.timestamp, record.headers))


class FilterProcessor(ValueStep):
    name = "filter"

    def __init__(self, predicate: Callable[[Any, Any], bool]) -> None:
        super().__init__()
        self._predicate = predicate

    def apply(self, key: Any, value: Any) -> Any:
        return value if self._predicate(key, value) else DROPPED

    def process(self, record: Record[Any, Any]) -> None:
        if self._predicate(record.key, record.value):
            self.forward(record)  # the record itself: no copy


class MapProcessor(Processor):
    name = "map"
    keeps_order = True

    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__()
        self._mapper = mapper

    def apply_pair(self, key: Any, value: Any) -> tuple[Any, Any]:
        """The record's new key and value: what a fused chain calls in place of
        :meth:`process` (:mod:`streams_runtime.fused`)."""
        return self._mapper(key, value)

    def process(self, record: Record[Any, Any]) -> None:
        key, value = self._mapper(record.key, record.value)
        self.forward(Record(key, value, record.timestamp, record.headers))


class MapValuesProcessor(ValueStep):
    name = "map_values"

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        super().__init__()
        self._mapper = mapper

    def apply(self, key: Any, value: Any) -> Any:
        return self._mapper(value)


class FlatMapProcessor(Processor):
    """Kafka Streams' ``KStreamFlatMap``: ``mapper(key, value)`` gives any number of
    ``(key, value)`` pairs, each forwarded with the input's timestamp and headers.

    Keeps order: every record it forwards carries the timestamp of the record it took, in the
    order taken, so the data a sink sends still moves progress; control time passes on."""

    name = "flat_map"
    keeps_order = True

    def __init__(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> None:
        super().__init__()
        self._mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        timestamp, headers = record.timestamp, record.headers
        for key, value in self._mapper(record.key, record.value):
            self.forward(Record(key, value, timestamp, headers))


class FlatMapValuesProcessor(Processor):
    """Kafka Streams' ``KStreamFlatMapValues``: ``mapper(value)`` gives any number of values,
    each forwarded with the input's key, timestamp and headers.

    Keeps order, as :class:`FlatMapProcessor`: outputs carry their input's timestamp."""

    name = "flat_map_values"
    keeps_order = True

    def __init__(self, mapper: Callable[[Any], Iterable[Any]]) -> None:
        super().__init__()
        self._mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        key, timestamp, headers = record.key, record.timestamp, record.headers
        for value in self._mapper(record.value):
            self.forward(Record(key, value, timestamp, headers))


class BranchProcessor(Processor):
    """Kafka Streams' ``KStreamBranch`` (``KStream.split``): a record goes to the child of the
    first predicate it satisfies, in the order the branches were added; one satisfying none goes
    to the default branch (the child after the predicates' children) when there is one, and is
    dropped otherwise. Children are in the order the branches were added.

    Keeps order: each branch gets a subsequence of the records taken, unchanged, so its sinks'
    data moves their progress (a record another branch took moves nothing here, as a filter's
    drops); control records reach every branch (:meth:`Processor.advance`)."""

    name = "branch"
    keeps_order = True

    def __init__(self, predicates: Sequence[Callable[[Any, Any], bool]]) -> None:
        super().__init__()
        self._predicates = tuple(predicates)

    def process(self, record: Record[Any, Any]) -> None:
        key, value = record.key, record.value
        for index, predicate in enumerate(self._predicates):
            if predicate(key, value):
                self.children[index].process(record)
                return
        if len(self.children) > len(self._predicates):
            self.children[len(self._predicates)].process(record)


class PeekProcessor(ValueStep):
    name = "peek"

    def __init__(self, action: Callable[[Any, Any], None]) -> None:
        super().__init__()
        self._action = action

    def apply(self, key: Any, value: Any) -> Any:
        self._action(key, value)
        return value

    def process(self, record: Record[Any, Any]) -> None:
        self._action(record.key, record.value)
        self.forward(record)  # the record itself: no copy


class SinkProcessor(Processor):
    """Serializes and sends to a topic, partitioned by key with murmur2 (windowed keys by their
    inner key). Context-aware serdes (:mod:`streams_runtime.serde_context`) are given the topic
    and a copy of the record's headers, which is sent with what they added to it."""

    name = "sink"
    keeps_order = True

    def __init__(
        self,
        topic: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        internal: bool = False,
        partition_of: Callable[[Record[Any, Any]], int] | None = None,
    ) -> None:
        """``partition_of``: the partition a record goes to (-1: by its key), where the record
        says it (a foreign-key join's answer goes back to its subscription's partition)."""
        super().__init__()
        self.topic = topic
        self._internal = internal
        self._partition_of = partition_of
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._context: ProcessorContext | None = None
        self._sent = NO_PROGRESS
        self._in_order = True

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        if self._internal:
            self.topic = f"{context.application_id}-{self.topic}"
        self._in_order = all(p.keeps_order for p in _ancestors(self))
        if is_contextual(self._key_serde) or is_contextual(self._value_serde):
            self.process = self._process_in_context  # type: ignore[method-assign]

    def progress(self) -> int:
        """What a tick on this sink's topic may promise: records this sink still sends have
        timestamps of at least this, on in-order input (:data:`NO_PROGRESS`: nothing yet). The
        data it sent counts when nothing before it reorders records; control time always."""
        sent = self._sent if self._in_order else NO_PROGRESS
        return max(sent, self.control_progress())

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        self._sent = max(self._sent, record.timestamp)
        key_serde = self._key_serde
        # Windowed keys are partitioned by their inner key, as Kafka Streams'
        # WindowedStreamPartitioner does: every window of a key lands in one partition.
        partition_key = (
            key_serde.inner.serialize(record.key.key)
            if isinstance(key_serde, SessionWindowedSerde | TimeWindowedSerde)
            and record.key is not None
            else None
        )
        partition_of = self._partition_of
        self._context.send(
            self.topic,
            key_serde.serialize(record.key),
            self._value_serde.serialize(record.value),
            record.timestamp,
            record.headers,
            partition_key=partition_key,
            partition=-1 if partition_of is None else partition_of(record),
        )

    def _process_in_context(self, record: Record[Any, Any]) -> None:
        """:meth:`process` with serdes given the topic and the record's headers."""
        assert self._context is not None
        self._sent = max(self._sent, record.timestamp)
        key_serde = self._key_serde
        headers = list(record.headers or ())
        key_context = SerdeContext(self.topic, "key", headers)
        # The inner key's bytes only choose the partition: what they add to headers is dropped.
        partition_key = (
            serialize_in(key_serde.inner, record.key.key, SerdeContext(self.topic, "key", []))
            if isinstance(key_serde, SessionWindowedSerde | TimeWindowedSerde)
            and record.key is not None
            else None
        )
        key = serialize_in(key_serde, record.key, key_context)
        value = serialize_in(self._value_serde, record.value, key_context._replace(field="value"))
        partition_of = self._partition_of
        self._context.send(
            self.topic,
            key,
            value,
            record.timestamp,
            headers if headers or record.headers is not None else None,
            partition_key=partition_key,
            partition=-1 if partition_of is None else partition_of(record),
        )


def _ancestors(processor: Processor) -> list[Processor]:
    found: list[Processor] = []
    stack = list(processor.parents)
    while stack:
        parent = stack.pop()
        if parent not in found:
            found.append(parent)
            stack.extend(parent.parents)
    return found

"""The driver's topics as a test sees them (Kafka Streams' ``TestInputTopic``,
``TestOutputTopic`` and ``TestRecord``): typed records in, typed records and ticks out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from progress_control.protocol import ControlMarker, parse_control_headers
from progress_control.trust import ControlRecordSource
from streams_runtime.record import Headers, SourceRecord
from streams_runtime.serde_context import SerdeContext, deserialize_in, serialize_in
from streams_runtime.serdes import Serde

if TYPE_CHECKING:
    from streams_runtime.testing.driver import TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "Tick"]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class TestRecord(Generic[K, V]):
    """One record of a test topic: key, value, timestamp (ms) and headers."""

    __test__ = False  # not a pytest test class

    key: K | None
    value: V | None
    timestamp: int
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True)
class Tick:
    """A control record the runtime wrote to an output or repartition topic: its promise that
    no record it still writes to ``partition`` is older than ``timestamp`` (docs/design.md
    §2)."""

    topic: str
    partition: int
    timestamp: int
    key: bytes | None
    headers: Headers

    @property
    def marker(self) -> ControlMarker:
        """The tick's marker header: its source id and sequence number (and signature)."""
        marker = parse_control_headers(self.headers)
        assert marker is not None  # a tick carries a valid header by definition
        return marker


class TestInputTopic(Generic[K, V]):
    """Pipes typed records (and ticks) into one input topic of a driver; each call processes
    everything it makes processable before it returns. A record without a timestamp gets the
    topic's current time, which then moves on by ``auto_advance_ms``."""

    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        start_timestamp_ms: int,
        auto_advance_ms: int,
    ) -> None:
        if auto_advance_ms < 0:
            raise ValueError(f"auto_advance_ms must be >= 0, got {auto_advance_ms}")
        self.topic = topic
        self._driver = driver
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._time = start_timestamp_ms
        self._advance = auto_advance_ms

    def _timestamp(self, timestamp: int | None) -> int:
        if timestamp is not None:
            return timestamp
        now = self._time
        self._time += self._advance
        return now

    def advance_time(self, ms: int) -> None:
        """Move the topic's current time (the timestamp of records piped without one)."""
        if ms < 0:
            raise ValueError(f"time moves forward only, got {ms} ms")
        self._time += ms

    def pipe_input(
        self,
        key: K | None,
        value: V | None,
        timestamp: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """One record, serialized as a producer with the topic's serdes would."""
        sent = list(headers or ())
        raw_key = serialize_in(self._key_serde, key, SerdeContext(self.topic, "key", sent))
        raw_value = serialize_in(self._value_serde, value, SerdeContext(self.topic, "value", sent))
        self._driver.pipe_raw(self.topic, raw_key, raw_value, self._timestamp(timestamp), sent)

    def pipe_value(self, value: V | None, timestamp: int | None = None) -> None:
        """One record with a null key."""
        self.pipe_input(None, value, timestamp)

    def pipe_key_values(self, pairs: Iterable[tuple[K | None, V | None]]) -> None:
        """Records without timestamps, one per ``(key, value)``."""
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_records(self, records: Iterable[TestRecord[K, V]]) -> None:
        """Records with their own timestamps and headers."""
        for record in records:
            self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_tick(self, timestamp: int, *, source: ControlRecordSource | None = None) -> None:
        """A control record at ``timestamp``, as the interceptor or the sidecar writes one
        (``source``: the writer, e.g. one that signs; default an unsigned one): it moves stream
        time and reaches no user code, or is rejected and counted as the app's trust policy
        says."""
        source = source or self._driver.tick_source
        record = source.record(self.topic, 0, timestamp)
        self._driver.pipe_raw(self.topic, record.key, None, timestamp, record.byte_headers)


class TestOutputTopic(Generic[K, V]):
    """Reads what the topology wrote to one topic, in order: data records through the topic's
    serdes, ticks apart (:meth:`read_ticks`). Reading consumes: every reader of a topic shares
    one queue, as in Kafka Streams' driver."""

    __test__ = False

    def __init__(
        self,
        topic: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        records: Callable[[], list[SourceRecord]],
        ticks: Callable[[], list[Tick]],
    ) -> None:
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._records = records
        self._ticks = ticks

    def _typed(self, raw: SourceRecord) -> TestRecord[K, V]:
        headers = list(raw.headers or ())
        key: Any = deserialize_in(
            self._key_serde, raw.key, SerdeContext(self.topic, "key", headers)
        )
        value: Any = deserialize_in(
            self._value_serde, raw.value, SerdeContext(self.topic, "value", headers)
        )
        return TestRecord(key, value, raw.timestamp, headers)

    def read_record(self) -> TestRecord[K, V]:
        """The next data record; ``IndexError`` when there is none."""
        queue = self._records()
        if not queue:
            raise IndexError(f"no record left in {self.topic}")
        return self._typed(queue.pop(0))

    def read_value(self) -> V | None:
        return self.read_record().value

    def read_key_value(self) -> tuple[K | None, V | None]:
        record = self.read_record()
        return record.key, record.value

    def read_records(self) -> list[TestRecord[K, V]]:
        """Every data record not read yet."""
        queue = self._records()
        taken, queue[:] = list(queue), []
        return [self._typed(raw) for raw in taken]

    def read_values(self) -> list[V | None]:
        return [record.value for record in self.read_records()]

    def read_key_values(self) -> list[tuple[K | None, V | None]]:
        return [(record.key, record.value) for record in self.read_records()]

    def read_key_values_to_map(self) -> dict[K | None, V | None]:
        """The latest value per key (a table's view of the topic; a null value removes)."""
        table: dict[K | None, V | None] = {}
        for key, value in self.read_key_values():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        return table

    def read_ticks(self) -> list[Tick]:
        """Every tick the runtime wrote here and not read yet, in order."""
        queue = self._ticks()
        taken, queue[:] = list(queue), []
        return taken

    def queue_size(self) -> int:
        """Data records not read yet."""
        return len(self._records())

    def is_empty(self) -> bool:
        return not self._records()

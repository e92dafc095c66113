"""Changelog topics: naming, record keys, the source header, and the writer stores log through.

Every changelog record carries, in the ``pc-source`` header, the input record (topic, partition,
offset) whose processing caused it. Restore uses it to keep a store from ever getting ahead of the
committed input position (docs/runtime/guarantees.md, emit-on-change after a crash): a changelog
record caused by input that was not committed yet is skipped, and that input is processed again.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from confluent_kafka import Message

from streams_runtime.record import Headers, TopicPartitionId

__all__ = [
    "SOURCE_HEADER",
    "ChangelogWriter",
    "ChangelogWrites",
    "InputRef",
    "RecordSink",
    "SourcePosition",
    "changelog_topic",
    "decode_source",
    "encode_source",
    "record_source",
    "session_changelog_key",
    "split_session_changelog_key",
]

SOURCE_HEADER = "pc-source"

# Source header layout, big-endian: version (u8), topic length (u16), topic (UTF-8),
# partition (i32), offset (i64).
_SOURCE_VERSION = 1
_SOURCE_PREFIX = struct.Struct(">BH")
_SOURCE_SUFFIX = struct.Struct(">iq")

# Session changelog key: the record key, then start and end as 8-byte big-endian signed integers.
_SESSION_WINDOW = struct.Struct(">qq")


InputRef = tuple[TopicPartitionId | None, int]
"""The input record a write names as its cause: ``(partition, offset)``, or ``(None, -1)`` for
none (a write before the task took any input)."""

ChangelogWrites = Iterable[tuple[bytes, tuple[bytes | None, int, Headers | None]]]
"""A buffered writer's writes: ``(key, (value, timestamp, headers))`` each."""


@runtime_checkable
class RecordSink(Protocol):
    """Where changelog records go; implemented by the runtime's record collector (its producer
    wrapper), so changelog writes share the producer, its error handling and, under exactly-once,
    its transaction with the outputs and input offsets."""

    def send(  # noqa: PLR0917 (the collector's signature)
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        """Send one record to an explicit partition."""
        ...

    def send_many(self, topic: str, partition: int, writes: ChangelogWrites) -> None:
        """:meth:`send` each of ``writes``, in order, to ``topic``/``partition`` (a buffered
        writer's flush: one call, not one per record)."""
        ...


@dataclass
class SourcePosition:
    """The input record a task is processing (the record context of Kafka Streams'
    ``ProcessorRecordContext``): written by the task alone, before each record, and read by its
    stores, so a processor's write says which input caused it without naming it.

    Writes that happen later than their cause name it instead (:data:`InputRef`): a record
    cache's write-back and the native windowed aggregation's write-behind pass each entry's own
    input. What a flush forwards downstream is written with the position as it stands: the last
    input the task took, which, as every cache is flushed before each commit, is committed
    exactly when the flushed entry's input is (restore's committed-input rule decides the same).
    ``tp is None`` (nothing processed yet) means changelog writes carry no source and are always
    applied on restore.
    """

    tp: TopicPartitionId | None = None
    offset: int = -1  # offset of the input record being processed, -1 when none
    # The header of the last position asked for: all of a task's stores share it, so one input
    # record's changelog writes encode it once.
    _header_tp: TopicPartitionId | None = field(default=None, init=False, repr=False, compare=False)
    _header_offset: int = field(default=-1, init=False, repr=False, compare=False)
    _header: Headers | None = field(default=None, init=False, repr=False, compare=False)

    def set(self, tp: TopicPartitionId, offset: int) -> None:
        """Record that the input record at ``tp``/``offset`` is being processed."""
        self.tp = tp
        self.offset = offset

    def headers(self) -> Headers | None:
        """The changelog headers of the current position (the ``pc-source`` header), ``None``
        before the task took any input. The same list is returned until the position moves:
        callers must not change it."""
        tp = self.tp
        if tp is None:
            return None
        if tp is not self._header_tp or self.offset != self._header_offset:
            self._header = [(SOURCE_HEADER, encode_source(tp, self.offset))]
            self._header_tp, self._header_offset = tp, self.offset
        return self._header


def encode_source(tp: TopicPartitionId, offset: int) -> bytes:
    """The ``pc-source`` header value for input ``tp``/``offset``."""
    return _source_prefix(tp) + _SOURCE_SUFFIX.pack(tp.partition, offset)


@functools.lru_cache(maxsize=1024)
def _source_prefix(tp: TopicPartitionId) -> bytes:
    # Once per input partition rather than once per changelog record.
    topic = tp.topic.encode("utf-8")
    if len(topic) > 0xFFFF:
        raise ValueError(f"topic name too long for the source header: {len(topic)} bytes")
    return _SOURCE_PREFIX.pack(_SOURCE_VERSION, len(topic)) + topic


def decode_source(raw: bytes) -> tuple[TopicPartitionId, int]:
    """Parse a ``pc-source`` header value; ``ValueError`` when it is not one."""
    if len(raw) < _SOURCE_PREFIX.size:
        raise ValueError(f"source header too short ({len(raw)} bytes)")
    version, topic_length = _SOURCE_PREFIX.unpack_from(raw)
    if version != _SOURCE_VERSION:
        raise ValueError(f"unsupported source header version {version}")
    expected = _SOURCE_PREFIX.size + topic_length + _SOURCE_SUFFIX.size
    if len(raw) != expected:
        raise ValueError(f"source header is {len(raw)} bytes, expected {expected}")
    try:
        topic = raw[_SOURCE_PREFIX.size : _SOURCE_PREFIX.size + topic_length].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("source header topic is not UTF-8") from exc
    partition, offset = _SOURCE_SUFFIX.unpack_from(raw, _SOURCE_PREFIX.size + topic_length)
    if not topic or partition < 0 or offset < -1:
        raise ValueError(f"invalid source in header: {topic!r}/{partition}@{offset}")
    return TopicPartitionId(topic, partition), offset


def changelog_topic(application_id: str, store_name: str) -> str:
    """The changelog topic of a store (Kafka Streams' naming)."""
    return f"{application_id}-{store_name}-changelog"


def session_changelog_key(key: bytes, start: int, end: int) -> bytes:
    """The changelog key of a session: key bytes, start and end (8-byte big-endian signed)."""
    return key + _SESSION_WINDOW.pack(start, end)


def split_session_changelog_key(raw: bytes) -> tuple[bytes, int, int]:
    """Inverse of :func:`session_changelog_key`; ``ValueError`` when ``raw`` is too short."""
    if len(raw) < _SESSION_WINDOW.size:
        raise ValueError(f"session changelog key too short ({len(raw)} bytes)")
    split = len(raw) - _SESSION_WINDOW.size
    start, end = _SESSION_WINDOW.unpack_from(raw, split)
    return raw[:split], start, end


class ChangelogWriter:
    """Logs one store partition's writes to its changelog partition through the task's sink.

    With ``buffered`` (as the runtime uses it), writes are held until :meth:`flush`, which the
    runtime calls before every commit, and only the latest write per key is sent (Kafka Streams'
    record cache does the same). That is safe for restore: a write superseded within one
    commit interval came from input that is not committed before the interval ends either, so
    the record that is sent carries the newest source offset of all of them.
    """

    def __init__(
        self,
        sink: RecordSink,
        topic: str,
        partition: int,
        position: SourcePosition,
        *,
        buffered: bool = False,
        max_buffered: int = 10_000,
    ) -> None:
        self.sink = sink
        self.topic = topic
        self.partition = partition
        self.position = position
        self._buffered = buffered
        self._max_buffered = max_buffered
        # key -> (value, timestamp, headers): the source header is encoded when logged.
        self._pending: dict[bytes, tuple[bytes | None, int, Headers | None]] = {}

    @property
    def tp(self) -> TopicPartitionId:
        """The changelog partition written to."""
        return TopicPartitionId(self.topic, self.partition)

    def log(
        self,
        key: bytes,
        value: bytes | None,
        timestamp: int,
        *,
        source: InputRef | None = None,
    ) -> None:
        """Log ``key``/``value`` (``None``: a tombstone) with the source header of the current
        :class:`SourcePosition`, or of ``source`` when given (a write-back, a restore
        correction)."""
        if source is None:
            headers = self.position.headers()
        else:
            tp, offset = source
            headers = None if tp is None else [(SOURCE_HEADER, encode_source(tp, offset))]
        if not self._buffered:
            self.sink.send(self.topic, self.partition, key, value, timestamp, headers)
            return
        pending = self._pending
        pending[key] = (value, timestamp, headers)
        if len(pending) >= self._max_buffered:
            self.flush()

    def flush(self) -> int:
        """Send the buffered writes; returns how many were sent."""
        pending, self._pending = self._pending, {}
        self.sink.send_many(self.topic, self.partition, pending.items())
        return len(pending)

    def discard(self) -> None:
        """Drop the buffered writes (the task is closed without a commit)."""
        self._pending.clear()


def record_source(msg: Message) -> tuple[TopicPartitionId, int] | None:
    """The decoded ``pc-source`` header of a consumed changelog record: (input partition,
    input offset), or ``None`` when absent or invalid."""
    headers = msg.headers()
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    raw: bytes | None = None
    for name, value in pairs:
        if name == SOURCE_HEADER:
            raw = value.encode() if isinstance(value, str) else value
    if raw is None:
        return None
    try:
        return decode_source(raw)
    except ValueError:
        return None

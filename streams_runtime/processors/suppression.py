"""Suppression of a table's updates for a time limit (Kafka Streams' ``KTableSuppressProcessor``
with ``Suppressed.untilTimeLimit``, over its ``InMemoryTimeOrderedKeyValueChangeBuffer``).

A key's updates are held back in a buffer and its latest one is forwarded once
``time_to_wait_ms`` of stream time passed since the key's *first* buffered update (Kafka
Streams' non-resetting buffer time: later updates replace the value, not the deadline). Stream
time is what reached the suppression: data and, here as nowhere in Kafka Streams, control
records, so a quiet input's buffered updates come out on ticks alone. The suppression of
windowed tables until their windows close is
:class:`~streams_runtime.processors.sessions.SuppressProcessor`.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass
from typing import Any

from streams_runtime.errors import StreamsError
from streams_runtime.processors.base import NO_PROGRESS, KeyedStoreProcessor, ProcessorContext
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde
from streams_runtime.state import KeyValueStore

__all__ = ["TimeLimitSuppressProcessor"]

_LONGS = struct.Struct(">qq")
_LENGTH = struct.Struct(">i")


@dataclass(slots=True)
class _Buffered:
    """One key's buffered update, serialized (Kafka Streams' ``BufferValue``): the key's buffer
    time (its first buffered update's timestamp), the latest update's timestamp, headers, new and
    old value, and the old value of the first buffered update (``prior``)."""

    time: int
    timestamp: int
    headers: Headers | None
    new: bytes | None
    old: bytes | None
    prior: bytes | None

    def size(self, key: bytes) -> int:
        """Kafka Streams' estimate of what it holds (``computeRecordSize``): buffer time, key,
        values (the old one once when it is the prior one), and the record context (timestamp,
        offset, partition, headers; the source topic's name is not known here)."""
        size = 8 + len(key) + len(self.prior or b"") + len(self.new or b"")
        if self.old is not self.prior:
            size += len(self.old or b"")
        size += 8 + 8 + 4
        for name, value in self.headers or ():
            size += len(name) + len(value or b"")
        return size

    def encode(self) -> bytes:
        """The store's (and changelog's) value: buffer time, timestamp, the three values, then
        the headers (a count, -1 for none), each blob length-prefixed (-1 for none)."""
        parts = [_LONGS.pack(self.time, self.timestamp)]
        for blob in (self.new, self.old, self.prior):
            parts.append(_blob(blob))
        headers = self.headers
        parts.append(_LENGTH.pack(-1 if headers is None else len(headers)))
        for name, value in headers or ():
            parts.append(_blob(name.encode()))
            parts.append(_blob(value))
        return b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes) -> _Buffered:
        time, timestamp = _LONGS.unpack_from(raw, 0)
        offset = _LONGS.size
        new, offset = _read_blob(raw, offset)
        old, offset = _read_blob(raw, offset)
        prior, offset = _read_blob(raw, offset)
        (count,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        headers: Headers | None = None
        if count >= 0:
            headers = []
            for _ in range(count):
                name, offset = _read_blob(raw, offset)
                value, offset = _read_blob(raw, offset)
                headers.append(((name or b"").decode(), value))
        return cls(time, timestamp, headers, new, old, old if prior == old else prior)


def _blob(data: bytes | None) -> bytes:
    return _LENGTH.pack(-1) if data is None else _LENGTH.pack(len(data)) + data


def _read_blob(raw: bytes, offset: int) -> tuple[bytes | None, int]:
    (length,) = _LENGTH.unpack_from(raw, offset)
    offset += _LENGTH.size
    if length < 0:
        return None, offset
    return raw[offset : offset + length], offset + length


class TimeLimitSuppressProcessor(KeyedStoreProcessor):
    """Suppress a table's updates until a time limit (Kafka Streams' ``KTableSuppressProcessor``
    with ``Suppressed.untilTimeLimit(timeToWaitForMoreEvents, bufferConfig)``).

    Every update is buffered per key in the changelogged key-value store ``store_name`` (so a
    restart neither loses nor repeats what was buffered, headers included); a key keeps the
    buffer time of its first buffered update, and its latest update (value, old value, timestamp
    and headers) is forwarded once ``buffer time <= stream time - time_to_wait_ms``, keys in
    buffer-time order. Deletes are buffered and forwarded too (Kafka Streams drops tombstones
    only for final results of windows). Stream time moves with data and control records.

    The buffer is bounded by ``max_records`` and ``max_bytes`` (``None``: no bound). Past a
    bound, ``shut_down_when_full`` stops the application (a :class:`StreamsError`, as Kafka
    Streams' ``StreamsException``); otherwise the keys buffered longest are forwarded early
    until it is within bounds again (``emitEarlyWhenFull``).

    Progress: output may run behind its input (a key emitted on time carries its latest update's
    timestamp, which may be older than what another key forwarded), so ``keeps_order`` is
    ``False``, and control time is held back by ``time_to_wait_ms``: every key still buffered
    was first updated after ``stream time - time_to_wait_ms`` (the others were emitted), and on
    in-order input its latest update is no older."""

    name = "suppress"
    keeps_order = False

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        time_to_wait_ms: int,
        max_records: int | None = None,
        max_bytes: int | None = None,
        shut_down_when_full: bool = False,
        node_name: str = "KTABLE-SUPPRESS",
    ) -> None:
        super().__init__(store_name, key_serde)
        self._value_serde = value_serde
        self._wait = time_to_wait_ms
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._shut_down = shut_down_when_full
        self._node_name = node_name
        self._store: KeyValueStore | None = None
        self._buffer: dict[bytes, _Buffered] = {}
        self._by_time: list[tuple[int, bytes]] = []  # heap; one entry per buffered key
        self._bytes = 0
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._store = context.kv_store(self._store_name)
        self.observed_stream_time = max(self.observed_stream_time, context.stream_time)
        self._buffer.clear()
        for key, raw in self._store.items():
            buffered = _Buffered.decode(raw)
            self._buffer[key] = buffered
            self._bytes += buffered.size(key)
        self._by_time = [(b.time, key) for key, b in self._buffer.items()]
        heapq.heapify(self._by_time)
        context.suppress_buffer_size(self._store_name, len(self._buffer))

    @property
    def buffered_bytes(self) -> int:
        """What the buffer holds by Kafka Streams' estimate (the ``max_bytes`` bound)."""
        return self._bytes

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        key = self._store_key(record)
        if key is None:
            return
        serde = self._value_serde
        new = None if record.value is None else serde.serialize(record.value)
        old = None if record.old_value is None else serde.serialize(record.old_value)
        previous = self._buffer.get(key)
        if previous is None:
            buffered = _Buffered(record.timestamp, record.timestamp, record.headers, new, old, old)
            heapq.heappush(self._by_time, (buffered.time, key))
        else:
            # Non-resetting: the key keeps its place (buffer time) and its prior value.
            buffered = _Buffered(
                previous.time, record.timestamp, record.headers, new, old, previous.prior
            )
            self._bytes -= previous.size(key)
        self._buffer[key] = buffered
        self._bytes += buffered.size(key)
        self._store.put(key, buffered.encode(), record.timestamp)
        self._enforce()

    def advance(self, timestamp: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        self._enforce()
        super().advance(timestamp)

    def control_progress(self) -> int:
        seen = self.parents_progress()
        held = seen - self._wait
        return held if seen >= 0 and held >= 0 else NO_PROGRESS

    def _over_capacity(self) -> bool:
        return (self._max_records is not None and len(self._buffer) > self._max_records) or (
            self._max_bytes is not None and self._bytes > self._max_bytes
        )

    def _enforce(self) -> None:
        """Kafka Streams' ``enforceConstraints``: emit what waited long enough, then deal with a
        buffer over its bounds."""
        heap, expiry = self._by_time, self.observed_stream_time - self._wait
        emitted = False
        while heap and heap[0][0] <= expiry:
            self._emit_head()
            emitted = True
        if self._over_capacity():
            if self._shut_down:
                raise StreamsError(
                    f"{self._node_name} buffer exceeded its max capacity. Currently "
                    f"[{len(self._buffer)}/{_bound(self._max_records)}] records and "
                    f"[{self._bytes}/{_bound(self._max_bytes)}] bytes."
                )
            while heap and self._over_capacity():
                self._emit_head()
                emitted = True
        if emitted:
            assert self._context is not None
            self._context.suppress_buffer_size(self._store_name, len(self._buffer))

    def _emit_head(self) -> None:
        assert self._store is not None
        _, key = heapq.heappop(self._by_time)
        buffered = self._buffer.pop(key)
        self._bytes -= buffered.size(key)
        self._store.put(key, None, max(buffered.timestamp, self.observed_stream_time))
        serde = self._value_serde
        self.forward(
            Record(
                self._key_serde.deserialize(key),
                None if buffered.new is None else serde.deserialize(buffered.new),
                buffered.timestamp,
                buffered.headers,
                None if buffered.old is None else serde.deserialize(buffered.old),
            )
        )

    def flush(self) -> None:
        assert self._context is not None
        self._context.suppress_buffer_size(self._store_name, len(self._buffer))


def _bound(limit: int | None) -> str:
    return "unbounded" if limit is None else str(limit)

"""Serializers and deserializers ("serdes") for keys and values.

A serde turns a Python value into the bytes stored in Kafka and back. ``None`` always maps to
``None`` (a null key, or a tombstone value), as in Kafka's own serdes.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from streams_runtime.windowed import Windowed

__all__ = [
    "Bytes",
    "Change",
    "ChangedSerde",
    "Float",
    "Integer",
    "Json",
    "Serde",
    "SerializationError",
    "SessionWindowedSerde",
    "String",
    "TimeWindowedSerde",
    "TimestampedValueSerde",
    "ValueAndTimestamp",
]

T = TypeVar("T")


class SerializationError(ValueError):
    """Bytes that a serde cannot turn into a value, or a value it cannot turn into bytes."""


class Serde(Protocol[T]):
    """Converts between values of type ``T`` and Kafka bytes."""

    def serialize(self, value: T | None) -> bytes | None:
        """Bytes for ``value``; ``None`` for ``None``."""
        ...

    def deserialize(self, data: bytes | None) -> T | None:
        """The value in ``data``; ``None`` for ``None``. Raises :class:`SerializationError`."""
        ...


class Bytes:
    """Bytes as they are."""

    def serialize(self, value: bytes | None) -> bytes | None:
        return value

    def deserialize(self, data: bytes | None) -> bytes | None:
        return data


class String:
    """UTF-8 text."""

    def serialize(self, value: str | None) -> bytes | None:
        return None if value is None else value.encode("utf-8")

    def deserialize(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"not UTF-8: {exc}") from exc


_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")
_NAN = _DOUBLE.pack(math.nan)


class Integer:
    """A signed 64-bit big-endian integer: the wire format of Kafka's ``LongSerde``."""

    def serialize(self, value: int | None) -> bytes | None:
        return None if value is None else _LONG.pack(value)

    def deserialize(self, data: bytes | None) -> int | None:
        if data is None:
            return None
        if len(data) != _LONG.size:
            raise SerializationError(f"a long is 8 bytes, got {len(data)}")
        value: int = _LONG.unpack(data)[0]
        return value


class Float:
    """A big-endian IEEE 754 double: the wire format of Kafka's ``DoubleSerde``. Every NaN is
    written as one, ``7ff8000000000000``, as ``DoubleSerializer`` (``doubleToLongBits``) writes
    it: equal aggregates give equal bytes whichever NaN an addition made."""

    def serialize(self, value: float | None) -> bytes | None:
        if value is None:
            return None
        return _NAN if isinstance(value, float) and math.isnan(value) else _DOUBLE.pack(value)

    def deserialize(self, data: bytes | None) -> float | None:
        if data is None:
            return None
        if len(data) != _DOUBLE.size:
            raise SerializationError(f"a double is 8 bytes, got {len(data)}")
        value: float = _DOUBLE.unpack(data)[0]
        return value


_fast_loads: Callable[[bytes], Any] | None
try:  # the runtime extra's faster decoder; the stdlib's without it
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson comes with the runtime extra
    _fast_loads = None

# orjson turns an integer outside 64 bits into a float where json keeps an int; such a literal
# has at least 19 digits, and any text with 19 digits in a row is left to json.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


# json.dumps(value, separators=(",", ":"), sort_keys=True), without building an encoder per call
# (a fifth of the cost of a small value); encode() keeps no state between calls.
_COMPACT_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


class Json:
    """JSON text in UTF-8 (compact separators, so equal values give equal bytes).

    Decoding gives what ``json.loads`` gives: orjson decodes where its result is the same (it
    rejects what it reads differently, such as NaN, lone surrogates or UTF-16, and json then
    decides), json everywhere else."""

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return _COMPACT_SORTED.encode(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"not JSON-serializable: {exc}") from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if _fast_loads is not None and (len(data) < 19 or _LONG_DIGITS.search(data) is None):
            try:
                return _fast_loads(data)
            except ValueError:
                pass  # orjson.JSONDecodeError: json decides (it may accept, or say why not)
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SerializationError(f"not JSON: {exc}") from exc


_WINDOW = struct.Struct(">qq")


class SessionWindowedSerde(Generic[T]):
    """A session-windowed key: the inner key's bytes, then the window's end and start as 8-byte
    big-endian longs (the layout of Kafka Streams' ``SessionWindowedSerde``)."""

    def __init__(self, inner: Serde[T]) -> None:
        self.inner = inner

    def serialize(self, value: Windowed[T] | None) -> bytes | None:
        if value is None:
            return None
        key = self.inner.serialize(value.key) or b""
        return key + _WINDOW.pack(value.end, value.start)

    def deserialize(self, data: bytes | None) -> Windowed[T] | None:
        if data is None:
            return None
        if len(data) < _WINDOW.size:
            raise SerializationError(
                f"a session-windowed key has at least 16 bytes, got {len(data)}"
            )
        end, start = _WINDOW.unpack_from(data, len(data) - _WINDOW.size)
        key = self.inner.deserialize(data[: -_WINDOW.size])
        return Windowed(key, start, end)


_TIMESTAMP = struct.Struct(">q")


class TimeWindowedSerde(Generic[T]):
    """A time-windowed key: the inner key's bytes, then the window's start as an 8-byte
    big-endian long (Kafka Streams' ``TimeWindowedSerializer``). The end is not written: it is
    restored as ``start + window_size_ms`` (``TimeWindowedDeserializer``), so deserializing
    needs the window size (sliding windows: their time difference)."""

    def __init__(self, inner: Serde[T], window_size_ms: int) -> None:
        self.inner = inner
        self.window_size_ms = window_size_ms

    def serialize(self, value: Windowed[T] | None) -> bytes | None:
        if value is None:
            return None
        return (self.inner.serialize(value.key) or b"") + _TIMESTAMP.pack(value.start)

    def deserialize(self, data: bytes | None) -> Windowed[T] | None:
        if data is None:
            return None
        if len(data) < _TIMESTAMP.size:
            raise SerializationError(
                f"a time-windowed key has at least {_TIMESTAMP.size} bytes, got {len(data)}"
            )
        (start,) = _TIMESTAMP.unpack_from(data, len(data) - _TIMESTAMP.size)
        end = min(start + self.window_size_ms, 2**63 - 1)  # Kafka Streams truncates to Long.MAX
        return Windowed(self.inner.deserialize(data[: -_TIMESTAMP.size]), start, end)


class ValueAndTimestamp(NamedTuple):
    """A table store's value: the serialized value and the timestamp of the update that wrote it
    (Kafka Streams' ``ValueAndTimestamp``).

    Stored, and logged to the changelog, as the timestamp in 8 bytes (big-endian, signed) followed
    by the value's bytes. Emit-on-change compares the stored timestamp and bytes with an update's.
    """

    value: bytes
    timestamp: int

    def to_bytes(self) -> bytes:
        """The store format: 8-byte big-endian timestamp, then the value bytes."""
        return _TIMESTAMP.pack(self.timestamp) + self.value

    @classmethod
    def from_bytes(cls, data: bytes) -> ValueAndTimestamp:
        """Parse the store format; :class:`SerializationError` when ``data`` is too short."""
        if len(data) < _TIMESTAMP.size:
            raise SerializationError(
                f"a timestamped value has at least {_TIMESTAMP.size} bytes, got {len(data)}"
            )
        (timestamp,) = _TIMESTAMP.unpack_from(data)
        return cls(data[_TIMESTAMP.size :], timestamp)


class TimestampedValueSerde(Generic[T]):
    """The values of a timestamped store (``ValueAndTimestamp`` of ``inner``) read as the value
    alone: what an interactive query of a window or user key-value store answers."""

    def __init__(self, inner: Serde[T]) -> None:
        self.inner = inner

    def serialize(self, value: T | None) -> bytes | None:
        raw = self.inner.serialize(value)
        return None if raw is None else ValueAndTimestamp(raw, -1).to_bytes()

    def deserialize(self, data: bytes | None) -> T | None:
        if data is None:
            return None
        return self.inner.deserialize(ValueAndTimestamp.from_bytes(data).value)


class Change(NamedTuple, Generic[T]):
    """A table update on its way to a grouped table's aggregation: the row's new value and its
    old one, ``None`` for none (Kafka Streams' ``Change``)."""

    new_value: T | None
    old_value: T | None


def _write_varint(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeVarint``: zig-zag, then 7 bits a byte, low bits first."""
    encoded = (value << 1) ^ (value >> 31)
    out = bytearray()
    while encoded & ~0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def _read_varint(data: bytes) -> tuple[int, int]:
    """Kafka's ``ByteUtils.readVarint``: the value and the number of bytes it took."""
    encoded = shift = 0
    for index, byte in enumerate(data[:5]):
        encoded |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (encoded >> 1) ^ -(encoded & 1), index + 1
        shift += 7
    raise SerializationError("a varint of more than 5 bytes")


class ChangedSerde(Generic[T]):
    """A :class:`Change` on a grouped table's repartition topic, in Kafka Streams 4.x's format
    (``ChangedSerializer``, KIP-904): the inner serde's bytes of the old value then a flag 0,
    of the new value then 1, or, with both, the new value's length (varint), the new value, the
    old value and 2. A change without either value cannot be written, as in Kafka Streams."""

    def __init__(self, inner: Serde[T]) -> None:
        self.inner = inner

    def serialize(self, value: Change[T] | None) -> bytes | None:
        if value is None:
            return None
        new = None if value.new_value is None else self.inner.serialize(value.new_value)
        old = None if value.old_value is None else self.inner.serialize(value.old_value)
        if new is not None and old is not None:
            return _write_varint(len(new)) + new + old + b"\x02"
        if new is not None:
            return new + b"\x01"
        if old is not None:
            return old + b"\x00"
        raise SerializationError("a change without a new or an old value")

    def deserialize(self, data: bytes | None) -> Change[T] | None:
        if data is None:
            return None
        if not data:
            raise SerializationError("a change has at least its flag byte")
        flag, body = data[-1], data[:-1]
        # Flags 3-5 (Kafka Streams' versioned tables) carry an is-latest byte before the flag.
        if flag in (3, 4, 5):
            flag, body = flag - 3, body[:-1]
        if flag == 0:
            return Change(None, self.inner.deserialize(body))
        if flag == 1:
            return Change(self.inner.deserialize(body), None)
        if flag == 2:
            length, start = _read_varint(body)
            new, old = body[start : start + length], body[start + length :]
            return Change(self.inner.deserialize(new), self.inner.deserialize(old))
        raise SerializationError(f"unknown change encoding flag {flag}")

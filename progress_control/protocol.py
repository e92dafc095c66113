"""Control-record protocol, versions 1 and 2.

A control record is an ordinary Kafka record that carries progress, not data. It is recognised by
exactly one ``progress-control`` header; nothing is guessed from key or value. The header value is a
small binary structure, big-endian::

    version   u8       protocol version (1: unsigned, 2: signed)
    sequence  u64      per-source sequence number, starting at 0
    id_len    u8       length of the source id in bytes (1..255)
    source_id bytes    UTF-8 source id
    -- version 2 appends the signature (see :mod:`progress_control.trust`):
    kid_len   u8       length of the key id in bytes (1..255)
    key_id    bytes    UTF-8 id of the signing key
    mac       32 bytes HMAC-SHA256 over topic, partition, timestamp, sequence and source id

Versions after 1 keep the v1 prefix and may append fields; a reader accepts trailing bytes only
when the version says they belong to a newer protocol. So a v1 reader reads a signed record as an
ordinary (unverified) control record, and a v2 reader reads v1 records as unsigned ones.

Key: a sentinel (default ``__progress_control__``) or null by option; value: null (a tombstone, so
compaction removes it); partition: always explicit; timestamp: see
:func:`extrapolated_timestamp_ms`.
"""

from __future__ import annotations

import enum
import logging
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "CONTROL_HEADER",
    "DEFAULT_SENTINEL_KEY",
    "MAC_SIZE",
    "PROTOCOL_VERSION",
    "SIGNED_PROTOCOL_VERSION",
    "ControlMarker",
    "ControlRecord",
    "MalformedControlHeaderError",
    "TimestampMode",
    "extrapolated_timestamp_ms",
    "has_control_header",
    "is_control_record",
    "malformed_control_headers_seen",
    "parse_control_headers",
]

CONTROL_HEADER = "progress-control"
PROTOCOL_VERSION = 1
SIGNED_PROTOCOL_VERSION = 2
MAC_SIZE = 32  # HMAC-SHA256
DEFAULT_SENTINEL_KEY = b"__progress_control__"

_PREFIX = struct.Struct(">BQB")
_MAX_SEQUENCE = 2**64 - 1

logger = logging.getLogger(__name__)

HeaderList = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]


class HasHeaders(Protocol):
    """Anything with Kafka-style headers, e.g. ``confluent_kafka.Message``."""

    def headers(self) -> HeaderList | None: ...


class MalformedControlHeaderError(ValueError):
    """A ``progress-control`` header is present but cannot be parsed as a control marker."""


class TimestampMode(enum.StrEnum):
    """How a control record's timestamp is chosen."""

    EXTRAPOLATED = "extrapolated"
    """Last acknowledged data timestamp advanced by the monotonic time since its ack, capped at
    wall-clock now: ticks never jump stream time past a producer whose event time lags."""
    WALL_CLOCK = "wall-clock"
    """Wall-clock now."""


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The decoded value of a ``progress-control`` header."""

    source_id: str
    sequence: int
    version: int = PROTOCOL_VERSION
    key_id: str | None = None
    """Version 2: the id of the key that signed the record."""
    mac: bytes | None = None
    """Version 2: the signature (:func:`progress_control.trust.sign`)."""

    def __post_init__(self) -> None:
        encoded = self.source_id.encode("utf-8")
        if not 1 <= len(encoded) <= 255:
            raise ValueError(
                f"source_id must be 1..255 bytes of UTF-8, got {len(encoded)}: {self.source_id!r}"
            )
        if not 0 <= self.sequence <= _MAX_SEQUENCE:
            raise ValueError(f"sequence must fit in an unsigned 64-bit integer: {self.sequence}")
        if not 1 <= self.version <= 255:
            raise ValueError(f"version must be 1..255: {self.version}")
        signed = self.version >= SIGNED_PROTOCOL_VERSION
        if signed != (self.key_id is not None and self.mac is not None):
            raise ValueError("version 2 and later markers carry a key id and a mac, v1 neither")
        if self.key_id is not None and not 1 <= len(self.key_id.encode("utf-8")) <= 255:
            raise ValueError(f"key_id must be 1..255 bytes of UTF-8: {self.key_id!r}")
        if self.mac is not None and len(self.mac) != MAC_SIZE:
            raise ValueError(f"mac must be {MAC_SIZE} bytes, got {len(self.mac)}")

    def encode(self) -> bytes:
        """Serialise to the header value."""
        source = self.source_id.encode("utf-8")
        encoded = _PREFIX.pack(self.version, self.sequence, len(source)) + source
        if self.key_id is not None and self.mac is not None:
            key_id = self.key_id.encode("utf-8")
            encoded += bytes((len(key_id),)) + key_id + self.mac
        return encoded

    @classmethod
    def decode(cls, value: bytes | str | None) -> ControlMarker:
        """Parse a header value; raise :class:`MalformedControlHeaderError` on anything else."""
        if value is None:
            raise MalformedControlHeaderError("progress-control header has no value")
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(raw) < _PREFIX.size + 1:
            raise MalformedControlHeaderError(
                f"progress-control header too short ({len(raw)} bytes): {raw[:32]!r}"
            )
        version, sequence, id_len = _PREFIX.unpack_from(raw)
        if version < 1:
            raise MalformedControlHeaderError(f"unsupported progress-control version {version}")
        end = _PREFIX.size + id_len
        if id_len == 0 or len(raw) < end or (version == 1 and len(raw) != end):
            raise MalformedControlHeaderError(
                f"progress-control header length does not match its source id length {id_len}"
            )
        try:
            source_id = raw[_PREFIX.size : end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedControlHeaderError("progress-control source id is not UTF-8") from exc
        if version < SIGNED_PROTOCOL_VERSION:
            return cls(source_id=source_id, sequence=sequence, version=version)
        key_id, mac = _decode_signature(raw, end, version)
        return cls(source_id, sequence, version, key_id=key_id, mac=mac)


def _decode_signature(raw: bytes, start: int, version: int) -> tuple[str, bytes]:
    """The key id and mac a version 2 (or later) header appends after the source id."""
    kid_len = raw[start] if len(raw) > start else 0
    kid_end = start + 1 + kid_len
    end = kid_end + MAC_SIZE
    if kid_len == 0 or len(raw) < end or (version == SIGNED_PROTOCOL_VERSION and len(raw) != end):
        raise MalformedControlHeaderError(
            "progress-control v2 header: key id and signature do not match its length"
        )
    try:
        key_id = raw[start + 1 : kid_end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedControlHeaderError("progress-control key id is not UTF-8") from exc
    return key_id, raw[kid_end:end]


def has_control_header(headers: HeaderList | None) -> bool:
    """Whether ``headers`` carry a ``progress-control`` header at all, valid or not. A record that
    does is never data: consumers validate it as a control record, and skip it when it fails."""
    if not headers:
        return False
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return any(name == CONTROL_HEADER for name, _value in pairs)


def parse_control_headers(headers: HeaderList | None) -> ControlMarker | None:
    """Return the control marker in ``headers``, ``None`` when there is none.

    Raises :class:`MalformedControlHeaderError` when the header is present but invalid, or present
    more than once.
    """
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    values = [value for name, value in pairs if name == CONTROL_HEADER]
    if not values:
        return None
    if len(values) > 1:
        raise MalformedControlHeaderError(
            f"a record must carry exactly one progress-control header, found {len(values)}"
        )
    return ControlMarker.decode(values[0])


class _MalformedCounter:
    """Process-wide count of rejected control headers, so consumers can expose it as a metric."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def increment(self) -> None:
        with self._lock:
            self._count += 1

    @property
    def value(self) -> int:
        with self._lock:
            return self._count


_malformed = _MalformedCounter()


def malformed_control_headers_seen() -> int:
    """How many records :func:`is_control_record` rejected for a malformed header so far."""
    return _malformed.value


def is_control_record(msg: HasHeaders) -> bool:
    """True when ``msg`` is a valid control record and must not reach user code.

    A record with a malformed ``progress-control`` header is *not* a control record: it is logged,
    counted (:func:`malformed_control_headers_seen`) and left to the caller's bad-record policy.
    """
    try:
        return parse_control_headers(msg.headers()) is not None
    except MalformedControlHeaderError as exc:
        _malformed.increment()
        fields: dict[str, object] = {"reason": str(exc)}
        for name in ("topic", "partition", "offset"):  # where known (a Kafka Message)
            get = getattr(msg, name, None)
            if callable(get):
                fields[name] = get()
        logger.warning("rejected malformed progress-control header: %(reason)s", fields)
        return False


def extrapolated_timestamp_ms(
    last_data_timestamp_ms: int,
    last_ack_monotonic_s: float,
    now_monotonic_s: float,
    wall_clock_now_ms: int,
) -> int:
    """Event-time clock of a producer, extrapolated from its last acknowledged data record.

    ``last timestamp + (monotonic now - monotonic ack time)``, never above wall-clock now (and never
    below the last data timestamp, should the monotonic clocks be passed in the wrong order).
    """
    elapsed_ms = max(0, int((now_monotonic_s - last_ack_monotonic_s) * 1000))
    return max(last_data_timestamp_ms, min(last_data_timestamp_ms + elapsed_ms, wall_clock_now_ms))


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A control record ready to produce to one explicit partition."""

    topic: str
    partition: int
    timestamp_ms: int
    marker: ControlMarker
    key: bytes | None = DEFAULT_SENTINEL_KEY
    extra_headers: tuple[tuple[str, str | bytes | None], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"control records need an explicit partition, got {self.partition}")
        if self.timestamp_ms < 0:
            raise ValueError(f"control record timestamp must be >= 0, got {self.timestamp_ms}")

    @property
    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return [(CONTROL_HEADER, self.marker.encode()), *self.extra_headers]

    @property
    def byte_headers(self) -> list[tuple[str, bytes | None]]:
        """:attr:`headers` with every value as bytes, as a consumer reads them back."""
        return [
            (name, value.encode() if isinstance(value, str) else value)
            for name, value in self.headers
        ]

    def produce_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``confluent_kafka.Producer.produce``."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "key": self.key,
            "value": None,
            "timestamp": self.timestamp_ms,
            "headers": self.headers,
        }

"""Activity reports: how an interceptor in report mode ships its acks to a sidecar on localhost.

Wire format (v1): one UDP datagram per report, a UTF-8 JSON object::

    {"v": 1,
     "source": "host:1234:ab12cd34",        # the interceptor's source id
     "sent_ms": 1795355816861,              # wall-clock send time
     "partitions": [                        # partitions acked since the previous report
        {"topic": "clicks", "partition": 3,
         "last_timestamp_ms": 1795355816000,  # timestamp of the partition's last acked record
         "last_ack_ms": 1795355816042}]}      # wall-clock time of that ack

A report that would exceed :data:`MAX_DATAGRAM_BYTES` is split into several. UDP never blocks the
host and needs no connection; a lost report only delays the sidecar's view until the next one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "MAX_DATAGRAM_BYTES",
    "REPORT_VERSION",
    "ActivityReport",
    "MalformedReportError",
    "PartitionReport",
    "decode_report",
    "encode_reports",
    "parse_address",
]

REPORT_VERSION = 1
MAX_DATAGRAM_BYTES = 60_000

T = TypeVar("T")


class MalformedReportError(ValueError):
    """A datagram that is not a valid v1 activity report."""


@dataclass(frozen=True, slots=True)
class PartitionReport:
    topic: str
    partition: int
    last_timestamp_ms: int
    last_ack_ms: int


@dataclass(frozen=True, slots=True)
class ActivityReport:
    source: str
    sent_ms: int
    partitions: tuple[PartitionReport, ...]


def encode_reports(report: ActivityReport) -> list[bytes]:
    """Encode ``report`` as one or more datagrams of at most :data:`MAX_DATAGRAM_BYTES`."""
    head = json.dumps({"v": REPORT_VERSION, "source": report.source, "sent_ms": report.sent_ms})
    prefix = head[:-1] + ',"partitions":['
    datagrams: list[bytes] = []
    items: list[str] = []
    size = len(prefix) + 2
    for p in report.partitions:
        item = json.dumps(
            {
                "topic": p.topic,
                "partition": p.partition,
                "last_timestamp_ms": p.last_timestamp_ms,
                "last_ack_ms": p.last_ack_ms,
            },
            separators=(",", ":"),
        )
        if items and size + len(item) + 1 > MAX_DATAGRAM_BYTES:
            datagrams.append((prefix + ",".join(items) + "]}").encode())
            items, size = [], len(prefix) + 2
        items.append(item)
        size += len(item) + 1
    datagrams.append((prefix + ",".join(items) + "]}").encode())
    return datagrams


def decode_report(datagram: bytes) -> ActivityReport:
    """Parse one datagram; raise :class:`MalformedReportError` on anything else."""
    try:
        raw = json.loads(datagram)
        if type(raw["v"]) is not int or raw["v"] != REPORT_VERSION:
            raise MalformedReportError(f"unsupported report version {raw['v']!r}")
        partitions = tuple(
            PartitionReport(
                _typed(p["topic"], str),
                _typed(p["partition"], int),
                _typed(p["last_timestamp_ms"], int),
                _typed(p["last_ack_ms"], int),
            )
            for p in raw["partitions"]
        )
        return ActivityReport(_typed(raw["source"], str), _typed(raw["sent_ms"], int), partitions)
    except MalformedReportError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise MalformedReportError(f"malformed activity report: {exc!r}") from None


def _typed(value: object, kind: type[T]) -> T:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


def parse_address(address: str, *, any_port: bool = False) -> tuple[str, int]:
    """``host:port`` or ``[v6-host]:port`` to ``(host, port)``; ``ValueError`` otherwise. Port 0
    (any free port) only with ``any_port``, for listeners."""
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    lowest = 0 if any_port else 1
    if not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ValueError(f"expected host:port, got {address!r}")
    return host, int(port)

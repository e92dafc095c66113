"""Report mode: ship recorded acks to a sidecar on localhost instead of sending ticks.

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
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from interceptor.activity import PartitionActivity
from interceptor.metrics import ProgressControlMetrics

__all__ = [
    "MAX_DATAGRAM_BYTES",
    "REPORT_VERSION",
    "ActivityReport",
    "MalformedReportError",
    "PartitionReport",
    "ReportSender",
    "decode_report",
    "encode_reports",
    "parse_address",
]

REPORT_VERSION = 1
MAX_DATAGRAM_BYTES = 60_000

logger = logging.getLogger(__name__)

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


class ReportSender:
    """Sends the partitions acked since the last report to the sidecar."""

    def __init__(
        self,
        activity: PartitionActivity,
        address: str,
        source_id: str,
        metrics: ProgressControlMetrics,
        *,
        include_topic: Callable[[str], bool] = lambda _topic: True,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        host, port = parse_address(address)
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        self._address: Any = sockaddr
        self._sidecar = address
        self._activity = activity
        self._source = source_id
        self._metrics = metrics
        self._include_topic = include_topic
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._reported: dict[tuple[str, int], object] = {}
        self._socket = socket.socket(family, socket.SOCK_DGRAM)
        self._socket.setblocking(False)

    def send(self) -> None:
        """Send one report (called periodically from the scheduler thread)."""
        latest = dict(self._activity.latest)  # one C-level copy: safe against the ack path
        now, wall_ms = self._monotonic(), int(self._wall_clock() * 1000)
        changed = []
        reported_before = dict(self._reported)
        for (topic, partition), entry in latest.items():
            if self._reported.get((topic, partition)) is entry or not self._include_topic(topic):
                continue  # identity: each ack stores a new entry, even at the same clock reading
            self._reported[(topic, partition)] = entry
            source, ack = entry
            changed.append(
                PartitionReport(
                    topic,
                    partition,
                    self._activity.data_timestamp(source, ack),
                    wall_ms - int((now - ack) * 1000),
                )
            )
        if not changed:
            return
        for datagram in encode_reports(ActivityReport(self._source, wall_ms, tuple(changed))):
            try:
                self._socket.sendto(datagram, self._address)
            except OSError as exc:  # no sidecar listening, buffer full: resend next time
                logger.debug(
                    "activity report to %(sidecar)s not sent: %(error)s",
                    {"sidecar": self._sidecar, "error": str(exc)},
                )
                self._reported = reported_before
            else:
                self._metrics.report_sent()

    def close(self) -> None:
        self._socket.close()

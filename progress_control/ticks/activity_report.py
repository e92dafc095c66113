"""Activity reports: how an interceptor in report mode ships its acks to a sidecar on localhost.

Wire format (v1): one UDP datagram per report, a UTF-8 JSON object::

    {"v": 1,
     "source": "host:1234:ab12cd34",        # the interceptor's source id
     "sent_ms": 1795355816861,              # wall-clock send time
     "partitions": [                        # partitions acked since the previous report
        {"topic": "clicks", "partition": 3,
         "last_timestamp_ms": 1795355816000,  # timestamp of the partition's last acked record
         "last_ack_ms": 1795355816042}]}      # wall-clock time of that ack

A report that would exceed :data:`MAX_DATAGRAM_BYTES` is split into several. Datagrams never block
the host and need no connection; a lost report only delays the sidecar's view until the next one.

Transport (:func:`parse_report_address`): a Unix datagram socket on a volume shared by the app and
sidecar containers (``unix:///var/run/progress-control/reports.sock``), which only processes allowed
to write the socket file can use, as DogStatsD does; or, for compatibility, UDP ``host:port``, which
any process in the pod can send to.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "MAX_DATAGRAM_BYTES",
    "REPORT_VERSION",
    "ActivityReport",
    "MalformedReportError",
    "PartitionReport",
    "ReportAddress",
    "UdpAddress",
    "UnixAddress",
    "decode_report",
    "encode_reports",
    "parse_address",
    "parse_report_address",
]

REPORT_VERSION = 1
MAX_DATAGRAM_BYTES = 60_000
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its terminating NUL (Linux)

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


@dataclass(frozen=True, slots=True)
class UnixAddress:
    """A Unix datagram socket's path."""

    path: str

    def __str__(self) -> str:
        return f"unix://{self.path}"


@dataclass(frozen=True, slots=True)
class UdpAddress:
    """A UDP ``host:port``."""

    host: str
    port: int

    @property
    def is_loopback(self) -> bool:
        """Whether only this host can reach it (``localhost`` or a loopback IP)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # another host name: it may resolve to anything
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


ReportAddress = UnixAddress | UdpAddress


def parse_report_address(address: str, *, any_port: bool = False) -> ReportAddress:
    """Where reports go: ``unix:///absolute/path`` or ``unix:path`` (a Unix datagram socket),
    else UDP ``host:port`` as :func:`parse_address`; ``ValueError`` otherwise."""
    if not address.startswith("unix:"):
        host, port = parse_address(address, any_port=any_port)
        return UdpAddress(host, port)
    rest = address.removeprefix("unix:")
    path = rest.removeprefix("//")
    if rest.startswith("//") and not path.startswith("/"):
        raise ValueError(f"expected unix:///absolute/path (three slashes), got {address!r}")
    if not path or "\0" in path:
        raise ValueError(f"expected unix:///path/to/socket, got {address!r}")
    if len(path.encode()) > _UNIX_PATH_MAX:
        raise ValueError(f"socket path longer than {_UNIX_PATH_MAX} bytes: {address!r}")
    return UnixAddress(path)

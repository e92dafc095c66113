"""Report mode: ship recorded acks to a sidecar in the pod instead of sending ticks.

The wire format and addresses are in :mod:`progress_control.ticks.activity_report`: a Unix datagram
socket (``unix:///path``) or UDP. Sends never block the host and need no connection; a lost report,
or one the sidecar was not there for (no socket file yet), is sent again with the next one.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from progress_control.ticks.activity import PartitionActivity
from progress_control.ticks.activity_report import (
    ActivityReport,
    PartitionReport,
    UnixAddress,
    encode_reports,
    parse_report_address,
)
from progress_control.ticks.metrics import ProgressControlMetrics

__all__ = ["ReportSender"]

logger = logging.getLogger(__name__)


class ReportSender:
    """Sends the partitions acked since the last report to the sidecar."""

    _address: Any
    """``sendto``'s address: a socket path, or what getaddrinfo gave."""

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
        parsed = parse_report_address(address)
        if isinstance(parsed, UnixAddress):
            family, self._address = socket.AF_UNIX, parsed.path
        else:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                parsed.host, parsed.port, type=socket.SOCK_DGRAM
            )[0]
            self._address = sockaddr
        self._sidecar = address
        self._activity = activity
        self._source = source_id
        self._metrics = metrics
        self._include_topic = include_topic
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._reported: dict[tuple[str, int], object] = {}
        self._socket = socket.socket(family, socket.SOCK_DGRAM)
        self._socket.setblocking(False)  # a full receive queue: EAGAIN, never a wait

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
            except OSError as exc:  # no sidecar (no socket file), buffer full: resend next time
                logger.debug(
                    "activity report to %(sidecar)s not sent: %(error)s",
                    {"sidecar": self._sidecar, "error": str(exc)},
                )
                self._reported = reported_before
            else:
                self._metrics.report_sent()

    def close(self) -> None:
        self._socket.close()

"""Receives activity reports from in-pod interceptors in report mode (UDP, localhost)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from progress_control.ticks.activity_report import (
    MalformedReportError,
    decode_report,
    parse_address,
)

__all__ = ["ReportListener"]

logger = logging.getLogger(__name__)

_MAX_DATAGRAM = 65_536


class ReportListener:
    """A thread that turns report datagrams into
    ``on_ack(source, topic, partition, ts, ack_monotonic)`` calls; the callback decides whether
    to trust them (:mod:`sidecar.admission`)."""

    def __init__(
        self,
        address: str,
        on_ack: Callable[[str, str, int, int, float], None],
        on_malformed: Callable[[], None],
        on_idle: Callable[[], None] = lambda: None,
    ) -> None:
        host, port = parse_address(address, any_port=True)
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        self._socket = socket.socket(family, socket.SOCK_DGRAM)
        self._socket.bind(sockaddr)
        self._socket.settimeout(0.2)
        self._on_ack = on_ack
        self._on_malformed = on_malformed
        self._on_idle = on_idle
        """Called in the listener thread after every datagram and every quiet 0.2 s."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="report-listener", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._on_idle()
            except Exception:
                logger.exception("report listener housekeeping failed")
            try:
                datagram = self._socket.recv(_MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                logger.exception("report listener receive failed")
                continue
            try:
                report = decode_report(datagram)
            except MalformedReportError as exc:
                self._on_malformed()
                logger.warning(
                    "dropped a malformed activity report: %(error)s", {"error": str(exc)}
                )
                continue
            # The report's wall-clock ack times, on our monotonic clock.
            now_mono, now_wall_ms = time.monotonic(), time.time() * 1000
            try:
                for p in report.partitions:
                    ack = now_mono - max(0.0, now_wall_ms - p.last_ack_ms) / 1000
                    self._on_ack(report.source, p.topic, p.partition, p.last_timestamp_ms, ack)
            except Exception:  # the listener must outlive any one report
                logger.exception("could not handle an activity report")

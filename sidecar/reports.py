"""Receives activity reports from in-pod interceptors in report mode: on a Unix datagram socket
(a file on a volume shared with the app container), or UDP for compatibility.

Who may report: on a Unix socket, whoever may write its file (its mode, and which containers
mount its volume); with ``allowed_uids`` also only processes of those users, as the kernel
tells (``SO_PASSCRED``: the sender's credentials come with each datagram and cannot be forged
by an unprivileged sender). UDP on loopback: any process in the pod's network namespace."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from progress_control.ticks.activity_report import (
    MalformedReportError,
    UnixAddress,
    decode_report,
    parse_report_address,
)

__all__ = ["ReportListener"]

logger = logging.getLogger(__name__)

_MAX_DATAGRAM = 65_536
_POLL_S = 0.2
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MALFORMED_LOG_EVERY_S = 10.0  # a flood of garbage is counted, and logged this often at most


class ReportListener:
    """A thread that turns report datagrams into
    ``on_ack(source, topic, partition, ts, ack_monotonic)`` calls; the callback decides whether
    to trust them (:mod:`sidecar.admission`).

    A Unix socket's file is created with ``socket_mode`` (a stale one from a previous run is
    replaced) and removed on :meth:`stop`."""

    def __init__(
        self,
        address: str,
        on_ack: Callable[[str, str, int, int, float], None],
        on_malformed: Callable[[], None],
        on_idle: Callable[[], None] = lambda: None,
        *,
        socket_mode: int = 0o660,
        allowed_uids: tuple[int, ...] = (),
        on_refused_sender: Callable[[int], None] = lambda _uid: None,
    ) -> None:
        parsed = parse_report_address(address, any_port=True)
        self._path: Path | None = None
        if isinstance(parsed, UnixAddress):
            self._path = Path(parsed.path)
            self._socket = _bind_unix(self._path, socket_mode)
            if allowed_uids:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        elif allowed_uids:
            raise ValueError("allowed_uids needs a Unix socket: UDP does not tell the sender")
        else:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                parsed.host, parsed.port, type=socket.SOCK_DGRAM
            )[0]
            self._socket = socket.socket(family, socket.SOCK_DGRAM)
            self._socket.bind(sockaddr)
        self._socket.settimeout(_POLL_S)
        self._on_ack = on_ack
        self._on_malformed = on_malformed
        self._on_idle = on_idle
        """Called in the listener thread after every datagram and every quiet 0.2 s."""
        self._allowed_uids = frozenset(allowed_uids)
        self._on_refused_sender = on_refused_sender
        self._malformed_logged_at = float("-inf")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="report-listener", daemon=True)

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound UDP ``(host, port)``; ``None`` on a Unix socket."""
        if self._path is not None:
            return None
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop receiving; wait up to ``timeout_s`` for the thread, which may be in a callback
        (it is a daemon thread: one stuck in a broker call does not hold up the exit)."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
        if not self._thread.is_alive():  # else it closes the socket itself when it returns
            self._socket.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._receive_one()
        finally:
            self._socket.close()

    def _receive_one(self) -> None:
        try:
            self._on_idle()
        except Exception:
            logger.exception("report listener housekeeping failed")
        try:
            datagram = self._receive()
        except TimeoutError:
            return
        except OSError:
            if not self._stop.is_set():
                logger.exception("report listener receive failed")
            return
        if datagram is None:
            return
        try:
            report = decode_report(datagram)
        except MalformedReportError as exc:
            self._on_malformed()
            now = time.monotonic()
            if now - self._malformed_logged_at >= _MALFORMED_LOG_EVERY_S:
                self._malformed_logged_at = now
                logger.warning(
                    "dropped a malformed activity report: %(error)s (malformed ones are "
                    "counted in progress_control_reports_malformed, logged every %(every).0f s)",
                    {"error": str(exc), "every": _MALFORMED_LOG_EVERY_S},
                )
            return
        # The report's wall-clock ack times, on our monotonic clock.
        now_mono, now_wall_ms = time.monotonic(), time.time() * 1000
        try:
            for p in report.partitions:
                ack = now_mono - max(0.0, now_wall_ms - p.last_ack_ms) / 1000
                self._on_ack(report.source, p.topic, p.partition, p.last_timestamp_ms, ack)
        except Exception:  # the listener must outlive any one report
            logger.exception("could not handle an activity report")

    def _receive(self) -> bytes | None:
        """The next datagram; ``None`` when its sender is not one of the allowed users."""
        if not self._allowed_uids:
            return self._socket.recv(_MAX_DATAGRAM)
        datagram, ancillary, _flags, _address = self._socket.recvmsg(
            _MAX_DATAGRAM, socket.CMSG_SPACE(_CREDENTIALS.size)
        )
        uid = _sender_uid(ancillary)
        if uid is None or uid not in self._allowed_uids:
            self._on_refused_sender(-1 if uid is None else uid)
            return None
        return datagram


def _sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            _pid, uid, _gid = _CREDENTIALS.unpack(data[: _CREDENTIALS.size])
            return int(uid)
    return None


def _bind_unix(path: Path, mode: int) -> socket.socket:
    """A Unix datagram socket bound at ``path`` with ``mode``: a socket file left by a previous
    run is replaced; any other file there is an error, never deleted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise FileExistsError(f"report socket path {path} exists and is not a socket")
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        # Created with no permissions for anyone else, then opened to ``mode``: no window in
        # which a process the mode excludes could connect.
        old_umask = os.umask(0o777)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, mode)
    except BaseException:
        sock.close()
        raise
    return sock

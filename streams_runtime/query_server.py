"""The HTTP(S) query server of one instance.

- ``GET /stores/{store}/keys/{key}?allow_stale=false&max_lag=N``: the value of ``key`` (text,
  converted with the store's key serde), routed to wherever it lives; 200 with the answer, 404
  with ``"found": false`` when the key is absent (or the store unknown, without ``found``), 400
  for a bad key or parameter, 503 when no copy may answer (with the lags seen). ``local=true``
  answers from this instance's copies only (what forwarding instances ask).
- ``GET /metadata/{store}/{key}``: active host, standby hosts and partition.
- ``GET /lags``: ``all_local_store_partition_lags()``.
- ``GET /health/live`` and ``GET /health/ready``: the instance's probes
  (:mod:`streams_runtime.health`), 200 or 503 with a JSON body saying why, to anyone (a probe
  needs no secret).
- ``GET /health``: ``{"status": "ok"}`` to anyone while the server answers (kept for
  compatibility; probes should use the two above); with the token it also names the instance.

With a token (``query_token``) every other request needs ``Authorization: Bearer <token>``
(401 otherwise, compared in constant time). Binding a non-loopback address without one is
refused at start-up (:mod:`streams_runtime.query_security`). Every error is a JSON body
``{"error": ..., "message": ...}``; no request can stop the server.

How slow or idle clients are kept from starving queries: one I/O thread accepts connections
and reads request headers without blocking (a selector), so an idle connection costs a socket
and a buffer, never a thread. Only a complete request header goes to the bounded pool of
``query_workers`` threads, which answer it and hand a kept-alive connection back to the I/O
thread. A connection must deliver a complete request header within
``query_request_timeout_ms`` of connecting (or of its previous answer), within a size limit,
else it is closed; at ``query_max_connections`` the oldest idle connection is closed to make
room for the new one (a new one is refused only while every connection is being answered).
With TLS, handshakes run in the I/O thread too, under the same deadline.

This module owns the connections (the listener, the I/O thread, the worker pool); what a request
means, its routing and its answer, is :mod:`streams_runtime.query_endpoints`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from streams_runtime.health import InstanceHealth
from streams_runtime.queries import InteractiveQueries
from streams_runtime.query_endpoints import QueryEndpoints, RequestHandler, peer
from streams_runtime.query_security import (
    is_loopback_host,
    query_token,
    security_metrics,
    server_ssl_context,
)
from streams_runtime.settings import RuntimeSettings

__all__ = ["QueryServer"]

logger = logging.getLogger(__name__)

MAX_HEADER_BYTES = 32 * 1024
_BACKLOG = 128  # the default 5 resets connections under a burst of queries
_ACCEPTS_PER_WAKEUP = 64  # keep reading ready connections while a flood of connects arrives
_RECV = 16 * 1024
_HEADER_END = b"\r\n\r\n"


@dataclass(eq=False)
class _Connection:
    """A client connection while the I/O thread owns it (waiting for a request header)."""

    sock: socket.socket
    address: object  # as accept() returns it: (host, port, ...) for IP sockets
    deadline: float
    idle_since: float
    handshaking: bool = False
    buffer: bytearray = field(default_factory=bytearray)


def _listener(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    families = [info[0] for info in infos]
    # IPv4 first when the name has both (e.g. "localhost"): clients of an advertised name
    # mostly try IPv4.
    family = socket.AF_INET if socket.AF_INET in families or not families else families[0]
    bind_host = host.removeprefix("[").removesuffix("]")
    sock = socket.create_server((bind_host, port), family=family, backlog=_BACKLOG)
    sock.setblocking(False)
    return sock


class QueryServer:
    """Serves :class:`InteractiveQueries` over HTTP (or HTTPS) with one I/O thread and a
    bounded worker pool (see the module docstring)."""

    def __init__(
        self,
        queries: InteractiveQueries,
        host: str,
        port: int,
        settings: RuntimeSettings,
        health: InstanceHealth | None = None,
    ) -> None:
        self.queries = queries
        self.token = query_token(settings)
        self.workers = settings.query_workers
        self.max_connections = settings.query_max_connections
        self.request_timeout_s = settings.query_request_timeout_ms / 1000
        self._ssl = server_ssl_context(settings)
        self._metrics = security_metrics(queries.metrics)
        self._endpoints = QueryEndpoints(queries, self.token, self._metrics, health)
        self._sock = _listener(host, port)
        bound = str(self._sock.getsockname()[0])
        # The settings were checked by name; this checks the address actually bound (a name
        # such as "localhost" could resolve elsewhere).
        if self.token is None and not is_loopback_host(bound):
            if not settings.query_allow_unauthenticated:
                self._sock.close()
                raise ValueError(
                    f"the query server bound {bound!r}, not a loopback address, without a "
                    "token: set query_token (or query_allow_unauthenticated=true)"
                )
            logger.warning(
                "query server on %(host)s:%(port)d serves anyone who can connect "
                "(query_allow_unauthenticated)",
                {"host": bound, "port": self.port},
            )
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: dict[socket.socket, _Connection] = {}
        self._busy = 0  # connections a worker is answering
        self._returned: deque[_Connection] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="streams-query")
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self._ssl is not None else "http"

    def open_connections(self) -> int:
        """Connections open now (waiting for a request or being answered)."""
        with self._lock:
            return len(self._connections) + self._busy

    def start(self) -> None:
        self._selector.register(self._sock, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="streams-query-io", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            connections = list(self._connections.values()) + list(self._returned)
            self._connections.clear()
            self._returned.clear()
        for conn in connections:
            self._close(conn.sock)
        for sock in (self._sock, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        with contextlib.suppress(OSError, ValueError):
            self._selector.close()

    # -- the I/O thread ---------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full buffer: a wake-up is pending anyway
            self._wake_w.send(b"\0")

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._step()
            except Exception:  # the server must outlive any one connection's trouble
                logger.exception("query server I/O loop (continuing)")

    def _step(self) -> None:
        with self._lock:
            deadlines = [c.deadline for c in self._connections.values()]
        timeout = 0.5
        if deadlines:
            timeout = min(timeout, max(0.0, min(deadlines) - time.monotonic()))
        for key, _mask in self._selector.select(timeout):
            if self._stopping.is_set():
                return
            if key.fileobj is self._sock:
                self._accept()
            elif key.fileobj is self._wake_r:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
                self._take_returned()
            else:
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with self._lock:
                    conn = self._connections.get(sock)
                if conn is not None:
                    self._readable(conn)
        self._expire(time.monotonic())

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: the already open ones keep being served
                logger.warning("query server: accept failed: %(error)s", {"error": str(exc)})
                return
            if not self._make_room():
                self._metrics.connections_closed("refused").inc()
                self._close(sock)
                continue
            sock.setblocking(False)
            handshaking = False
            if self._ssl is not None:
                try:
                    sock = self._ssl.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ValueError):
                    self._metrics.connections_closed("tls").inc()
                    self._close(sock)
                    continue
                handshaking = True
            now = time.monotonic()
            conn = _Connection(sock, address, now + self.request_timeout_s, now, handshaking)
            self._own(conn)

    def _make_room(self) -> bool:
        """Below the cap, or made so by closing the longest-idle connection waiting for a
        request (an attacker's idle connections go first, never a query being answered)."""
        with self._lock:
            if len(self._connections) + self._busy < self.max_connections:
                return True
            if not self._connections:
                return False
            oldest = min(self._connections.values(), key=lambda c: c.idle_since)
        self._metrics.connections_closed("evicted").inc()
        self._drop(oldest)
        return True

    def _own(self, conn: _Connection) -> None:
        with self._lock:
            self._connections[conn.sock] = conn
        self._metrics.open_connections.inc()
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, None)
        except (OSError, ValueError, KeyError):
            self._drop(conn)
            return
        # Pipelined bytes that came with the previous request, or (on a new plain connection) a
        # request sent right after connecting: read now rather than after another select.
        if conn.buffer or not conn.handshaking:
            self._readable(conn)

    def _drop(self, conn: _Connection) -> None:
        with self._lock:
            owned = self._connections.pop(conn.sock, None) is not None
        if owned:
            self._metrics.open_connections.dec()
            with contextlib.suppress(OSError, ValueError, KeyError):
                self._selector.unregister(conn.sock)
        self._close(conn.sock)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.close()

    def _readable(self, conn: _Connection) -> None:
        sock = conn.sock
        if conn.handshaking:
            assert isinstance(sock, ssl.SSLSocket)
            try:
                sock.do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except (OSError, ValueError) as exc:
                logger.debug(
                    "query server: TLS handshake with %(client)s failed: %(error)s",
                    {"client": peer(conn.address), "error": str(exc)},
                )
                self._metrics.connections_closed("tls").inc()
                self._drop(conn)
                return
            conn.handshaking = False
        closed = False
        while True:  # drain: TLS may hold decrypted bytes the selector does not see
            try:
                data = sock.recv(_RECV)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
            conn.buffer += data
            if len(conn.buffer) > MAX_HEADER_BYTES:
                break
        end = conn.buffer.find(_HEADER_END)
        if end >= 0:
            self._dispatch_request(conn, end + len(_HEADER_END))
        elif len(conn.buffer) > MAX_HEADER_BYTES:
            self._metrics.connections_closed("too-large").inc()
            self._reply_and_drop(conn, 431, "Request Header Fields Too Large")
        elif closed:
            self._drop(conn)

    def _reply_and_drop(self, conn: _Connection, status: int, reason: str) -> None:
        body = json.dumps({"error": reason.replace(" ", ""), "message": reason}).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        if not conn.handshaking:
            with contextlib.suppress(OSError, ValueError):
                conn.sock.send(head.encode() + body)  # best effort, never blocks
        self._drop(conn)

    def _expire(self, now: float) -> None:
        with self._lock:
            late = [c for c in self._connections.values() if c.deadline <= now]
        for conn in late:
            self._metrics.connections_closed("timeout").inc()
            if conn.buffer:
                self._reply_and_drop(conn, 408, "Request Timeout")
            else:
                self._drop(conn)  # an idle keep-alive connection: just close it

    def _dispatch_request(self, conn: _Connection, end: int) -> None:
        request, rest = bytes(conn.buffer[:end]), bytearray(conn.buffer[end:])
        with self._lock:
            self._connections.pop(conn.sock, None)
            self._busy += 1
        with contextlib.suppress(OSError, ValueError, KeyError):
            self._selector.unregister(conn.sock)
        conn.buffer = rest
        try:
            self._pool.submit(self._answer, conn, request)
        except RuntimeError:  # shutting down
            self._finish(conn, keep=False)

    def _take_returned(self) -> None:
        while True:
            with self._lock:
                if not self._returned:
                    return
                conn = self._returned.popleft()
            if self._stopping.is_set():
                self._close(conn.sock)
                continue
            self._own(conn)

    # -- workers ----------------------------------------------------------------------------

    def _answer(self, conn: _Connection, request: bytes) -> None:
        keep = False
        try:
            conn.sock.settimeout(self.request_timeout_s)  # a client that does not read
            keep = RequestHandler(self._endpoints, conn.sock, conn.address, request).run()
        except Exception as exc:
            logger.debug(
                "query server: answering %(client)s failed: %(error)s",
                {"client": peer(conn.address), "error": str(exc)},
            )
        finally:
            self._finish(conn, keep=keep)

    def _finish(self, conn: _Connection, *, keep: bool) -> None:
        """A worker is done with ``conn``: back to the I/O thread for its next request, or
        closed."""
        if keep and not self._stopping.is_set():
            try:
                conn.sock.setblocking(False)
            except OSError:
                keep = False
        with self._lock:
            self._busy -= 1
            if keep:
                now = time.monotonic()
                conn.deadline, conn.idle_since = now + self.request_timeout_s, now
                self._returned.append(conn)
        self._metrics.open_connections.dec()
        if keep:
            self._wake()
        else:
            self._close(conn.sock)

"""A bounded HTTP/1.1 server: one I/O thread, a fixed worker pool, deadlines and a connection cap.

Every HTTP port the project serves (the sidecar's probes and metrics, the runtime's ``/metrics``
and probes, the runtime's query server) runs on :class:`BoundedHttpServer`, so a slow or idle
client never costs a thread. Kafka's own ``RestServer`` leaves this to Jetty's selector and
bounded thread pool; this is that, small:

- One I/O thread accepts connections and reads request headers without blocking (a selector):
  an idle connection costs a socket and a buffer, never a thread.
- Only a complete request header goes to the pool of ``workers`` threads, which call
  ``respond`` and hand a kept-alive connection back to the I/O thread.
- A connection must deliver a complete header within ``request_timeout_s`` of connecting (or of
  its previous answer), within :data:`MAX_HEADER_BYTES`, else it is closed (``408``/``431``
  when it sent part of one).
- At ``max_connections`` the longest-idle connection waiting for a request is closed to make
  room; a new one is refused only while every connection is being answered.
- With an ``ssl_context``, handshakes run in the I/O thread too, under the same deadline.

What a request means is the caller's ``respond``: an :class:`HttpRequest` in, an
:class:`HttpResponse` out (:mod:`progress_control.http_messages`, re-exported here). Only ``GET``
is served (others get 501).
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import Counter, Gauge

from progress_control.http_messages import (
    HttpRequest,
    HttpResponse,
    Respond,
    answer,
    peer,
    prometheus_metrics,
)

__all__ = [
    "MAX_HEADER_BYTES",
    "BoundedHttpServer",
    "ConnectionMetrics",
    "HttpRequest",
    "HttpResponse",
    "PrometheusConnectionMetrics",
    "Respond",
    "peer",
    "prometheus_metrics",
]

logger = logging.getLogger(__name__)

MAX_HEADER_BYTES = 32 * 1024
_BACKLOG = 128  # the default 5 resets connections under a burst of requests
_ACCEPTS_PER_WAKEUP = 64  # keep reading ready connections while a flood of connects arrives
_RECV = 16 * 1024
_HEADER_END = b"\r\n\r\n"


class ConnectionMetrics(Protocol):
    """Where a server counts its connections."""

    def opened(self, delta: int) -> None:
        """Open connections (waiting for a request or being answered) changed by ``delta``."""

    def closed(self, reason: str) -> None:
        """The server closed a connection before answering it: ``timeout``, ``evicted``,
        ``refused``, ``too-large`` or ``tls``."""


class _NoMetrics:
    def opened(self, delta: int) -> None:
        pass

    def closed(self, reason: str) -> None:
        pass


class PrometheusConnectionMetrics:
    """:class:`ConnectionMetrics` into a gauge and a counter labelled by reason."""

    def __init__(self, open_connections: Gauge, closed: Callable[[str], Counter]) -> None:
        self._open = open_connections
        self._closed = closed

    def opened(self, delta: int) -> None:
        self._open.inc(delta)

    def closed(self, reason: str) -> None:
        self._closed(reason).inc()


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


class BoundedHttpServer:
    """Serves ``respond`` over HTTP (or HTTPS with ``ssl_context``) with one I/O thread and
    ``workers`` threads, at most ``max_connections`` connections, each given
    ``request_timeout_s`` to send a request header (see the module docstring).

    The port is bound on construction (``port`` 0: any free one, see :attr:`port`); requests
    are answered from :meth:`start` to :meth:`stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        respond: Respond,
        *,
        workers: int,
        max_connections: int,
        request_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        metrics: ConnectionMetrics | None = None,
        name: str = "http",
    ) -> None:
        if workers < 1 or max_connections < 1 or request_timeout_s <= 0:
            raise ValueError("workers, max_connections and request_timeout_s must be positive")
        self.respond = respond
        self.workers = workers
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.name = name
        """Names the threads (``{name}-io``, ``{name}_0``...) and prefixes log messages."""
        self._ssl = ssl_context
        self._metrics: ConnectionMetrics = metrics or _NoMetrics()
        self._sock = _listener(host, port)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: dict[socket.socket, _Connection] = {}
        self._busy = 0  # connections a worker is answering
        self._returned: deque[_Connection] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        """The address actually bound."""
        return str(self._sock.getsockname()[0])

    @property
    def port(self) -> int:
        """The port actually bound."""
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
        """Start answering, from a daemon I/O thread."""
        self._selector.register(self._sock, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-io", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the listener and every connection (requests being answered are cut off)."""
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
            _close(conn.sock)
        for sock in (self._sock, self._wake_r, self._wake_w):
            _close(sock)
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
                logger.exception("%(server)s: I/O loop (continuing)", {"server": self.name})

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
                logger.warning(
                    "%(server)s: accept failed: %(error)s", {"server": self.name, "error": str(exc)}
                )
                return
            if not self._make_room():
                self._metrics.closed("refused")
                _close(sock)
                continue
            sock.setblocking(False)
            handshaking = False
            if self._ssl is not None:
                try:
                    sock = self._ssl.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ValueError):
                    self._metrics.closed("tls")
                    _close(sock)
                    continue
                handshaking = True
            now = time.monotonic()
            conn = _Connection(sock, address, now + self.request_timeout_s, now, handshaking)
            self._own(conn)

    def _make_room(self) -> bool:
        """Below the cap, or made so by closing the longest-idle connection waiting for a
        request (an attacker's idle connections go first, never a request being answered)."""
        with self._lock:
            if len(self._connections) + self._busy < self.max_connections:
                return True
            if not self._connections:
                return False
            oldest = min(self._connections.values(), key=lambda c: c.idle_since)
        self._metrics.closed("evicted")
        self._drop(oldest)
        return True

    def _own(self, conn: _Connection) -> None:
        with self._lock:
            self._connections[conn.sock] = conn
        self._metrics.opened(1)
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
            self._metrics.opened(-1)
            with contextlib.suppress(OSError, ValueError, KeyError):
                self._selector.unregister(conn.sock)
        _close(conn.sock)

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
                    "%(server)s: TLS handshake with %(client)s failed: %(error)s",
                    {"server": self.name, "client": peer(conn.address), "error": str(exc)},
                )
                self._metrics.closed("tls")
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
            self._dispatch(conn, end + len(_HEADER_END))
        elif len(conn.buffer) > MAX_HEADER_BYTES:
            self._metrics.closed("too-large")
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
            self._metrics.closed("timeout")
            if conn.buffer:
                self._reply_and_drop(conn, 408, "Request Timeout")
            else:
                self._drop(conn)  # an idle keep-alive connection: just close it

    def _dispatch(self, conn: _Connection, end: int) -> None:
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
                _close(conn.sock)
                continue
            self._own(conn)

    # -- workers ----------------------------------------------------------------------------

    def _answer(self, conn: _Connection, request: bytes) -> None:
        keep = False
        try:
            conn.sock.settimeout(self.request_timeout_s)  # a client that does not read
            keep = answer(self.respond, conn.sock, conn.address, request, self.name)
        except Exception as exc:
            logger.debug(
                "%(server)s: answering %(client)s failed: %(error)s",
                {"server": self.name, "client": peer(conn.address), "error": str(exc)},
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
        self._metrics.opened(-1)
        if keep:
            self._wake()
        else:
            _close(conn.sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()

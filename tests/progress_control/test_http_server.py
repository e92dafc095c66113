"""The bounded HTTP server (:mod:`progress_control.http_server`) over real sockets: slow and
idle clients cost no thread and are closed on time, the connection cap holds, and a request
the server cannot parse or answer never stops it."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from progress_control.http_server import BoundedHttpServer, HttpRequest, HttpResponse
from tests.helpers import wait_for
from tests.http_helpers import check_slow_clients, closed_by_server, stall, timed_get


class Recorded:
    """:class:`~progress_control.http_server.ConnectionMetrics` kept in memory."""

    def __init__(self) -> None:
        self.open = 0
        self.closed_by: Counter[str] = Counter()
        self._lock = threading.Lock()

    def opened(self, delta: int) -> None:
        with self._lock:
            self.open += delta

    def closed(self, reason: str) -> None:
        with self._lock:
            self.closed_by[reason] += 1


def respond(request: HttpRequest) -> HttpResponse:
    if request.path == "/fail":
        raise RuntimeError("boom")
    return HttpResponse.json(200, {"path": request.path})


@pytest.fixture
def serve() -> Iterator[Callable[..., BoundedHttpServer]]:
    """``serve(**bounds)``: a started server of :func:`respond` on a free port (stopped at
    teardown)."""
    servers: list[BoundedHttpServer] = []

    def start(**bounds: Any) -> BoundedHttpServer:
        servers.append(BoundedHttpServer("127.0.0.1", 0, respond, **bounds))
        servers[-1].start()
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_slow_clients_cost_no_thread_and_the_cap_holds(
    serve: Callable[..., BoundedHttpServer],
) -> None:
    metrics = Recorded()
    server = serve(
        workers=2, max_connections=32, request_timeout_s=3.0, metrics=metrics, name="test-http"
    )
    check_slow_clients(
        server.port,
        "/ok",
        stalled=400,
        threads=threading.active_count,
        open_connections=server.open_connections,
        max_connections=32,
        request_timeout_s=3.0,
        workers=2,
    )
    # Each stalled one was evicted to make room, or timed out while the cap held.
    assert metrics.closed_by["evicted"] + metrics.closed_by["timeout"] == 400
    assert metrics.closed_by["evicted"] >= 400 // 2
    wait_for(lambda: metrics.open == 0, timeout_s=5, message="no connection open")


def test_stalled_clients_are_closed_after_the_request_timeout_not_before(
    serve: Callable[..., BoundedHttpServer],
) -> None:
    metrics = Recorded()
    server = serve(workers=2, max_connections=500, request_timeout_s=3.0, metrics=metrics)
    started = time.monotonic()
    clients = stall(server.port, 300)  # ~1 s: a burst overflows the listen backlog, SYNs retry
    try:
        assert not any(closed_by_server(s) for s in clients)
        wait_for(lambda: server.open_connections() == 300, timeout_s=2, message="300 accepted")
        assert timed_get(server.port, "/ok")[0] == 200
        wait_for(
            lambda: all(closed_by_server(s) for s in clients),
            timeout_s=5,
            interval_s=0.1,
            message="stalled connections closed",
        )
        assert time.monotonic() - started >= 3.0
        # Each got a 408: it had sent part of a request.
        assert metrics.closed_by == Counter({"timeout": 300})
        assert server.open_connections() == 0
    finally:
        for sock in clients:
            sock.close()


def test_keep_alive_errors_and_oversized_headers(serve: Callable[..., BoundedHttpServer]) -> None:
    metrics = Recorded()
    server = serve(workers=1, max_connections=8, request_timeout_s=5.0, metrics=metrics)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for path in ("/a", "/fail", "/b"):  # one connection: a failing request keeps it usable
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == (500 if path == "/fail" else 200), body
    conn.request("POST", "/a", body=b"{}")
    assert conn.getresponse().status == 501
    conn.close()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nX: " + b"x" * 40_000)
        assert sock.recv(100).startswith(b"HTTP/1.1 431 ")
    assert metrics.closed_by["too-large"] == 1
    assert timed_get(server.port, "/ok")[0] == 200

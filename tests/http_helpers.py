"""Helpers for tests of the HTTP ports we serve: stalled clients, process figures, a scenario.

:func:`check_slow_clients` is the one scenario every server runs through: many connections that
send half a request header and stall must cost no threads, leave room for a real request and be
closed by the server once its request timeout passes.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import wait_for

HALF_A_HEADER = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n"


def process_status(field: str, pid: int | str = "self") -> int:
    """A number from ``/proc/<pid>/status`` (``Threads``; ``VmRSS`` in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise KeyError(field)


def open_sockets(pid: int) -> int:
    """Sockets process ``pid`` holds open (its listeners and connections)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd).startswith("socket:")
    return count


def stall(port: int, count: int, host: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections that each sent half a request header and then nothing."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(HALF_A_HEADER)
        sock.setblocking(False)  # a socket with a timeout would wait in recv(MSG_DONTWAIT)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (an answer such as a 408 may come first); ``sock``
    must be non-blocking."""
    try:
        while data := sock.recv(65536, socket.MSG_DONTWAIT):
            del data
        return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def timed_get(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, bytes, float]:
    """Status, body and seconds taken of one ``GET`` on a new connection."""
    start = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read(), time.monotonic() - start
    finally:
        conn.close()


def check_slow_clients(
    port: int,
    path: str,
    *,
    stalled: int,
    threads: Callable[[], int],
    open_connections: Callable[[], int],
    max_connections: int,
    request_timeout_s: float,
    workers: int,
    slack: int = 0,
) -> None:
    """Open ``stalled`` half-sent connections (more than ``max_connections``) and check the
    server: no thread per connection, at most ``max_connections`` open, a real ``GET path``
    answered within a second meanwhile, every stalled one closed after ``request_timeout_s``.
    ``slack``: connections ``open_connections`` may count that are not the server's."""
    assert stalled > max_connections
    before = threads()
    clients = stall(port, stalled)
    try:
        wait_for(
            lambda: open_connections() >= max_connections - slack,
            timeout_s=10,
            message=f"the server holding ~{max_connections} connections",
        )
        # The pool starts its workers lazily: at most `workers` threads more, whatever comes.
        assert threads() <= before + workers, (before, threads())
        assert open_connections() <= max_connections + slack
        status, _body, seconds = timed_get(port, path)
        assert status == 200
        assert seconds < 1.0
        assert open_connections() <= max_connections + slack
        wait_for(
            lambda: all(closed_by_server(s) for s in clients),
            timeout_s=request_timeout_s + 5,
            interval_s=0.2,
            message="every stalled connection closed by the server",
        )
        assert threads() <= before + workers
    finally:
        for sock in clients:
            sock.close()

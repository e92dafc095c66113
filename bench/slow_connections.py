"""Slow clients against the HTTP ports we serve, each in its own process.

1. A ``progress-control sidecar`` process on the embedded broker: its threads, RSS and open
   sockets (``/proc/<pid>``) before ``BENCH_SLOW_CONNECTIONS`` (default 800) connections that
   send half a request header and stall, 1 s after them, and ``BENCH_SLOW_WAIT_S`` (default 30)
   later; how long a ``/healthz`` asked meanwhile takes; how many stalled connections the server
   closed by then. Goal: threads stay flat, every stalled connection is closed
   (``http_request_timeout_ms``, 5 s), ``/healthz`` answers in milliseconds.
2. The same against the runtime's metrics port (``serve_metrics_and_health`` in a process of its
   own, no app around it).

``BENCH_SERVER_PYTHONPATH`` puts another source tree first on the servers' ``PYTHONPATH``, e.g. a
``git worktree`` of an older commit, to measure its servers with the same clients.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from progress_control_apps.dev.broker import EmbeddedKafkaBroker

CONNECTIONS = int(os.environ.get("BENCH_SLOW_CONNECTIONS", "800"))
WAIT_S = float(os.environ.get("BENCH_SLOW_WAIT_S", "30"))
HALF_A_HEADER = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n"

# The runtime's metrics port alone: the same call in every version that has it.
_METRICS_PORT = """
import sys, time
from prometheus_client import CollectorRegistry
from streams_runtime.app_state import AppState
from streams_runtime.health import Heartbeat, InstanceHealth, TaskView, serve_metrics_and_health
tasks = TaskView(frozenset(), frozenset())
health = InstanceHealth(lambda: AppState.RUNNING, Heartbeat(), lambda: tasks, deadline_s=1e9)
server = serve_metrics_and_health("127.0.0.1", 0, CollectorRegistry(), health)
port = getattr(server, "port", None) or server.server_port
print(f"metrics on port {port}", file=sys.stderr, flush=True)
time.sleep(3600)
"""


TREE = os.environ.get("BENCH_SERVER_PYTHONPATH")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    if TREE:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (TREE, env.get("PYTHONPATH")) if p)
    return env | extra


@contextmanager
def _serving(command: list[str], env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """(pid, port) of a server process that says ``... on port N`` on stderr."""
    # -m and -c put the working directory first on sys.path, ahead of PYTHONPATH.
    process = subprocess.Popen(
        command, env=env, cwd=TREE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stderr is not None
        port = 0
        while not port:
            line = process.stderr.readline()
            if not line:
                raise RuntimeError(f"{command} exited before serving HTTP")
            if " on port " in line:
                port = int(line.rsplit(" ", 1)[1])
        print(f"serving from {TREE or os.getcwd()}, pid {process.pid}, port {port}")
        # Keep its stderr drained: a full pipe would stall the server, not the clients.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(30)


def _figures(pid: int) -> str:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = (value.split() or [""])[0]
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except OSError:  # closed meanwhile
            continue
    rss_mb = int(fields["VmRSS"]) / 1024
    return f"threads {int(fields['Threads']):4d}, RSS {rss_mb:6.1f} MB, sockets {sockets:4d}"


def _get_ms(port: int, path: str) -> str:
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
    except OSError as exc:
        return f"failed ({exc})"
    finally:
        conn.close()
    return f"{status} in {(time.monotonic() - start) * 1000:.0f} ms"


def _closed(sock: socket.socket) -> bool:
    try:
        while sock.recv(65536, socket.MSG_DONTWAIT):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _measure(label: str, pid: int, port: int, path: str) -> None:
    time.sleep(2.0)  # settle after start-up
    print(f"{label}, {'before':<17} {_figures(pid)}; GET {path}: {_get_ms(port, path)}")
    clients = []
    started = time.monotonic()
    try:
        for _ in range(CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(HALF_A_HEADER)
            sock.setblocking(False)
            clients.append(sock)
        print(f"{label}, {CONNECTIONS} connections opened in {time.monotonic() - started:.1f} s")
        time.sleep(1.0)
        print(
            f"{label}, {f'{CONNECTIONS} stalled +1 s':<17} {_figures(pid)}; "
            f"GET {path}: {_get_ms(port, path)}"
        )
        time.sleep(WAIT_S)
        closed = sum(_closed(s) for s in clients)
        print(
            f"{label}, {f'+{WAIT_S:.0f} s':<17} {_figures(pid)}; "
            f"GET {path}: {_get_ms(port, path)}; stalled closed by the server: {closed}"
        )
    finally:
        for sock in clients:
            sock.close()


def main() -> None:
    with EmbeddedKafkaBroker() as broker:
        env = _env(
            PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
            PROGRESS_CONTROL_HTTP_PORT="0",
            PROGRESS_CONTROL_REPORT_LISTEN="",
            PROGRESS_CONTROL_LOG_LEVEL="WARNING",
        )
        command = [sys.executable, "-m", "progress_control_apps.cli", "sidecar"]
        with _serving(command, env) as (pid, port):
            _measure("sidecar", pid, port, "/healthz")
    with _serving([sys.executable, "-c", _METRICS_PORT], _env()) as (pid, port):
        _measure("runtime metrics port", pid, port, "/health/live")


if __name__ == "__main__":
    main()

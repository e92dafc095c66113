"""The ``progress-control sidecar`` process's HTTP port under slow clients: half-sent requests
cost no thread, the connection cap holds, probes are still answered and the stalled
connections are closed after ``http_request_timeout_ms``. No broker needed: the port serves
while the sidecar waits for one."""

from __future__ import annotations

import os
import socket
import subprocess

from sidecar.settings import SidecarSettings
from tests.http_helpers import check_slow_clients, open_sockets, process_status, timed_get
from tests.interceptor.test_producer import CLI


def test_sidecar_http_port_is_bounded_under_slow_clients() -> None:
    with socket.socket() as sock:  # a port with no broker behind it
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": dead,
        "PROGRESS_CONTROL_HTTP_PORT": "0",
        "PROGRESS_CONTROL_HTTP_MAX_CONNECTIONS": "32",
        "PROGRESS_CONTROL_HTTP_REQUEST_TIMEOUT_MS": "1000",
        "PROGRESS_CONTROL_REPORT_LISTEN": "127.0.0.1:0",
    }
    process = subprocess.Popen(
        [*CLI, "sidecar"], stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stderr is not None
        port = 0
        while not port:
            line = process.stderr.readline()
            assert line, "sidecar exited before serving HTTP"
            if "http on port" in line:
                port = int(line.rsplit(" ", 1)[1])
        assert timed_get(port, "/healthz")[0] == 200  # the pool's first worker starts here
        baseline = open_sockets(process.pid)
        check_slow_clients(
            port,
            "/healthz",
            stalled=400,
            threads=lambda: process_status("Threads", process.pid),
            open_connections=lambda: open_sockets(process.pid) - baseline,
            max_connections=32,
            request_timeout_s=1.0,
            workers=2,
            slack=2,  # the client's attempts to reach the absent broker come and go
        )
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_http_bounds_settings_defaults() -> None:
    settings = SidecarSettings.from_config({"progress.control.kafka": {"bootstrap.servers": "x"}})
    assert (settings.http_max_connections, settings.http_request_timeout_ms) == (64, 5000)

"""The ``progress-control sidecar`` process's HTTP port under slow clients: half-sent requests
cost no thread, the connection cap holds, probes are still answered and the stalled
connections are closed after ``http_request_timeout_ms``. No broker needed: the port serves
while the sidecar waits for one."""

from __future__ import annotations

from sidecar.settings import SidecarSettings
from tests.http_helpers import check_slow_clients, open_sockets, process_status, timed_get
from tests.sidecar.process import dead_port, sidecar_process


def test_sidecar_http_port_is_bounded_under_slow_clients() -> None:
    with sidecar_process(
        f"127.0.0.1:{dead_port()}",
        HTTP_MAX_CONNECTIONS="32",
        HTTP_REQUEST_TIMEOUT_MS="1000",
        REPORT_LISTEN="127.0.0.1:0",
    ) as (process, port):
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


def test_http_bounds_settings_defaults() -> None:
    settings = SidecarSettings.from_config({"progress.control.kafka": {"bootstrap.servers": "x"}})
    assert (settings.http_max_connections, settings.http_request_timeout_ms) == (64, 5000)

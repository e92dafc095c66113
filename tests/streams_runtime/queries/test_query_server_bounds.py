"""A running app's two HTTP ports, its query server and its metrics port, under slow clients:
half-sent requests cost no thread, each port's connection cap holds, real requests are still
answered and the stalled connections are closed after the request timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from streams_runtime import App, StreamsBuilder
from streams_runtime.health import METRICS_WORKERS
from streams_runtime.serdes import String
from tests.http_helpers import check_slow_clients, stall, timed_get


@pytest.mark.broker
def test_query_and_metrics_ports_are_bounded_under_slow_clients(
    run_app: Callable[..., App], create_topic: Callable[..., str]
) -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.table(create_topic("strings"), store_name="strings")
    app = run_app(
        builder,
        application_server="127.0.0.1:0",
        num_standby_replicas=0,
        metrics_port=0,
        query_workers=2,
        query_max_connections=32,
        query_request_timeout_ms=3000,
    )
    assert app.query_endpoint is not None
    assert app.metrics_port is not None

    def query_connections() -> int:
        return int(app.metrics.registry.get_sample_value("streams_query_connections") or 0)

    check_slow_clients(
        int(app.query_endpoint.rsplit(":", 1)[1]),
        "/health",
        stalled=300,
        threads=threading.active_count,
        open_connections=query_connections,
        max_connections=32,
        request_timeout_s=3.0,
        workers=2,
    )
    assert app.metrics.total("streams_query_connections_closed", reason="evicted") > 0
    assert app.metrics.total("streams_query_connections_closed", reason="timeout") > 0
    # The metrics port (its bounds are constants, a 10 s timeout: not waited out here; the
    # timeouts are tested in test_metrics_port.py).
    before = threading.active_count()
    clients = stall(app.metrics_port, 200)
    try:
        status, _body, seconds = timed_get(app.metrics_port, "/metrics")
        assert (status, seconds < 1.0) == (200, True)
        assert threading.active_count() <= before + METRICS_WORKERS
    finally:
        for sock in clients:
            sock.close()

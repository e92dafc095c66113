"""The runtime's metrics port (``/metrics``, ``/health/live``, ``/health/ready``) over real
sockets: what it answers, and slow clients that cost no thread; no broker."""

from __future__ import annotations

import json
import threading

from prometheus_client import CollectorRegistry, Counter

from streams_runtime.app_state import AppState
from streams_runtime.health import (
    METRICS_WORKERS,
    Heartbeat,
    InstanceHealth,
    TaskView,
    serve_metrics_and_health,
)
from streams_runtime.record import TaskId
from tests.http_helpers import check_slow_clients, timed_get


def test_metrics_and_probes_answer_and_slow_clients_cost_no_thread() -> None:
    registry = CollectorRegistry()
    Counter("streams_records", "Records.", registry=registry).inc(3)
    state = [AppState.REBALANCING]
    tasks = TaskView(frozenset({TaskId(0, 0)}), frozenset())
    health = InstanceHealth(lambda: state[0], Heartbeat(), lambda: tasks, deadline_s=60.0)
    server = serve_metrics_and_health(
        "127.0.0.1", 0, registry, health, request_timeout_s=3.0, max_connections=16
    )
    try:
        status, body, _ = timed_get(server.port, "/metrics")
        assert (status, b"streams_records_total 3.0" in body) == (200, True)
        status, body, _ = timed_get(server.port, "/health/ready")
        assert (status, json.loads(body)["reason"]) == (503, "the app is REBALANCING")
        state[0] = AppState.RUNNING
        status, body, _ = timed_get(server.port, "/health/ready?verbose=1")
        assert (status, json.loads(body)["status"]) == (200, "ok")
        assert timed_get(server.port, "/health/live")[0] == 200
        check_slow_clients(
            server.port,
            "/health/live",
            stalled=300,
            threads=threading.active_count,
            open_connections=server.open_connections,
            max_connections=16,
            request_timeout_s=3.0,
            workers=METRICS_WORKERS,
        )
    finally:
        server.stop()

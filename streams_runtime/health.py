"""Liveness and readiness of one instance, for ``/health/live`` and ``/health/ready``.

Kafka Streams leaves probes to its users, who build them from ``KafkaStreams.state()`` and
thread liveness; this module is that, once:

- **live**: the stream thread is making progress. Its loop beats a :class:`Heartbeat` every
  turn (restoration runs beside the loop, :mod:`streams_runtime.processing.state_updater`, so it
  turns while stores restore too). Live fails once the last beat is older than
  ``liveness_deadline_ms`` (default ``max(60 s, 3 * max(poll_timeout_ms, commit_interval_ms))``),
  and at once in ``ERROR`` or ``NOT_RUNNING``.
- **ready**: the app is ``RUNNING`` (Kafka Streams' sense: every active task restored and
  processing, no rebalance in progress) and no active task is restoring. Standby replicas do not
  gate readiness.

Both answer ``(ok, body)``: ``ok`` maps to 200 or 503, ``body`` is a small JSON object that says
why. :func:`serve_metrics_and_health` serves them beside Prometheus' ``/metrics`` on a
:class:`~progress_control.http_server.BoundedHttpServer` (2 workers, 64 connections, 10 s to
send a request header).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from progress_control.http_server import (
    BoundedHttpServer,
    HttpRequest,
    HttpResponse,
    prometheus_metrics,
)
from streams_runtime.app_state import AppState
from streams_runtime.record import TaskId

__all__ = ["Heartbeat", "InstanceHealth", "Probe", "TaskView", "serve_metrics_and_health"]

Probe = tuple[bool, dict[str, object]]
"""A probe's answer: whether it passes (200, else 503) and the JSON body saying why."""

# The metrics port's bounds: a scraper and a prober or two, never many clients.
METRICS_WORKERS = 2
METRICS_MAX_CONNECTIONS = 64
METRICS_REQUEST_TIMEOUT_S = 10.0

# Once stopped, the thread never beats again: failing live at once lets an orchestrator restart
# the instance without waiting out the deadline.
_STOPPED = frozenset({AppState.ERROR, AppState.NOT_RUNNING})


class Heartbeat:
    """When the stream thread last made progress (monotonic seconds; read from any thread)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def beat(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def age_s(self) -> float:
        """Seconds since the last :meth:`beat` (or since creation)."""
        with self._lock:
            return time.monotonic() - self._last


@dataclass(frozen=True)
class TaskView:
    """What the task manager publishes for other threads (replaced, never mutated)."""

    active: frozenset[TaskId]
    restoring: frozenset[TaskId]


class InstanceHealth:
    """Answers the live and ready probes of one :class:`~streams_runtime.App` from its state,
    its stream thread's :class:`Heartbeat` and its published tasks."""

    def __init__(
        self,
        state: Callable[[], AppState],
        heartbeat: Heartbeat,
        tasks: Callable[[], TaskView],
        *,
        deadline_s: float,
    ) -> None:
        self._state = state
        self._heartbeat = heartbeat
        self._tasks = tasks
        self.deadline_s = deadline_s

    def live(self) -> Probe:
        state = self._state()
        age_s = self._heartbeat.age_s()
        deadline_s = self.deadline_s
        body: dict[str, object] = {
            "state": str(state),
            "loop_idle_ms": round(age_s * 1000),
            "deadline_ms": round(deadline_s * 1000),
        }
        if state in _STOPPED:
            return False, {"status": "failing", **body, "reason": f"the app is {state}"}
        if age_s > deadline_s:
            reason = "the stream thread has not turned its loop within the deadline"
            return False, {"status": "failing", **body, "reason": reason}
        return True, {"status": "ok", **body}

    def ready(self) -> Probe:
        state = self._state()
        tasks = self._tasks()
        body: dict[str, object] = {
            "state": str(state),
            "active_tasks": len(tasks.active),
            "restoring_tasks": len(tasks.restoring),
        }
        if tasks.restoring:
            names = ", ".join(str(t) for t in sorted(tasks.restoring))
            return False, {"status": "not_ready", **body, "reason": f"restoring {names}"}
        if state != AppState.RUNNING:
            return False, {"status": "not_ready", **body, "reason": f"the app is {state}"}
        return True, {"status": "ok", **body}


def serve_metrics_and_health(
    host: str,
    port: int,
    registry: CollectorRegistry,
    health: InstanceHealth,
    *,
    request_timeout_s: float = METRICS_REQUEST_TIMEOUT_S,
    max_connections: int = METRICS_MAX_CONNECTIONS,
) -> BoundedHttpServer:
    """Prometheus' ``/metrics`` (any other path too, as ``prometheus_client`` serves it) plus
    ``/health/live`` and ``/health/ready`` on one port, started (stop it with ``stop()``). The
    metrics port needs no token and never serves TLS, so probes always reach it."""
    probes = {"/health/live": health.live, "/health/ready": health.ready}

    def respond(request: HttpRequest) -> HttpResponse:
        probe = probes.get(urllib.parse.urlsplit(request.path).path)
        if probe is None:
            return prometheus_metrics(registry, request)
        ok, body = probe()
        return HttpResponse.json(200 if ok else 503, body)

    server = BoundedHttpServer(
        host,
        port,
        respond,
        workers=METRICS_WORKERS,
        max_connections=max_connections,
        request_timeout_s=request_timeout_s,
        name="streams-metrics",
    )
    server.start()
    return server

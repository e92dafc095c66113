"""``/healthz``, ``/readyz`` and ``/metrics`` on the sidecar's own port.

Served by :class:`progress_control.http_server.BoundedHttpServer`: two worker threads, at most
``http_max_connections`` connections, each given ``http_request_timeout_ms`` to send a request
header, so slow or idle clients cost sockets, never threads.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from progress_control.http_server import (
    BoundedHttpServer,
    HttpRequest,
    HttpResponse,
    prometheus_metrics,
)

__all__ = ["HealthServer"]

# Probes and a scraper: two threads answer them all (metrics take milliseconds).
_WORKERS = 2


class HealthServer:
    """Serves probes and metrics from daemon threads (one I/O thread, two workers)."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        is_ready: Callable[[], bool],
        is_healthy: Callable[[], bool],
        *,
        max_connections: int = 64,
        request_timeout_s: float = 5.0,
    ) -> None:
        def respond(request: HttpRequest) -> HttpResponse:
            if request.path == "/metrics":
                return prometheus_metrics(registry, request)
            if request.path == "/healthz":
                ok = is_healthy()
                return HttpResponse(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
            if request.path == "/readyz":
                ok = is_ready()
                return HttpResponse(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
            return HttpResponse(404, b"not found\n")

        self._server = BoundedHttpServer(
            host,
            port,
            respond,
            workers=_WORKERS,
            max_connections=max_connections,
            request_timeout_s=request_timeout_s,
            name="http",
        )

    @property
    def port(self) -> int:
        return self._server.port

    def open_connections(self) -> int:
        """Connections open now (waiting for a request or being answered)."""
        return self._server.open_connections()

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

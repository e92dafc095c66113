"""The HTTP(S) query server of one instance.

- ``GET /stores/{store}/keys/{key}?allow_stale=false&max_lag=N``: the value of ``key`` (text,
  converted with the store's key serde), routed to wherever it lives; 200 with the answer
  (``"found": false`` and ``"value": null`` when the key is absent), 404 ``unknown-store`` when
  the topology has no such store (the body lists those it has), 400 for a bad key or
  parameter, 503 when no copy may answer (with the lags seen). ``local=true`` answers from this
  instance's copies only (what forwarding instances ask).
- ``GET /stores/{store}/keys/{key}/windows?from=&to=`` and
  ``.../sessions?earliest_end=&latest_start=&descending=``: a window store's windows of the key
  by start, a session store's sessions of the key by end (answered as the value is).
- ``GET /stores/{store}/range?from=&to=&descending=``, ``/all``, ``/prefix?prefix=`` and
  ``/windows?from=&to=``: a read across keys, every partition (or ``partitions=0,1``) routed
  to its copy and the entries merged in the read's order (a ``RangeResult``; key bounds also as
  ``from_b64``/``to_b64``/``prefix_b64``, serialized bytes in base64). ``local=true`` answers
  from this instance's copies only.
- ``GET /metadata/{store}/{key}``: active host, standby hosts and partition.
- ``GET /lags``: ``all_local_store_partition_lags()``.
- ``GET /health/live`` and ``GET /health/ready``: the instance's probes
  (:mod:`streams_runtime.health`), 200 or 503 with a JSON body saying why, to anyone (a probe
  needs no secret).
- ``GET /health``: ``{"status": "ok"}`` to anyone while the server answers (kept for
  compatibility; probes should use the two above); with the token it also names the instance.

With a token (``query_token``) every other request needs ``Authorization: Bearer <token>``
(401 otherwise, compared in constant time). Binding a non-loopback address without one is
refused at start-up (:mod:`streams_runtime.queries.security`). Every error is a JSON body
``{"error": code, "message": ...}``, the code one of ``unknown-store``, ``invalid-key``,
``unknown-query-type`` (a read the store's kind does not answer), ``bad-request``,
``unauthorized``, ``no-such-path``, ``not-available``, ``no-replica-within-bound``,
``query-failed`` (:mod:`streams_runtime.queries.results`); no
request can stop the server.

Slow or idle clients cannot starve queries: the connections are owned by
:class:`progress_control.http_server.BoundedHttpServer` (one I/O thread reading request headers,
``query_workers`` threads answering complete requests, ``query_request_timeout_ms`` to send a
header, at most ``query_max_connections`` connections, TLS handshakes in the I/O thread). This
module configures it and checks the address it bound; what a request means, its routing and its
answer, is :mod:`streams_runtime.queries.endpoints`.
"""

from __future__ import annotations

import logging

from progress_control.http_server import BoundedHttpServer, PrometheusConnectionMetrics
from streams_runtime.health import InstanceHealth
from streams_runtime.metrics import security_metrics
from streams_runtime.queries.endpoints import QueryEndpoints
from streams_runtime.queries.router import InteractiveQueries
from streams_runtime.queries.security import (
    is_loopback_host,
    query_token,
    server_ssl_context,
)
from streams_runtime.settings import RuntimeSettings

__all__ = ["QueryServer"]

logger = logging.getLogger(__name__)


class QueryServer:
    """Serves :class:`InteractiveQueries` over HTTP (or HTTPS) on a
    :class:`~progress_control.http_server.BoundedHttpServer` (see the module docstring)."""

    def __init__(
        self,
        queries: InteractiveQueries,
        host: str,
        port: int,
        settings: RuntimeSettings,
        health: InstanceHealth | None = None,
    ) -> None:
        self.queries = queries
        self.token = query_token(settings)
        metrics = security_metrics(queries.metrics)
        endpoints = QueryEndpoints(queries, self.token, metrics, health)
        self._server = BoundedHttpServer(
            host,
            port,
            endpoints.respond,
            workers=settings.query_workers,
            max_connections=settings.query_max_connections,
            request_timeout_s=settings.query_request_timeout_ms / 1000,
            ssl_context=server_ssl_context(settings),
            metrics=PrometheusConnectionMetrics(
                metrics.open_connections, metrics.connections_closed
            ),
            name="streams-query",
        )
        bound = self._server.host
        # The settings were checked by name; this checks the address actually bound (a name
        # such as "localhost" could resolve elsewhere).
        if self.token is None and not is_loopback_host(bound):
            if not settings.query_allow_unauthenticated:
                self._server.stop()
                raise ValueError(
                    f"the query server bound {bound!r}, not a loopback address, without a "
                    "token: set query_token (or query_allow_unauthenticated=true)"
                )
            logger.warning(
                "query server on %(host)s:%(port)d serves anyone who can connect "
                "(query_allow_unauthenticated)",
                {"host": bound, "port": self.port},
            )

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return self._server.scheme

    def open_connections(self) -> int:
        """Connections open now (waiting for a request or being answered)."""
        return self._server.open_connections()

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

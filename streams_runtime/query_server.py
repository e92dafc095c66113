"""The HTTP query server of one instance (stdlib ``ThreadingHTTPServer``, one thread per request).

- ``GET /stores/{store}/keys/{key}?allow_stale=false&max_lag=N``: the value of ``key`` (text,
  converted with the store's key serde), routed to wherever it lives; 200 with the answer, 404
  with ``"found": false`` when the key is absent (or the store unknown, without ``found``), 400
  for a bad key or parameter, 503 when no copy may answer (with the lags seen). ``local=true``
  answers from this instance's copies only (what forwarding instances ask).
- ``GET /metadata/{store}/{key}``: active host, standby hosts and partition.
- ``GET /lags``: ``all_local_store_partition_lags()``.
- ``GET /health``.

With ``query_token`` set every request needs ``Authorization: Bearer <token>`` (401 otherwise).
Every error is a JSON body ``{"error": ..., "message": ...}``; no request can stop the server.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from streams_runtime.queries import InteractiveQueries, InvalidKeyError, QueryError, key_from_text

__all__ = ["QueryServer"]

logger = logging.getLogger(__name__)

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


class _BadRequestError(QueryError):
    status = 400


def _flag(params: dict[str, list[str]], name: str) -> bool:
    value = params.get(name, ["false"])[-1].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _BadRequestError(f"{name} must be true or false, got {value!r}")


def _max_lag(params: dict[str, list[str]]) -> int | None:
    values = params.get("max_lag")
    if not values or values[-1] == "":
        return None
    try:
        lag = int(values[-1])
    except ValueError:
        raise _BadRequestError(f"max_lag must be an integer, got {values[-1]!r}") from None
    if lag < 0:
        raise _BadRequestError(f"max_lag must be >= 0, got {lag}")
    return lag


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 resets connections under a burst of queries
    daemon_threads = True


class QueryServer:
    """Serves :class:`InteractiveQueries` over HTTP in a background thread."""

    def __init__(
        self, queries: InteractiveQueries, host: str, port: int, token: str | None
    ) -> None:
        self.queries = queries
        self.token = token
        handler = self._handler_class()
        self._server = _Server((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="streams-query-server", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("query server: " + format, *args)

            def do_GET(self) -> None:
                try:
                    status, body = server._dispatch(self)
                except QueryError as exc:
                    status, body = exc.status, exc.to_json()
                except Exception as exc:  # never let a request take the server down
                    logger.exception("query failed")
                    status, body = 500, {"error": type(exc).__name__, "message": str(exc)}
                self._send(status, body)

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == HTTPStatus.UNAUTHORIZED:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _authorized(self, handler: BaseHTTPRequestHandler) -> bool:
        if not self.token:
            return True
        header = handler.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
        if not self._authorized(handler):
            return 401, {"error": "Unauthorized", "message": "missing or wrong bearer token"}
        url = urllib.parse.urlsplit(handler.path)
        params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        queries = self.queries
        if parts == ["health"]:
            return 200, {"status": "ok", "instance_id": queries.instance_id}
        if parts == ["lags"]:
            lags = queries.all_local_store_partition_lags()
            return 200, {
                "instance_id": queries.instance_id,
                "lags": {
                    store: {str(p): lag.to_json() for p, lag in partitions.items()}
                    for store, partitions in lags.items()
                },
            }
        if len(parts) == 3 and parts[0] == "metadata":
            spec = queries.store(parts[1])
            meta = queries.query_metadata_for_key(spec.name, key_from_text(spec, parts[2]))
            return 200, {
                "active_host": meta.active_host,
                "standby_hosts": meta.standby_hosts,
                "partition": meta.partition,
            }
        if len(parts) == 4 and parts[0] == "stores" and parts[2] == "keys":
            spec = queries.store(parts[1])
            key = key_from_text(spec, parts[3])
            allow_stale, max_lag = _flag(params, "allow_stale"), _max_lag(params)
            if _flag(params, "local"):
                result = queries.get_local(spec.name, key, allow_stale=allow_stale, max_lag=max_lag)
            else:
                result = queries.get(spec.name, key, allow_stale=allow_stale, max_lag=max_lag)
            return (200 if result.found else 404), result.to_json()
        if parts and parts[0] in {"stores", "metadata"}:
            raise InvalidKeyError(f"bad path {url.path!r}")
        return 404, {"error": "NotFound", "message": f"no such path {url.path!r}"}

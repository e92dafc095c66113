"""The query server's endpoints: one parsed HTTP request routed to :class:`InteractiveQueries`.

:class:`QueryEndpoints` checks the bearer token and maps each path (``/stores/{store}/keys/{key}``
and its ``/windows`` and ``/sessions``, ``/stores/{store}/range``, ``/all``, ``/prefix`` and
``/windows``, ``/metadata/{store}/{key}``, ``/lags``, ``/health``, ``/health/live``,
``/health/ready``; see :mod:`streams_runtime.queries.server`) to a status and a JSON body;
:meth:`QueryEndpoints.respond` is what the server calls per request.
It owns no connection: that is :class:`progress_control.http_server.BoundedHttpServer`'s job.
"""

from __future__ import annotations

import base64
import binascii
import logging
import urllib.parse
from http import HTTPStatus

from progress_control.http_server import HttpRequest, HttpResponse
from streams_runtime.health import InstanceHealth
from streams_runtime.metrics import SecurityMetrics
from streams_runtime.queries.reads import (
    KeyRange,
    KeyRead,
    PartitionRead,
    SessionKeyRead,
    WindowKeyRead,
    WindowStartRange,
)
from streams_runtime.queries.results import QueryError
from streams_runtime.queries.router import POINT, InteractiveQueries, key_from_text
from streams_runtime.queries.security import tokens_equal
from streams_runtime.state.stores import EARLIEST, LATEST
from streams_runtime.topology import QueryableStore

__all__ = ["QueryEndpoints"]

# The server's logger: failed-query logs keep the name they had before the endpoints moved here.
logger = logging.getLogger("streams_runtime.queries.server")

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


class _BadRequestError(QueryError):
    status = 400
    code = "bad-request"


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


def _time(params: dict[str, list[str]], name: str, default: int) -> int:
    values = params.get(name)
    if not values or values[-1] == "":
        return default
    try:
        return int(values[-1])
    except ValueError:
        raise _BadRequestError(f"{name} must be an integer (ms), got {values[-1]!r}") from None


def _partitions(params: dict[str, list[str]]) -> list[int] | None:
    values = params.get("partitions")
    if not values or values[-1] == "":
        return None
    try:
        return [int(p) for p in values[-1].split(",")]
    except ValueError:
        raise _BadRequestError(f"partitions must be integers, got {values[-1]!r}") from None


def _key_read(spec: QueryableStore, read: str, params: dict[str, list[str]]) -> KeyRead:
    """The read a key's path asks for (``/keys/{key}``, ``/windows``, ``/sessions``)."""
    if read == "":
        return POINT
    if read == "windows":
        return WindowKeyRead(_time(params, "from", EARLIEST), _time(params, "to", LATEST))
    if read == "sessions":
        return SessionKeyRead(
            _time(params, "earliest_end", EARLIEST),
            _time(params, "latest_start", LATEST),
            _flag(params, "descending"),
        )
    raise _BadRequestError(f"no read {read!r} of a key: windows or sessions")


class QueryEndpoints:
    """Authorizes a request and answers it from ``queries``: a status and a JSON body."""

    def __init__(
        self,
        queries: InteractiveQueries,
        token: str | None,
        metrics: SecurityMetrics,
        health: InstanceHealth | None = None,
    ) -> None:
        self.queries = queries
        self.health = health
        self.token = token
        self._metrics = metrics

    def authorized(self, request: HttpRequest) -> bool:
        if not self.token:
            return True
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and tokens_equal(given.strip(), self.token)

    def respond(self, request: HttpRequest) -> HttpResponse:
        """The answer to ``request``: a JSON body, an error one for a failed query."""
        try:
            status, body = self.dispatch(request)
        except QueryError as exc:
            status, body = exc.status, exc.to_json()
        except Exception as exc:  # never let a request take the server down
            logger.exception("query failed")
            status, body = 500, {"error": QueryError.code, "message": str(exc)}
        challenge = (("WWW-Authenticate", "Bearer"),) if status == HTTPStatus.UNAUTHORIZED else ()
        return HttpResponse.json(status, body, challenge)

    def dispatch(  # noqa: PLR0911 - one return per endpoint
        self, request: HttpRequest
    ) -> tuple[int, dict[str, object]]:
        url = urllib.parse.urlsplit(request.path)
        params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        queries = self.queries
        authorized = self.authorized(request)
        if parts[:1] == ["health"] and len(parts) == 2 and self.health is not None:
            probe = {"live": self.health.live, "ready": self.health.ready}.get(parts[1])
            if probe is not None:  # for probes, to anyone: a state and task counts, no data
                ok, body = probe()
                return (200 if ok else 503), body
        if parts == ["health"]:
            if not authorized:  # liveness for probes, nothing more
                return 200, {"status": "ok"}
            return 200, {"status": "ok", "instance_id": queries.instance_id}
        if not authorized:
            self._metrics.unauthorized.inc()
            return 401, {"error": "unauthorized", "message": "missing or wrong bearer token"}
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
        if len(parts) in {4, 5} and parts[0] == "stores" and parts[2] == "keys":
            spec = queries.store(parts[1])
            key = key_from_text(spec, parts[3])
            read = _key_read(spec, parts[4] if len(parts) == 5 else "", params)
            allow_stale, max_lag = _flag(params, "allow_stale"), _max_lag(params)
            query = queries.get_local if _flag(params, "local") else queries.get
            result = query(spec.name, key, allow_stale=allow_stale, max_lag=max_lag, read=read)
            # An absent key is an answer ("found": false), not an error: a 404 means the store
            # (or the path) does not exist.
            return 200, result.to_json()
        if len(parts) == 3 and parts[0] == "stores" and parts[2] in _PARTITION_READS:
            spec = queries.store(parts[1])
            partition_read = self._partition_read(spec, parts[2], params)
            allow_stale, max_lag = _flag(params, "allow_stale"), _max_lag(params)
            ranged = queries.range_local if _flag(params, "local") else queries.query_range
            answer = ranged(
                spec.name,
                partition_read,
                _partitions(params),
                allow_stale=allow_stale,
                max_lag=max_lag,
            )
            return 200, answer.to_json()
        if parts and parts[0] in {"stores", "metadata"}:
            raise _BadRequestError(
                f"bad path {url.path!r}: /stores/<store>/keys/<key>[/windows|/sessions], "
                "/stores/<store>/range|all|prefix|windows or /metadata/<store>/<key>"
            )
        return 404, {"error": "no-such-path", "message": f"no such path {url.path!r}"}

    def _bound(self, spec: QueryableStore, params: dict[str, list[str]], name: str) -> bytes | None:
        """A key bound: ``name`` as the store's key type (text), or ``name_b64`` serialized."""
        encoded = params.get(f"{name}_b64")
        if encoded:
            try:
                return base64.b64decode(encoded[-1], validate=True)
            except (binascii.Error, ValueError):
                raise _BadRequestError(f"{name}_b64 is not base64: {encoded[-1]!r}") from None
        text = params.get(name)
        if text is None:
            return None
        return self.queries.serialize_key(spec.name, key_from_text(spec, text[-1]))

    def _partition_read(
        self, spec: QueryableStore, read: str, params: dict[str, list[str]]
    ) -> PartitionRead:
        """The read of every key a store path asks for."""
        if read == "windows":
            return WindowStartRange(_time(params, "from", EARLIEST), _time(params, "to", LATEST))
        if read == "prefix":
            prefix = self._bound(spec, params, "prefix")
            if prefix is None:
                raise _BadRequestError("a prefix scan needs prefix= (or prefix_b64=)")
            return KeyRange(prefix=prefix)
        descending = _flag(params, "descending")
        if read == "all":
            return KeyRange(descending=descending)
        lower, upper = self._bound(spec, params, "from"), self._bound(spec, params, "to")
        return KeyRange(lower, upper, descending)


_PARTITION_READS = {"range", "all", "prefix", "windows"}

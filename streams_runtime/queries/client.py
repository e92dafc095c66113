"""The HTTP client that forwards an interactive query to the instance holding the key, or one
partition's part of a range read to the instance holding the partition (Kafka Streams leaves
this to the user's RPC layer; KIP-535's ``StreamsMetadata`` says where to send it).

Forwarded queries carry the query token, so the client sends them to the member's advertised
endpoint and nowhere else:

- **no proxies**: ``HTTP(S)_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` are never read (a
  :class:`urllib3.PoolManager` does not consult the environment, unlike ``urllib.request``);
- **no redirects**: a 3xx answer fails the forward; its ``Location`` is never followed;
- **no retries**: a failed forward fails at once, and the router asks the next copy
  (:meth:`streams_runtime.queries.router.InteractiveQueries.get`);
- **keep-alive**: connections to each member are pooled and reused, so a forward costs a
  request, not a TCP (and TLS) handshake.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from streams_runtime.queries.results import QueryResult, RangeResult

if TYPE_CHECKING:
    import urllib3

__all__ = ["ForwardError", "QueryForwarder"]

# Pools (one per member endpoint) kept at once; the least recently used one beyond is closed.
_MAX_MEMBERS = 64


class ForwardError(Exception):
    """A forwarded query got no usable answer (transport error, redirect, error status)."""


class QueryForwarder:
    """Sends forwarded queries over pooled, kept-alive connections (see the module docstring).

    ``ssl_context`` (``None``: plain HTTP) verifies the members' certificates and host names;
    ``token`` goes in ``Authorization: Bearer``; ``timeout_s`` bounds one whole forward;
    ``connections_per_member`` idle connections are kept per member (more may open under load,
    and are closed after their request). Thread-safe.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        token: str | None,
        timeout_s: float,
        connections_per_member: int,
    ) -> None:
        self._scheme = "https" if ssl_context is not None else "http"
        self._ssl_context = ssl_context
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._connections_per_member = connections_per_member
        # Made on the first forward: urllib3 is imported then, not at every app's start (an
        # instance alone never forwards).
        self._pool: urllib3.PoolManager | None = None
        self._lock = threading.Lock()

    def _connections(self) -> urllib3.PoolManager:
        with self._lock:
            if self._pool is None:
                import urllib3

                self._pool = urllib3.PoolManager(
                    num_pools=_MAX_MEMBERS,
                    headers=self._headers,
                    maxsize=self._connections_per_member,
                    block=False,
                    retries=False,
                    timeout=urllib3.Timeout(total=self._timeout_s),
                    ssl_context=self._ssl_context,
                )
            return self._pool

    def forward(
        self,
        endpoint: str,
        store: str,
        key_text: str,
        allow_stale: bool,
        max_lag: int | None,
        *,
        path: str = "",
        params: dict[str, str] | None = None,
    ) -> QueryResult:
        """Ask the member at ``endpoint`` (``host:port``) for its local answer about a key
        (``path`` after ``/keys/{key}`` and ``params`` name a read other than the value:
        :class:`~streams_runtime.queries.reads.KeyRead`); :class:`ForwardError` when it gives
        none. An absent key is an answer: 200 with ``"found": false`` (404 with ``found`` from
        instances before the error codes)."""
        key_path = (
            f"/stores/{urllib.parse.quote(store, safe='')}"
            f"/keys/{urllib.parse.quote(key_text, safe='')}{path}"
        )
        body = self._get(endpoint, key_path, params or {}, allow_stale, max_lag, "found")
        try:
            return QueryResult.from_json(body)
        except TypeError as exc:
            raise ForwardError(f"{endpoint}: unexpected answer {body!r}") from exc

    def forward_partition(  # noqa: PLR0917 - the read, and its routing parameters
        self,
        endpoint: str,
        store: str,
        path: str,
        params: dict[str, str],
        partition: int,
        allow_stale: bool,
        max_lag: int | None,
    ) -> RangeResult:
        """Ask the member at ``endpoint`` for its local answer to a read of every key of
        ``partition`` (``path`` after ``/stores/{store}`` and ``params``:
        :class:`~streams_runtime.queries.reads.PartitionRead`); :class:`ForwardError` when it
        gives none."""
        read_path = f"/stores/{urllib.parse.quote(store, safe='')}{path}"
        query = {**params, "partitions": str(partition)}
        body = self._get(endpoint, read_path, query, allow_stale, max_lag, None)
        try:
            return RangeResult.from_json(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise ForwardError(f"{endpoint}: unexpected answer {body!r}") from exc

    def _get(  # noqa: PLR0917 - the request, and its routing parameters
        self,
        endpoint: str,
        path: str,
        params: dict[str, str],
        allow_stale: bool,
        max_lag: int | None,
        absent_field: str | None,
    ) -> dict[str, Any]:
        """The JSON object a member answers ``GET path`` with, asked for its local copies;
        a 404 carrying ``absent_field`` is an answer too."""
        query = {**params, "local": "true", "allow_stale": str(allow_stale).lower()}
        if max_lag is not None:
            query["max_lag"] = str(max_lag)
        url = f"{self._scheme}://{endpoint}{path}?{urllib.parse.urlencode(query)}"
        pool = self._connections()
        from urllib3.exceptions import HTTPError as Urllib3Error  # loaded with the pool

        try:
            response = pool.request("GET", url, redirect=False)
        except (Urllib3Error, OSError, ValueError) as exc:
            raise ForwardError(f"{endpoint}: {exc}") from exc
        status = response.status
        if 300 <= status < 400:  # never followed: the token would go with it
            raise ForwardError(f"{endpoint}: HTTP {status} redirect, not followed")
        try:
            body = json.loads(response.data)
        except ValueError as exc:
            raise ForwardError(f"{endpoint}: HTTP {status}, not JSON") from exc
        if not isinstance(body, dict):
            raise ForwardError(f"{endpoint}: HTTP {status}: unexpected answer {body!r}")
        if status != 200 and not (
            status == 404 and absent_field is not None and absent_field in body
        ):
            raise ForwardError(f"{endpoint}: HTTP {status}: {body.get('message')}")
        return body

    def close(self) -> None:
        """Close every pooled connection (forwarding after this opens new ones)."""
        with self._lock:
            if self._pool is not None:
                self._pool.clear()

"""Forwarded interactive queries (issue 27): the token goes to the member's endpoint only, over
kept-alive connections.

Local HTTP servers stand in for a proxy, a redirecting member and the place it redirects to;
the broker tests run two real instances where each forwards to the other. Proxy variables are
set in this process, which the in-process instances read (``urllib.request`` did, per request).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streams_runtime import App
from streams_runtime.cluster import MemberInfo
from streams_runtime.cluster.membership_auth import MembershipAuthenticator
from streams_runtime.queries.client import ForwardError, QueryForwarder
from streams_runtime.queries.results import NotAvailableError, QueryError
from streams_runtime.serdes import String
from tests.helpers import wait_for
from tests.streams_runtime.queries.test_queries import (
    TOKEN,
    all_partitions_placed,
    produce_table,
    table_instances,
)

PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
ROWS = {f"k{i}": f"v{i}" for i in range(40)}

Answer = tuple[int, dict[str, str], bytes]


def _result_json(key: str, value: str) -> bytes:
    return json.dumps(
        {
            "store": "strings",
            "key": key,
            "found": True,
            "value": value,
            "timestamp": 1,
            "served_by": "active",
            "instance_id": "fake",
            "host": None,
            "partition": 0,
            "offset_lag": 0,
            "time_lag_ms": 0,
        }
    ).encode()


class _Server:
    """A local HTTP/1.1 server (keep-alive) that records every connection and request and
    answers each with ``answer(path)``."""

    def __init__(self, answer: Callable[[str], Answer]) -> None:
        self.connections = 0
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are separate writes: with Nagle's algorithm on, each answer on a
            # kept-alive connection waits for the client's delayed ACK.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def _handle(self) -> None:
                with server._lock:
                    server.requests.append(
                        (self.command, self.path, self.headers.get("Authorization"))
                    )
                status, headers, body = answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._handle()

            def do_CONNECT(self) -> None:  # what a proxy gets for https
                self._handle()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.endpoint = f"127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


@contextlib.contextmanager
def serving(answer: Callable[[str], Answer]) -> Iterator[_Server]:
    server = _Server(answer)
    try:
        yield server
    finally:
        server.close()


def _proxy_answer(path: str) -> Answer:
    return 503, {}, b"proxy: upstream unavailable"


@pytest.fixture
def fake_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """A fake proxy named by every proxy variable (and nothing exempted by NO_PROXY)."""
    with serving(_proxy_answer) as proxy:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, f"http://{proxy.endpoint}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        # urllib.request reads the variables when it builds its shared opener, on the first
        # plain-HTTP urlopen: drop that opener, so any urllib use here sees them, as in a
        # process started with them (and rebuild it from the restored environment after).
        urllib.request.install_opener(None)
        try:
            yield proxy
        finally:
            urllib.request.install_opener(None)


def _forwarder(**overrides: Any) -> QueryForwarder:
    options: dict[str, Any] = {
        "ssl_context": None,
        "token": TOKEN,
        "timeout_s": 5.0,
        "connections_per_member": 4,
        **overrides,
    }
    return QueryForwarder(**options)


# -- the client alone ------------------------------------------------------------------------


def test_forwarder_ignores_proxy_variables(fake_proxy: _Server) -> None:
    with serving(lambda path: (200, {}, _result_json("k1", "v1"))) as member:
        forwarder = _forwarder()
        try:
            for _ in range(10):
                result = forwarder.forward(member.endpoint, "strings", "k1", False, None)
                assert (result.found, result.value) == (True, "v1")
        finally:
            forwarder.close()
    assert fake_proxy.connections == 0
    assert len(member.requests) == 10
    assert {auth for _, _, auth in member.requests} == {f"Bearer {TOKEN}"}


def test_forwarder_never_follows_a_redirect() -> None:
    with (
        serving(lambda path: (200, {}, _result_json("k1", "stolen"))) as elsewhere,
        serving(
            lambda path: (307, {"Location": f"http://{elsewhere.endpoint}{path}"}, b"")
        ) as member,
    ):
        forwarder = _forwarder()
        try:
            with pytest.raises(ForwardError, match="307 redirect, not followed"):
                forwarder.forward(member.endpoint, "strings", "k1", False, None)
        finally:
            forwarder.close()
    assert len(member.requests) == 1
    assert elsewhere.connections == 0
    assert elsewhere.requests == []


def test_forwarder_keeps_connections_alive() -> None:
    with serving(lambda path: (200, {}, _result_json("k1", "v1"))) as member:
        forwarder = _forwarder(connections_per_member=4)
        try:
            for _ in range(100):
                forwarder.forward(member.endpoint, "strings", "k1", False, None)
            assert member.connections == 1
            # Four threads at once: at most one connection each, reused across their queries.
            errors: list[BaseException] = []

            def ask() -> None:
                try:
                    for _ in range(50):
                        forwarder.forward(member.endpoint, "strings", "k1", False, None)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=ask) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert errors == []
            assert len(member.requests) == 300
            assert member.connections <= 1 + 4
        finally:
            forwarder.close()


def test_forwarder_errors_are_forward_errors() -> None:
    with serving(lambda path: (503, {}, b'{"error": "X", "message": "busy"}')) as busy:
        forwarder = _forwarder(timeout_s=2.0)
        try:
            with pytest.raises(ForwardError, match="HTTP 503: busy"):
                forwarder.forward(busy.endpoint, "strings", "k1", False, None)
            endpoint = busy.endpoint
        finally:
            forwarder.close()
    # Nothing listens there any more: connection refused, no retry.
    forwarder = _forwarder(timeout_s=2.0)
    try:
        started = time.monotonic()
        with pytest.raises(ForwardError):
            forwarder.forward(endpoint, "strings", "k1", False, None)
        assert time.monotonic() - started < 2.0
    finally:
        forwarder.close()


# -- two real instances ----------------------------------------------------------------------


@pytest.fixture
def placed(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[list[App], str]]:
    """Two instances with :data:`ROWS` in the ``strings`` table, each row readable through both
    (3 polls in a row: tasks move for a while after both joined); and the application id."""
    with table_instances(kafka_bootstrap, create_topic, tmp_path) as (apps, strings, _, app_id):
        produce_table(kafka_bootstrap, strings, ROWS, String())
        wait_for(lambda: all_partitions_placed(apps), timeout_s=60, message="actives, standbys")
        streak = [0]

        def readable() -> bool:
            try:
                ok = all(app.get("strings", k).found for app in apps for k in ROWS)
            except QueryError:
                ok = False
            streak[0] = streak[0] + 1 if ok else 0
            return streak[0] >= 3

        wait_for(readable, timeout_s=60, interval_s=0.2, message="every row readable")
        yield apps, app_id


def _forwarding_pair(apps: list[App]) -> tuple[App, App, list[str]]:
    """An instance, another one, and the keys the first forwards to the second (which one
    holds which partitions depends on the assignment)."""

    def pair() -> tuple[App, App, list[str]] | None:
        for client in apps:
            for owner in apps:
                if owner is client:
                    continue
                keys = [
                    k
                    for k in ROWS
                    if client.query_metadata_for_key("strings", k).active_host
                    == owner.query_endpoint
                ]
                if keys:
                    return client, owner, keys
        return None

    return wait_for(pair, timeout_s=30, message="a key one instance forwards to the other")


@pytest.mark.broker
def test_forwarded_queries_bypass_proxy_variables(
    placed: tuple[list[App], str], fake_proxy: _Server
) -> None:
    apps, _ = placed
    failures = [app.metrics.total("streams_query_routing_failures") for app in apps]
    answers = forwarded = 0
    for app in apps:
        for key, value in ROWS.items():
            result = app.get("strings", key)
            assert (result.found, result.value, result.served_by) == (True, value, "active")
            answers += 1
            forwarded += result.instance_id != app.instance_id
    assert answers == 2 * len(ROWS)
    assert forwarded >= len(ROWS) // 2  # every key is forwarded by one of the two instances
    assert fake_proxy.connections == 0
    assert fake_proxy.requests == []
    # No forward failed (as through a proxy) and was answered by a retry.
    assert [app.metrics.total("streams_query_routing_failures") for app in apps] == failures


def _tcp_connections_to(port: int) -> set[str]:
    """Every TCP connection on this host to ``port``, as its client side's address (hex, as
    listed). Seen from either end, so a closed one stays counted for a minute: TIME_WAIT holds
    the end that closed first."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            for line in list(lines)[1:]:
                local, remote, state = line.split()[1:4]
                if state == "0A":  # LISTEN
                    continue
                if int(remote.rsplit(":", 1)[1], 16) == port:
                    found.add(local)
                elif int(local.rsplit(":", 1)[1], 16) == port:
                    found.add(remote)
    return found


@pytest.mark.broker
def test_forwarded_queries_reuse_connections(placed: tuple[list[App], str]) -> None:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("counts connections in /proc/net/tcp (Linux)")
    apps, _ = placed
    client, owner, keys = _forwarding_pair(apps)
    port = int(str(owner.query_endpoint).rsplit(":", 1)[1])
    assert client.queries is not None
    client.queries.close()  # the queries waiting for placement left a connection open
    before = _tcp_connections_to(port)
    queries = 0
    while queries < 200:
        for key in keys:
            result = client.get("strings", key)
            assert (result.value, result.instance_id) == (ROWS[key], owner.instance_id)
            queries += 1
    opened = _tcp_connections_to(port) - before
    # One client thread: one connection, kept alive (a new one only if the server closed it).
    assert 1 <= len(opened) <= 3, (queries, len(opened))


@pytest.mark.broker
def test_a_redirecting_member_gets_a_failed_forward_and_no_token_leaves(
    placed: tuple[list[App], str], kafka_bootstrap: str
) -> None:
    apps, application_id = placed
    client, owner, keys = _forwarding_pair(apps)
    with (
        serving(lambda path: (200, {}, _result_json("k", "stolen"))) as elsewhere,
        serving(
            lambda path: (307, {"Location": f"http://{elsewhere.endpoint}{path}"}, b"")
        ) as redirecting,
    ):
        # The owner's record moved to the redirecting endpoint, signed with the key the
        # instances derive from the token (as an insider, or a compromised member, could).
        topic = f"{application_id}-membership"
        derived = hmac.new(
            TOKEN.encode(),
            b"progress-control/membership-key-from-query-token/v1",
            hashlib.sha256,
        ).digest()
        now = int(time.time() * 1000)
        every: dict[str, tuple[int, ...]] = {"strings": (0, 1), "ints": (0, 1)}
        record = MemberInfo(
            owner.instance_id, redirecting.endpoint, now + 600_000, 3_600_000, active=every
        ).to_json()
        record_key = owner.instance_id.encode()
        headers = MembershipAuthenticator(derived, topic).headers(record_key, record)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(topic, key=record_key, value=record, headers=headers)
        producer.flush(30)

        def redirected() -> bool:
            with contextlib.suppress(QueryError):
                client.get("strings", keys[0])
            return bool(redirecting.requests)

        wait_for(redirected, timeout_s=30, message="a query forwarded to the redirecting member")
        failed = client.metrics.total("streams_query_routing_failures", reason="forward-failed")
        with pytest.raises(NotAvailableError):
            client.get("strings", keys[0])
        after = client.metrics.total("streams_query_routing_failures", reason="forward-failed")
        assert after >= failed + 1  # each routing pass counts its failed forward
        assert {auth for _, _, auth in redirecting.requests} == {f"Bearer {TOKEN}"}
        assert elsewhere.connections == 0
        assert elsewhere.requests == []

"""Interactive queries, membership and standbys (KIP-535, docs/runtime/queries.md): murmur2, standby
placement, lag reporting against the broker's offsets, bad input to the query server, and its
security (issue 16): tokens, exposure, slow clients, signed membership records, TLS. The
three-instance failover (SIGKILL the active while a client keeps querying) is a benchmark:
``python -m bench query-failover``."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from progress_control.settings import ConfigurationError, load_settings
from streams_runtime import App, StreamsBuilder
from streams_runtime.cluster import (
    LagInfo,
    MemberInfo,
    MembershipView,
    StorePartition,
    copy_placement,
)
from streams_runtime.cluster.membership_auth import (
    LEFT_MS_HEADER,
    MAC_HEADER,
    MembershipAuthenticator,
    MembershipVerdict,
    membership_key,
)
from streams_runtime.murmur2 import murmur2, partition_for_key, to_positive
from streams_runtime.queries.results import (
    InvalidKeyError,
    NotAvailableError,
    QueryError,
    UnknownStoreError,
)
from streams_runtime.queries.security import (
    QueryAddress,
    is_loopback_host,
    query_address,
    query_token,
)
from streams_runtime.record import TaskId
from streams_runtime.serdes import Integer, String
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import changelog_topic
from tests.helpers import unique_name, wait_for

TOKEN = "s3cret"  # noqa: S105 - a test token
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# What the instances derive from the token without a membership_secret (a test of the forgery
# check signs a record with it, as an insider holding the token could).
TOKEN_MEMBERSHIP_KEY = hmac.new(
    TOKEN.encode(), b"progress-control/membership-key-from-query-token/v1", hashlib.sha256
).digest()

# -- pure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Kafka's UtilsTest.testMurmur2.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_for_key_is_to_positive_mod() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError, match="positive"):
        partition_for_key(b"x", 0)


def test_standby_placement_excludes_the_owner() -> None:
    sp, task, tasks = StorePartition("s", 0), TaskId(0, 0), {0: 1}
    logged = {task: [sp]}
    now = int(time.time() * 1000)

    def member(name: str, **kw: Any) -> MemberInfo:
        return MemberInfo(name, f"{name}:1", now, 1000, **kw)

    members = {"a": member("a", active={"s": (0,)}), "b": member("b"), "c": member("c")}
    assert copy_placement(members, 1, logged, tasks)[task][0] in {"b", "c"}
    assert set(copy_placement(members, 5, logged, tasks)[task]) == {"b", "c"}
    # A restoring owner counts as the owner; nobody owning: left out (keep existing standbys).
    members["a"] = member("a", restoring={"s": (0,)})
    assert "a" not in copy_placement(members, 2, logged, tasks)[task]
    members["a"] = member("a")
    assert copy_placement(members, 1, logged, tasks) == {}


def test_member_info_json_roundtrip_and_liveness() -> None:
    info = MemberInfo(
        "i1",
        "h:1",
        1_000_000,
        1000,
        active={"s": (0, 2)},
        standby={"s": (1,)},
        lags={"s": {1: LagInfo(5, 7, 2, 30)}},
    )
    back = MemberInfo.from_json(info.to_json())
    assert back == info
    assert back.role(StorePartition("s", 1)) == "standby"
    assert back.owns(StorePartition("s", 2))
    assert info.live(1_002_999)
    assert not info.live(1_003_000)
    with pytest.raises(ValueError, match="membership"):
        MemberInfo.from_json(b'{"version": 99}')
    with pytest.raises(ValueError, match="membership"):
        MemberInfo.from_json(b"not json")


# -- against the broker --------------------------------------------------------------------------


@pytest.mark.broker
def test_librdkafka_murmur2_random_agrees(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("murmur", partitions=7)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    delivered: dict[bytes, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None
        delivered[msg.key()] = msg.partition()

    keys = [f"key-{i}".encode() for i in range(200)]
    for key in keys:
        producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery)
    producer.flush(30)
    assert {k: partition_for_key(k, 7) for k in keys} == delivered


def http_get(url: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url)  # noqa: S310 - local test server
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def produce_table(bootstrap: str, topic: str, rows: dict[Any, Any], key_serde: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in rows.items():
        producer.produce(topic, key=key_serde.serialize(key), value=String().serialize(value))
    producer.flush(30)


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("wm")})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        consumer.close()


def query_settings(bootstrap: str, application_id: str, **settings: Any) -> dict[str, Any]:
    """An instance's settings in the query tests (``settings`` override): queries served on a
    free port with a token, one standby per store partition, quick membership and failover."""
    return {
        "application_id": application_id,
        "bootstrap_servers": bootstrap,
        "commit_interval_ms": 100,
        "application_server": "127.0.0.1:0",
        "num_standby_replicas": 1,
        "membership_interval_ms": 300,
        "query_token": TOKEN,
        "consumer": {"session.timeout.ms": "6000"},
        **settings,
    }


@contextlib.contextmanager
def table_instances(
    bootstrap: str,
    create_topic: Callable[..., str],
    tmp_path: Path,
    count: int = 2,
    **settings: Any,
) -> Iterator[tuple[list[App], str, str, str]]:
    """``count`` in-process instances of a topology with a String-keyed and an Integer-keyed
    table, one standby per store partition, a query token (``settings`` override)."""
    strings, ints = create_topic("strings", partitions=2), create_topic("ints", partitions=2)
    application_id = unique_name("queries")
    options = query_settings(bootstrap, application_id, **settings)
    apps = []
    for n in range(count):
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
        builder.table(strings, store_name="strings")
        builder.table(ints, key_serde=Integer(), store_name="ints")
        apps.append(App(builder, state_dir=tmp_path / f"state-{n}", **options))
    for app in apps:
        app.start()
    try:
        for app in apps:
            assert app.wait_until("RUNNING", 60), app.error
        yield apps, strings, ints, application_id
    finally:
        for app in apps:
            app.close()


@pytest.fixture
def two_instances(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[list[App], str, str, str]]:
    """Two instances (see :func:`table_instances`)."""
    with table_instances(kafka_bootstrap, create_topic, tmp_path) as instances:
        yield instances


def all_partitions_placed(apps: list[App]) -> bool:
    """Every partition of both stores active on one instance and standby on the other."""
    lags = [app.all_local_store_partition_lags() for app in apps]
    for store in ("strings", "ints"):
        for partition in range(2):
            holders = [lag for lag in lags if partition in lag.get(store, {})]
            if len(holders) != 2:
                return False
    return True


@pytest.mark.broker
def test_lags_match_the_broker_and_queries_route(  # noqa: PLR0915 - one scenario
    two_instances: tuple[list[App], str, str, str], kafka_bootstrap: str
) -> None:
    apps, strings, ints, application_id = two_instances
    rows = {f"k{i}": f"v{i}" for i in range(40)}
    produce_table(kafka_bootstrap, strings, rows, String())
    produce_table(kafka_bootstrap, ints, {i: f"int-{i}" for i in range(10)}, Integer())
    wait_for(lambda: all_partitions_placed(apps), timeout_s=60, message="actives and standbys")

    streak = [0]

    def balanced() -> bool:
        # One instance can hold all 4 actives and the other all 4 standbys for a while (the
        # second one joins the group late): 8 caught-up copies, but not the spread asserted on.
        return all(
            app.queries is not None and len(app.queries.stores.active_tasks()) == 2 for app in apps
        )

    def caught_up() -> bool:
        # Rebalances move tasks for a while after both instances joined: wait until all 8
        # copies match the broker in several polls in a row.
        copies = sum(len(p) for app in apps for p in app.all_local_store_partition_lags().values())
        streak[0] = streak[0] + 1 if copies == 8 and balanced() and matching() else 0
        return streak[0] >= 5

    def matching() -> bool:
        for app in apps:
            for store, parts in app.all_local_store_partition_lags().items():
                topic = changelog_topic(application_id, store)
                for partition, lag in parts.items():
                    high = high_watermark(kafka_bootstrap, topic, partition)
                    if high == 0 or lag.offset_lag != 0 or lag.end_offset != high:
                        return False
        return True

    wait_for(caught_up, timeout_s=60, interval_s=0.3, message="lags matching the broker")
    # Independently: each reported copy's offsets equal the changelog's high watermark.
    total = 0
    for app in apps:
        for store, parts in app.all_local_store_partition_lags().items():
            for partition, lag in parts.items():
                high = high_watermark(
                    kafka_bootstrap, changelog_topic(application_id, store), partition
                )
                assert lag == LagInfo(high, high, 0, 0)
                total += 1
    assert total == 8  # 2 stores x 2 partitions x (active + standby)

    # Any instance answers any key, from the active copy; metadata agrees with the partitioner.
    for app in apps:
        for key, value in list(rows.items())[:10]:
            result = app.get("strings", key)
            assert (result.found, result.value, result.served_by, result.offset_lag) == (
                True,
                value,
                "active",
                0,
            )
            meta = app.query_metadata_for_key("strings", key)
            assert meta.partition == partition_for_key(key.encode(), 2)
            assert meta.partition == result.partition
            assert meta.active_host == result.host
            assert len(meta.standby_hosts) == 1
            assert meta.standby_hosts[0] != meta.active_host
        assert app.get("ints", 7).value == "int-7"
        missing = app.get("strings", "no-such-key")
        assert not missing.found
        assert missing.value is None
    # Over HTTP, with the token, through either instance.
    for app in apps:
        status, body = http_get(f"http://{app.query_endpoint}/stores/strings/keys/k3")
        assert (status, body["value"], body["served_by"]) == (200, "v3", "active")
        status, body = http_get(f"http://{app.query_endpoint}/stores/ints/keys/7?allow_stale=true")
        assert (status, body["value"]) == (200, "int-7")
        status, body = http_get(f"http://{app.query_endpoint}/metadata/strings/k3")
        assert status == 200
        assert body["partition"] == partition_for_key(b"k3", 2)
        status, body = http_get(f"http://{app.query_endpoint}/lags")
        assert status == 200
        assert set(body["lags"]) == {"strings", "ints"}
        status, body = http_get(f"http://{app.query_endpoint}/stores/strings/keys/nope")
        assert (status, body["found"], body["value"]) == (200, False, None)
        assert "error" not in body
    # Stale reads from the local standby copy, within a bound.
    for app in apps:
        for key, value in rows.items():
            meta = app.query_metadata_for_key("strings", key)
            if meta.active_host != app.query_endpoint:
                assert app.queries is not None
                local = app.queries.get_local("strings", key, allow_stale=True, max_lag=0)
                assert (local.served_by, local.value, local.offset_lag) == ("standby", value, 0)
                assert local.stale
                with pytest.raises(NotAvailableError):
                    app.queries.get_local("strings", key)  # not the active here
                break
    text = apps[0].metrics.exposition().decode()
    assert 'streams_queries_served_total{role="active"}' in text
    assert "streams_standby_lag_records" in text


@pytest.mark.broker
def test_bad_queries_get_clean_4xx(two_instances: tuple[list[App], str, str, str]) -> None:
    apps, *_ = two_instances
    app = apps[0]
    base = f"http://{app.query_endpoint}"
    with pytest.raises(UnknownStoreError) as unknown:
        app.get("nope", "k")
    assert (unknown.value.code, unknown.value.store) == ("unknown-store", "nope")
    assert unknown.value.queryable == ["ints", "strings"]
    assert "queryable: ['ints', 'strings']" in str(unknown.value)
    assert "name=" in str(unknown.value)  # how a store gets a name
    with pytest.raises(InvalidKeyError):
        app.get("strings", 5)
    with pytest.raises(InvalidKeyError):
        app.get("ints", "five")
    with pytest.raises(InvalidKeyError):
        app.query_metadata_for_key("ints", 1.5)
    cases = [
        ("/stores/nope/keys/k", TOKEN, 404, "unknown-store"),
        ("/metadata/nope/k", TOKEN, 404, "unknown-store"),
        ("/stores/ints/keys/abc", TOKEN, 400, "invalid-key"),
        ("/metadata/ints/abc", TOKEN, 400, "invalid-key"),
        ("/stores/strings/keys/k?max_lag=-1", TOKEN, 400, "bad-request"),
        ("/stores/strings/keys/k?max_lag=lots", TOKEN, 400, "bad-request"),
        ("/stores/strings/keys/k?allow_stale=maybe", TOKEN, 400, "bad-request"),
        ("/stores/strings/k", TOKEN, 400, "bad-request"),
        ("/elsewhere", TOKEN, 404, "no-such-path"),
        ("/stores/strings/keys/k", None, 401, "unauthorized"),
        ("/stores/strings/keys/k", "wrong", 401, "unauthorized"),
        ("/lags", "wrong", 401, "unauthorized"),
    ]
    for path, token, status, error in cases:
        got, body = http_get(base + path, token)
        assert (got, body["error"]) == (status, error), (path, body)
        assert "message" in body
    got, body = http_get(base + "/stores/nope/keys/k")
    assert (body["store"], body["queryable"]) == ("nope", ["ints", "strings"])
    # Garbage on the socket does not take the server down either.
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=5) as sock:
        sock.sendall(b"\x00\x01garbage\r\n\r\n")
        sock.recv(1024)
    status, body = http_get(f"{base}/health")
    assert status == 200
    assert body["status"] == "ok"
    assert app.state == "RUNNING"


# -- security: authentication, exposure, slow clients, membership, TLS (issue 16) ---------------


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.5.0.1", "localhost", "LOCALHOST", "::1", "[::1]"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "", "::", "10.0.0.5", "example.com", "::ffff:10.0.0.1"):  # noqa: S104
        assert not is_loopback_host(host), host
    assert is_loopback_host("::ffff:127.0.0.1")


def test_one_bind_host_rule_for_the_check_and_the_bind() -> None:
    def address(**settings: Any) -> QueryAddress | None:
        return query_address(
            load_settings(
                RuntimeSettings, application_id="a", bootstrap_servers="b:9092", **settings
            )
        )

    assert address() is None
    assert address(application_server="10.0.0.5:8080", query_token=TOKEN) == QueryAddress(
        "10.0.0.5", "10.0.0.5", 8080
    )
    assert address(application_server="app-0.svc:0", query_bind_host="127.0.0.1") == QueryAddress(
        "app-0.svc", "127.0.0.1", 0
    )
    # The check refuses what the app would bind: the bind host, not the advertised one.
    assert "query_token" in settings_error(
        application_server="127.0.0.1:0",
        query_bind_host="0.0.0.0",  # noqa: S104
    )
    load_settings(
        RuntimeSettings,
        application_id="a",
        bootstrap_servers="b:9092",
        application_server="app-0.svc:0",
        query_bind_host="127.0.0.1",
    )


def settings_error(**settings: Any) -> str:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(RuntimeSettings, application_id="a", bootstrap_servers="b:9092", **settings)
    return str(caught.value)


def test_query_settings_errors_name_the_setting(tmp_path: Path) -> None:
    message = settings_error(query_token="t", query_token_file=tmp_path / "t")  # noqa: S106
    assert "query_token_file" in message
    message = settings_error(membership_secret="too-short")  # noqa: S106
    assert "membership_secret" in message
    assert "16 bytes" in message
    message = settings_error(query_tls_key_file=tmp_path / "key.pem")
    assert "query_tls_cert_file" in message
    message = settings_error(query_tls_cert_file=tmp_path / "missing.pem")
    assert "query_tls_cert_file" in message
    message = settings_error(query_token_file=tmp_path / "missing")
    assert "query_token_file" in message
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    settings = load_settings(
        RuntimeSettings,
        application_id="a",
        bootstrap_servers="b:9092",
        application_server="10.1.2.3:8080",
        query_token_file=token_file,
    )
    assert query_token(settings) == "from-a-file"
    assert membership_key(settings) not in {None, b"from-a-file"}  # derived, not the token
    own = load_settings(
        RuntimeSettings, application_id="a", bootstrap_servers="b:9092", membership_secret="x" * 16
    )
    assert membership_key(own) == b"x" * 16
    assert "x" * 16 not in repr(own)  # a SecretStr


def test_membership_records_are_authenticated() -> None:
    auth = MembershipAuthenticator(b"k" * 16, "app-membership")
    key, value = b"i1", MemberInfo("i1", "h:1", 1000, 1000, active={"s": (0,)}).to_json()
    headers = auth.headers(key, value)
    assert auth.verify(key, value, headers).reason is None
    assert auth.verify(key, value, dict(headers)).reason is None
    # Any change to the value, the key, the topic or the secret breaks it.
    assert auth.verify(key, value.replace(b"h:1", b"h:2"), headers).reason == "bad-signature"
    assert auth.verify(b"i2", value, headers).reason == "bad-signature"
    other_app = MembershipAuthenticator(b"k" * 16, "other-membership")
    assert other_app.verify(key, value, headers).reason == "bad-signature"
    assert MembershipAuthenticator(b"x" * 16, "app-membership").verify(
        key, value, headers
    ) == MembershipVerdict("bad-signature")
    assert auth.verify(key, value, None).reason == "unsigned"
    assert auth.verify(key, value, [(MAC_HEADER, b"zz")]).reason == "bad-signature"
    assert auth.verify(key, value, headers + headers).reason == "unsigned"  # ambiguous
    # Tombstones sign the time of the leave.
    tomb = auth.headers(key, None, 5000)
    assert auth.verify(key, None, tomb) == MembershipVerdict(None, 5000)
    moved = [(k, b"9000" if k == LEFT_MS_HEADER else v) for k, v in tomb]
    assert auth.verify(key, None, moved).reason == "bad-signature"
    assert auth.verify(key, None, tomb[:1]).reason == "bad-signature"
    assert auth.verify(key, value, tomb).reason == "bad-signature"


def test_membership_view_refuses_older_records() -> None:
    view = MembershipView()
    new, old = MemberInfo("i1", "h:1", 2000, 1000), MemberInfo("i1", "h:9", 1000, 1000)
    assert view.update("i1", new)
    assert not view.update("i1", old)  # a replay of an earlier (valid) record
    assert view.members()["i1"] == new
    assert not view.update("i1", None, left_ms=1500)  # an older leave
    assert "i1" in view.members()
    assert view.update("i1", None, left_ms=2500)
    assert view.members() == {}


@pytest.mark.broker
def test_non_loopback_bind_needs_a_token_or_an_explicit_opt_out(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = create_topic("exposed")

    def app(**settings: Any) -> App:
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
        builder.table(topic, store_name="t")
        return App(
            builder,
            application_id=unique_name("exposed"),
            bootstrap_servers=kafka_bootstrap,
            state_dir=tmp_path / unique_name("state"),
            **settings,
        )

    for settings in (
        {"application_server": "0.0.0.0:0"},
        {"application_server": "127.0.0.1:0", "query_bind_host": "0.0.0.0"},  # noqa: S104
        {"application_server": "10.0.0.5:0"},
    ):
        with pytest.raises(ConfigurationError) as caught:
            app(**settings)
        message = str(caught.value)
        assert "query_token" in message, message
        assert "PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN" in message
        assert "query_allow_unauthenticated" in message
    # With a token, or the explicit opt-out, it starts and serves on every interface.
    opened: list[tuple[dict[str, Any], str | None]] = [
        ({"query_token": TOKEN}, TOKEN),
        ({"query_allow_unauthenticated": True}, None),
    ]
    for options, token in opened:
        running = app(application_server="0.0.0.0:0", **options)
        running.start()
        try:
            assert running.wait_until("RUNNING", 60), running.error
            assert running.query_endpoint is not None
            port = running.query_endpoint.rsplit(":", 1)[1]
            url = f"http://127.0.0.1:{port}/stores/t/keys/nope"
            # 503 until the task is assigned; then "not found" is the answer.
            wait_for(lambda: http_get(url, token)[0] == 200, timeout_s=60, message="an answer")  # noqa: B023
            assert http_get(url, token)[1]["found"] is False
            if token is not None:
                assert http_get(f"http://127.0.0.1:{port}/stores/t/keys/nope", None)[0] == 401
        finally:
            running.close()


@pytest.mark.broker
def test_unauthenticated_and_wrong_token_reads_are_refused(
    two_instances: tuple[list[App], str, str, str], kafka_bootstrap: str
) -> None:
    apps, strings, _ints, _ = two_instances
    produce_table(kafka_bootstrap, strings, {"k1": "v1"}, String())
    app = apps[0]
    base = f"http://{app.query_endpoint}"
    wait_for(
        lambda: http_get(f"{base}/stores/strings/keys/k1")[1].get("found"),
        timeout_s=60,
        message="k1 answered with the token",
    )
    for path in ("/stores/strings/keys/k1", "/metadata/strings/k1", "/lags"):
        for token in (None, "wrong", TOKEN + "x", TOKEN[:-1], ""):
            status, body = http_get(base + path, token)
            assert (status, body["error"]) == (401, "unauthorized"), (path, token)
            assert "v1" not in json.dumps(body)
    # Other schemes and a token without a scheme are refused too.
    for header in (f"Basic {TOKEN}", TOKEN, f"Bearer{TOKEN}"):
        request = urllib.request.Request(f"{base}/stores/strings/keys/k1")  # noqa: S310
        request.add_header("Authorization", header)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310
        assert caught.value.code == 401
        assert caught.value.headers["WWW-Authenticate"] == "Bearer"
    assert app.metrics.total("streams_query_unauthorized") >= 18
    # Liveness needs no token and tells nothing; with it, the instance.
    assert http_get(f"{base}/health", None) == (200, {"status": "ok"})
    assert http_get(f"{base}/health")[1]["instance_id"] == app.instance_id
    status, body = http_get(f"{base}/stores/strings/keys/k1", f"{TOKEN}  ")  # spaces are trimmed
    assert (status, body["value"]) == (200, "v1")


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


@pytest.mark.broker
def test_idle_and_slow_connections_do_not_starve_queries(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    """200 connections that never finish a request (100 silent, 100 sending half a header)
    against a server with 2 workers and a cap of 64 connections: a real query is answered,
    the cap holds, and every idle connection is closed after the request timeout."""
    with table_instances(
        kafka_bootstrap,
        create_topic,
        tmp_path,
        count=1,
        num_standby_replicas=0,
        query_workers=2,
        query_max_connections=64,
        query_request_timeout_ms=5000,
    ) as (apps, strings, _ints, _):
        app = apps[0]
        produce_table(kafka_bootstrap, strings, {"k1": "v1"}, String())
        url = f"http://{app.query_endpoint}/stores/strings/keys/k1"
        wait_for(lambda: http_get(url)[1].get("found"), timeout_s=60, message="k1 answered")
        host, port = str(app.query_endpoint).rsplit(":", 1)
        idle: list[socket.socket] = []
        try:
            for n in range(200):
                sock = socket.create_connection((host, int(port)), timeout=10)
                if n % 2:
                    sock.sendall(b"GET /stores/strings/keys/k1 HTTP/1.1\r\nHost: x\r\n")
                idle.append(sock)

            def connections() -> float:
                return app.metrics.registry.get_sample_value("streams_query_connections") or 0

            # The server is full of idle connections (and held the cap)...
            wait_for(lambda: connections() == 64, timeout_s=30, message="64 open connections")
            # ... and still answers, promptly, over a new connection.
            status, body = http_get(url)  # a 5 s client timeout
            assert (status, body["value"], body["served_by"]) == (200, "v1", "active")
            assert connections() <= 64
            evicted = app.metrics.total("streams_query_connections_closed", reason="evicted")
            assert evicted >= 200 - 64
            # Keep-alive: two requests on one connection, as HTTP/1.1 clients send them.
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            for _ in range(2):
                conn.request("GET", "/stores/strings/keys/k1", headers=AUTH)
                response = conn.getresponse()
                assert (response.status, json.loads(response.read())["value"]) == (200, "v1")
            conn.close()
            # Connections that never complete a request are closed by the server.
            wait_for(
                lambda: all(_closed_by_server(s) for s in idle),
                timeout_s=60,
                interval_s=0.5,
                message="idle connections closed by the server",
            )
            assert app.metrics.total("streams_query_connections_closed", reason="timeout") >= 1
            assert http_get(url)[0] == 200
        finally:
            for sock in idle:
                sock.close()


class _Listener:
    """A tiny HTTP server posing as a forged member: records every request it gets."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.requests.append(f"{self.path} {self.headers.get('Authorization')}")
                data = b'{"error": "Forged", "message": "forged member"}'
                self.send_response(503)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _forged(instance_id: str, endpoint: str, partitions: int = 2) -> bytes:
    every = {"strings": tuple(range(partitions)), "ints": tuple(range(partitions))}
    now = int(time.time() * 1000)
    # Live for an hour, heartbeat ahead of any real one: if believed, it would win.
    return MemberInfo(instance_id, endpoint, now + 600_000, 3_600_000, active=every).to_json()


@pytest.mark.broker
def test_forged_members_are_ignored_and_never_get_queries(  # noqa: PLR0915 - one scenario
    two_instances: tuple[list[App], str, str, str], kafka_bootstrap: str
) -> None:
    apps, strings, _ints, application_id = two_instances
    rows = {f"k{i}": f"v{i}" for i in range(20)}
    produce_table(kafka_bootstrap, strings, rows, String())
    wait_for(lambda: all_partitions_placed(apps), timeout_s=60, message="actives and standbys")
    streak = [0]

    def readable() -> bool:
        # Through both instances, in 3 polls in a row: tasks move for a while after both joined.
        try:
            ok = all(app.get("strings", k).found for app in apps for k in rows)
        except QueryError:
            ok = False
        streak[0] = streak[0] + 1 if ok else 0
        return streak[0] >= 3

    wait_for(readable, timeout_s=60, interval_s=0.2, message="every row readable")
    topic = f"{application_id}-membership"
    attacker = _Listener()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    try:
        victim = apps[1].instance_id
        wrong = MembershipAuthenticator(b"not-the-shared-secret", topic)
        forged = [
            # A new member claiming every partition, unsigned; one sorting first, signed with
            # another key; and the real second instance's id moved to the attacker's host.
            (b"0-forged", _forged("0-forged", attacker.endpoint), None),
            (b"00-forged", _forged("00-forged", attacker.endpoint), "wrong-key"),
            (victim.encode(), _forged(victim, attacker.endpoint), None),
            (victim.encode(), None, None),  # an unsigned tombstone of a real member
        ]
        for record_key, record_value, signer in forged:
            headers = wrong.headers(record_key, record_value, 0) if signer else None
            producer.produce(topic, key=record_key, value=record_value, headers=headers)
        producer.flush(30)

        def rejected(app: App, reason: str) -> float:
            return app.metrics.total("streams_membership_records_rejected", reason=reason)

        wait_for(
            lambda: all(
                rejected(app, "unsigned") == 3 and rejected(app, "bad-signature") == 1
                for app in apps
            ),
            timeout_s=30,
            message="forged records read and rejected by both instances",
        )
        for app in apps:
            assert app.metrics.total("streams_membership_records_rejected") == len(forged)
            assert app.queries is not None
            assert set(app.queries._members()) == {a.instance_id for a in apps}
        # Every key, through either instance, is answered by the real instances; metadata never
        # names the attacker; and the attacker never hears a thing.
        for app in apps:
            for key, value in rows.items():
                result = app.get("strings", key)
                assert (result.value, result.served_by) == (value, "active")
                assert result.instance_id in {a.instance_id for a in apps}
                meta = app.query_metadata_for_key("strings", key)
                assert attacker.endpoint not in [meta.active_host, *meta.standby_hosts]
            status, body = http_get(f"http://{app.query_endpoint}/stores/strings/keys/k3")
            assert (status, body["value"]) == (200, "v3")
        assert attacker.requests == []
        # A replayed valid record (the victim's first one, headers and all) is refused: it is
        # older than the record held.
        reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("replay")})
        try:
            reader.assign([TopicPartition(topic, 0, 0)])
            first = wait_for(
                lambda: next(
                    (
                        m
                        for m in reader.consume(100, 1)
                        if m.error() is None and m.key() == victim.encode() and m.value()
                    ),
                    None,
                ),
                timeout_s=30,
                message="the victim's first membership record",
            )
        finally:
            reader.close()
        producer.produce(topic, key=first.key(), value=first.value(), headers=first.headers())
        producer.flush(30)
        wait_for(
            lambda: (
                apps[0].metrics.total("streams_membership_records_rejected", reason="replayed") >= 1
            ),
            timeout_s=30,
            message="the replayed record refused",
        )
        assert attacker.requests == []
        # Control: a record signed with the shared secret *is* believed, so the attacker would
        # get forwarded queries (with the token) if the check were not there.
        # A key that one instance (the client) forwards to the other (its owner, impersonated):
        # which instance owns which partition depends on the assignment.
        endpoints = {a.query_endpoint: a for a in apps}

        def forwarded_key() -> tuple[App, App, str] | None:
            for client in apps:
                for key in rows:
                    owner = endpoints.get(client.query_metadata_for_key("strings", key).active_host)
                    if owner is not None and owner is not client:
                        return client, owner, key
            return None

        client, owner, routed = wait_for(forwarded_key, timeout_s=60, message="a forwarded key")
        real = MembershipAuthenticator(TOKEN_MEMBERSHIP_KEY, topic)
        signed = _forged(owner.instance_id, attacker.endpoint)
        owner_key = owner.instance_id.encode()
        producer.produce(
            topic, key=owner_key, value=signed, headers=real.headers(owner_key, signed)
        )
        producer.flush(30)

        def forwarded_to_attacker() -> bool:
            with contextlib.suppress(QueryError):
                client.get("strings", routed)
            return bool(attacker.requests)

        wait_for(forwarded_to_attacker, timeout_s=30, message="a signed forgery believed")
        assert f"Bearer {TOKEN}" in attacker.requests[0]
    finally:
        attacker.close()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("neither the cryptography package nor the openssl CLI is available")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.broker
def test_tls_round_trip_and_forwarding_over_https(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    cert, key = _self_signed(tmp_path)
    tls: dict[str, Any] = {
        "query_tls_cert_file": cert,
        "query_tls_key_file": key,
        "query_tls_ca_file": cert,
    }
    with table_instances(kafka_bootstrap, create_topic, tmp_path, **tls) as instances:
        apps, strings, _ints, _ = instances
        rows = {f"k{i}": f"v{i}" for i in range(20)}
        produce_table(kafka_bootstrap, strings, rows, String())
        wait_for(lambda: all_partitions_placed(apps), timeout_s=60, message="actives, standbys")
        client = ssl.create_default_context(cafile=str(cert))

        def https_get(url: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
            request = urllib.request.Request(url)  # noqa: S310 - a local test server
            if token is not None:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=10, context=client) as response:  # noqa: S310
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        def forwarded() -> dict[str, Any] | None:
            # A key whose active is the other instance, asked here: forwarded over HTTPS.
            for app in apps:
                for k, value in rows.items():
                    meta = app.query_metadata_for_key("strings", k)
                    if meta.active_host in {None, app.query_endpoint}:
                        continue
                    status, body = https_get(
                        f"https://{app.query_endpoint}/stores/strings/keys/{k}"
                    )
                    if status == 200 and body["found"] and body["instance_id"] != app.instance_id:
                        assert (body["value"], body["served_by"]) == (value, "active")
                        return body
            return None

        wait_for(forwarded, timeout_s=60, interval_s=0.3, message="a query forwarded over https")
        base = f"https://{apps[0].query_endpoint}"
        assert https_get(f"{base}/stores/strings/keys/k1", None)[0] == 401
        # k1's active may still be processing its row: wait for it, over HTTPS.
        wait_for(
            lambda: https_get(f"{base}/stores/strings/keys/k1")[1].get("value") == "v1",
            timeout_s=30,
            message="k1 answered over https",
        )
        # Plain HTTP to the TLS port gets no answer; an unverified client is refused by its own
        # side (the certificate is not in the system's CAs); the server keeps serving.
        with pytest.raises((OSError, http.client.HTTPException)):
            http_get(f"http://{apps[0].query_endpoint}/health", None)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{base}/health", timeout=10)  # noqa: S310
        assert apps[0].metrics.total("streams_query_connections_closed", reason="tls") >= 1
        assert https_get(f"{base}/health", None) == (200, {"status": "ok"})

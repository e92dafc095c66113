"""Interactive queries, membership and standbys (KIP-535, DESIGN §5): murmur2, standby
placement, lag reporting against the broker's offsets and bad input to the query server. The
three-instance failover (SIGKILL the active while a client keeps querying) is a benchmark:
``python -m bench query-failover``."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams_runtime import App, StreamsBuilder
from streams_runtime.murmur2 import murmur2, partition_for_key, to_positive
from streams_runtime.queries import InvalidKeyError, NotAvailableError, UnknownStoreError
from streams_runtime.replication import (
    LagInfo,
    MemberInfo,
    StorePartition,
    rendezvous_standbys,
    standby_placement,
)
from streams_runtime.serdes import Integer, String
from streams_runtime.state import changelog_topic
from tests.helpers import unique_name, wait_for

TOKEN = "s3cret"  # noqa: S105 - a test token

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


def test_rendezvous_placement_is_deterministic_and_stable() -> None:
    sp = StorePartition("store", 3)
    instances = [f"i{n}" for n in range(6)]
    chosen = rendezvous_standbys(sp, instances, 2)
    assert len(chosen) == 2
    assert rendezvous_standbys(sp, list(reversed(instances)), 2) == chosen
    # Removing an instance that holds no standby moves nothing.
    other = next(i for i in instances if i not in chosen)
    assert rendezvous_standbys(sp, [i for i in instances if i != other], 2) == chosen
    # Removing a chosen one keeps the other.
    assert chosen[1] in rendezvous_standbys(sp, [i for i in instances if i != chosen[0]], 2)
    assert rendezvous_standbys(sp, instances, 0) == []
    # Different partitions spread over instances.
    firsts = {rendezvous_standbys(StorePartition("store", p), instances, 1)[0] for p in range(50)}
    assert len(firsts) > 3


def test_standby_placement_excludes_the_owner() -> None:
    sp = StorePartition("s", 0)
    now = int(time.time() * 1000)

    def member(name: str, **kw: Any) -> MemberInfo:
        return MemberInfo(name, f"{name}:1", now, 1000, **kw)

    members = {"a": member("a", active={"s": (0,)}), "b": member("b"), "c": member("c")}
    placement = standby_placement(sp, members, 1)
    assert placement is not None
    assert placement[0] in {"b", "c"}
    assert set(standby_placement(sp, members, 5) or []) == {"b", "c"}
    # A restoring owner counts as the owner; nobody owning: None (keep existing standbys).
    members["a"] = member("a", restoring={"s": (0,)})
    assert "a" not in (standby_placement(sp, members, 2) or ["a"])
    members["a"] = member("a")
    assert standby_placement(sp, members, 1) is None


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


@pytest.fixture
def two_instances(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[list[App], str, str, str]]:
    """Two in-process instances of a topology with a String-keyed and an Integer-keyed table,
    one standby per store partition, a query token."""
    strings, ints = create_topic("strings", partitions=2), create_topic("ints", partitions=2)
    application_id = unique_name("queries")
    apps = []
    for n in range(2):
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
        builder.table(strings, store_name="strings")
        builder.table(ints, key_serde=Integer(), store_name="ints")
        apps.append(
            App(
                builder,
                application_id=application_id,
                bootstrap_servers=kafka_bootstrap,
                state_dir=tmp_path / f"state-{n}",
                commit_interval_ms=100,
                application_server="127.0.0.1:0",
                num_standby_replicas=1,
                membership_interval_ms=300,
                query_token=TOKEN,
                consumer={"session.timeout.ms": "6000"},
            )
        )
    for app in apps:
        app.start()
    try:
        for app in apps:
            assert app.wait_until("RUNNING", 60)
        yield apps, strings, ints, application_id
    finally:
        for app in apps:
            app.close()


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
            app.queries is not None and len(app.queries.thread.active_tasks) == 2 for app in apps
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
        assert status == 404
        assert body["found"] is False
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
    with pytest.raises(UnknownStoreError):
        app.get("nope", "k")
    with pytest.raises(InvalidKeyError):
        app.get("strings", 5)
    with pytest.raises(InvalidKeyError):
        app.get("ints", "five")
    with pytest.raises(InvalidKeyError):
        app.query_metadata_for_key("ints", 1.5)
    cases = [
        ("/stores/nope/keys/k", TOKEN, 404, "UnknownStoreError"),
        ("/metadata/nope/k", TOKEN, 404, "UnknownStoreError"),
        ("/stores/ints/keys/abc", TOKEN, 400, "InvalidKeyError"),
        ("/metadata/ints/abc", TOKEN, 400, "InvalidKeyError"),
        ("/stores/strings/keys/k?max_lag=-1", TOKEN, 400, None),
        ("/stores/strings/keys/k?max_lag=lots", TOKEN, 400, None),
        ("/stores/strings/keys/k?allow_stale=maybe", TOKEN, 400, None),
        ("/stores/strings/k", TOKEN, 400, None),
        ("/elsewhere", TOKEN, 404, None),
        ("/stores/strings/keys/k", None, 401, "Unauthorized"),
        ("/stores/strings/keys/k", "wrong", 401, "Unauthorized"),
        ("/lags", "wrong", 401, "Unauthorized"),
    ]
    for path, token, status, error in cases:
        got, body = http_get(base + path, token)
        assert got == status, (path, body)
        assert "message" in body
        if error:
            assert body["error"] == error
    # Garbage on the socket does not take the server down either.
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=5) as sock:
        sock.sendall(b"\x00\x01garbage\r\n\r\n")
        sock.recv(1024)
    status, body = http_get(f"{base}/health")
    assert status == 200
    assert body["status"] == "ok"
    assert app.state == "RUNNING"

"""Range queries through ``App`` and the query server, against the broker
(docs/runtime/queries.md#ranges): a key range, every key and a prefix of a table spread over two
instances, gathered from both partitions' actives (every key exactly once, in key order), or
from a standby; a window store's windows of a key and of every key; a session store's sessions
of a key; and the errors of a read the store does not answer."""

from __future__ import annotations

import functools
import urllib.parse
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streams_runtime import App, SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.queries import (
    InvalidKeyError,
    QueryError,
    RangeResult,
    UnsupportedQueryError,
)
from streams_runtime.queries.reads import KeyRange
from streams_runtime.serdes import Bytes, Integer, String
from tests.helpers import unique_name, wait_for
from tests.streams_runtime.queries.test_queries import (
    all_partitions_placed,
    http_get,
    produce_table,
    table_instances,
)

ROWS = {f"k{i}": f"v{i}" for i in range(40)}
T0 = 1_700_000_000_000  # the windows' times: a round number of windows


def _keys(result: RangeResult | dict[str, Any]) -> list[Any]:
    entries = result.entries if isinstance(result, RangeResult) else result["entries"]
    return [entry["key"] for entry in entries]


def _by_bytes(keys: list[str]) -> list[str]:
    return sorted(keys, key=str.encode)


def _spread(app: App, store: str, count: int) -> RangeResult | None:
    """Every entry of ``store`` read through ``app`` while its two partitions are active on two
    instances (rebalances may still move them: no answer meanwhile)."""
    try:
        result = app.all(store)
    except QueryError:
        return None
    served = {(p.instance_id, p.served_by) for p in result.partitions}
    if len(result.entries) != count or len(served) != 2 or result.stale:
        return None
    return result


def caught_up_standby(app: App, store: str, partition: int) -> RangeResult:
    """Every entry of ``store``'s ``partition`` read from ``app``'s standby copy of it, once
    that copy caught up (lag 0)."""

    def read() -> RangeResult | None:
        assert app.queries is not None
        try:
            return app.queries.range_local(
                store, KeyRange(), [partition], allow_stale=True, max_lag=0
            )
        except QueryError:
            return None

    return wait_for(read, timeout_s=30, message=f"a caught-up standby of {store}/{partition}")


@pytest.mark.broker
def test_a_table_spread_over_two_instances_reads_every_key_once(  # noqa: PLR0915 - one scenario
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    with table_instances(kafka_bootstrap, create_topic, tmp_path) as (apps, strings, ints, _):
        produce_table(kafka_bootstrap, strings, ROWS, String())
        produce_table(kafka_bootstrap, ints, {i: f"int-{i}" for i in range(10)}, Integer())
        wait_for(lambda: all_partitions_placed(apps), timeout_s=60, message="actives, standbys")
        for store, count in (("strings", len(ROWS)), ("ints", 10)):
            wait_for(functools.partial(_spread, apps[0], store, count), timeout_s=60, message=store)
        ordered = _by_bytes(list(ROWS))
        for app in apps:
            everything = app.all("strings")
            assert _keys(everything) == ordered  # each key once, in key order
            first = everything.entries[0]
            assert (first["key"], first["value"], type(first["timestamp"])) == ("k0", "v0", int)
            assert [p.partition for p in everything.partitions] == [0, 1]
            assert len({p.instance_id for p in everything.partitions}) == 2
            assert {p.served_by for p in everything.partitions} == {"active"}
            assert _keys(app.all("strings", descending=True)) == ordered[::-1]
            in_range = [k for k in ordered if b"k1" <= k.encode() <= b"k3"]
            assert _keys(app.range("strings", "k1", "k3")) == in_range
            assert _keys(app.range("strings", "k1", "k3", descending=True)) == in_range[::-1]
            assert _keys(app.range("strings", None, "k1")) == ["k0", "k1"]
            assert _keys(app.range("strings", "k8", None)) == [k for k in ordered if k >= "k8"]
            assert app.range("strings", "k3", "k1").entries == []  # reversed bounds: nothing
            assert _keys(app.prefix_scan("strings", "k1")) == [
                k for k in ordered if k.startswith("k1")
            ]
            # The prefix serialized by a serde of its own (Kafka Streams' prefixKeySerializer).
            assert _keys(app.prefix_scan("strings", b"k3", Bytes())) == [
                k for k in ordered if k.startswith("k3")
            ]
            assert _keys(app.range("ints", 2, 5)) == [2, 3, 4, 5]
            one = app.range("strings", partitions=[1])
            assert [p.partition for p in one.partitions] == [1]
            assert 0 < len(one.entries) < len(ROWS)
        # Over HTTP, through either instance.
        for app in apps:
            base = f"http://{app.query_endpoint}/stores"
            status, body = http_get(f"{base}/strings/range?from=k1&to=k3")
            assert (status, _keys(body)) == (200, in_range)
            assert [p["served_by"] for p in body["partitions"]] == ["active", "active"]
            status, body = http_get(f"{base}/strings/all?descending=true")
            assert (status, _keys(body)) == (200, ordered[::-1])
            status, body = http_get(f"{base}/strings/range")
            assert (status, _keys(body)) == (200, ordered)
            status, body = http_get(f"{base}/strings/prefix?prefix=k2")
            assert (status, _keys(body)) == (200, [k for k in ordered if k.startswith("k2")])
            status, body = http_get(f"{base}/ints/range?from=7")
            assert (status, _keys(body)) == (200, [7, 8, 9])
        # A standby answers its partition when stale reads are allowed.
        app = apps[0]
        assert app.queries is not None
        active_here = {
            p.partition for p in app.all("strings").partitions if p.instance_id == app.instance_id
        }
        [standby] = {0, 1} - active_here
        from_active = apps[1].range("strings", partitions=[standby])
        stale = caught_up_standby(app, "strings", standby)
        assert stale.entries == from_active.entries
        assert [(p.served_by, p.offset_lag) for p in stale.partitions] == [("standby", 0)]
        assert stale.stale
        status, body = http_get(
            f"http://{app.query_endpoint}/stores/strings/range?local=true&partitions={standby}"
            "&allow_stale=true"
        )
        assert (status, body["partitions"][0]["served_by"], body["stale"]) == (200, "standby", True)
        status, body = http_get(
            f"http://{app.query_endpoint}/stores/strings/range?local=true&partitions={standby}"
        )
        assert (status, body["error"]) == (503, "not-available")
        # Reads the store does not answer, and bad parameters.
        with pytest.raises(UnsupportedQueryError):
            app.fetch_all_windows("strings", 0, 10)
        with pytest.raises(UnsupportedQueryError):
            app.fetch_sessions("strings", "k1")
        with pytest.raises(InvalidKeyError):
            app.range("ints", "one", "two")
        with pytest.raises(InvalidKeyError):
            app.range("strings", partitions=[2])
        cases = [
            ("/stores/strings/windows", 400, "unknown-query-type"),
            ("/stores/strings/keys/k1/windows", 400, "unknown-query-type"),
            ("/stores/strings/keys/k1/nothing", 400, "bad-request"),
            ("/stores/strings/range?partitions=7", 400, "invalid-key"),
            ("/stores/strings/range?partitions=x", 400, "bad-request"),
            ("/stores/strings/range?from_b64=%21%21", 400, "bad-request"),
            ("/stores/strings/prefix", 400, "bad-request"),
            ("/stores/ints/range?from=seven", 400, "invalid-key"),
            ("/stores/nope/range", 404, "unknown-store"),
        ]
        for path, status, error in cases:
            got, body = http_get(f"http://{app.query_endpoint}{path}")
            assert (got, body["error"]) == (status, error), (path, body)


def _windowed_builder(topic: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    grouped = builder.stream(topic).group_by_key()
    grouped.windowed_by(TimeWindows.of_size(10_000, grace=10**9)).count(name="per-10s")
    (
        grouped.windowed_by(SessionWindows(gap_ms=5_000, grace_ms=10**9))
        .count(name="sessions")
        .suppress(until_window_closes())
    )
    return builder


@pytest.mark.broker
def test_window_and_session_stores_over_two_instances(  # noqa: PLR0915 - one scenario
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = create_topic("clicks", partitions=2)
    options: dict[str, Any] = {
        "application_id": unique_name("windows"),
        "bootstrap_servers": kafka_bootstrap,
        "commit_interval_ms": 100,
        "application_server": "127.0.0.1:0",
        "membership_interval_ms": 300,
        "consumer": {"session.timeout.ms": "6000"},
    }
    apps = [
        App(_windowed_builder(topic), state_dir=tmp_path / f"s{n}", **options) for n in range(2)
    ]
    for app in apps:
        app.start()
    try:
        for app in apps:
            assert app.wait_until("RUNNING", 60), app.error
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
        # Times after T0 (a timestamp of 0 means "now" to the producer): u<i> clicks at i s and
        # i + 2 s (one session, in window 0 but for u8 and u9), and at 30 s + i ms.
        clicks = [
            (f"u{i}", ts) for i in range(10) for ts in (1_000 * i, 1_000 * i + 2_000, 30_000 + i)
        ]
        for key, ts in clicks:
            producer.produce(topic, key=key.encode(), value=b"x", timestamp=T0 + ts)
        producer.flush(30)
        windows = Counter((key, ts // 10_000 * 10_000) for key, ts in clicks)
        expected = sorted(
            (
                {"key": k, "start": T0 + s, "end": T0 + s + 10_000, "value": n}
                for (k, s), n in windows.items()
                if s <= 10_000
            ),
            key=lambda w: (w["start"], str(w["key"]).encode()),
        )

        def spread_windows() -> RangeResult | None:
            try:
                result = apps[0].fetch_all_windows("per-10s", T0, T0 + 10_000)
            except QueryError:
                return None
            if len({p.instance_id for p in result.partitions}) != 2 or result.entries != expected:
                return None
            return result

        wait_for(spread_windows, timeout_s=60, message="every key's windows from both instances")
        for app in apps:
            every = app.fetch_all_windows("per-10s", T0, T0 + 10_000)
            assert every.entries == expected  # each key's window once, by start then key
            assert app.fetch_all_windows("per-10s", T0 + 10_000, T0).entries == []
            later = app.fetch_all_windows("per-10s", T0 + 10_001)
            assert [(w["key"], w["start"]) for w in later.entries] == [
                (f"u{i}", T0 + 30_000) for i in range(10)
            ]
            for i in (0, 9):
                key = f"u{i}"
                result = app.fetch_windows("per-10s", key, T0, T0 + 30_000)
                assert result.found
                assert [(w["start"] - T0, w["value"]) for w in result.value] == sorted(
                    (s, n) for (k, s), n in windows.items() if k == key
                )
                inner = app.fetch_windows("per-10s", key, T0 + 1, T0 + 29_999)
                assert [w["start"] - T0 for w in inner.value] == ([10_000] if i >= 8 else [])
            assert not app.fetch_windows("per-10s", "nobody").found

        def sessions_of(app: App, key: str) -> list[tuple[int, int, int]]:
            result = app.fetch_sessions("sessions", key)
            return [(s["start"] - T0, s["end"] - T0, s["value"]) for s in result.value]

        for app in apps:
            for i in (0, 5):
                first, second = 1_000 * i, 30_000 + i
                want = [(first, first + 2_000, 2), (second, second, 1)]
                wait_for(
                    lambda: sessions_of(app, f"u{i}") == want,  # noqa: B023 - called at once
                    timeout_s=30,
                    message="sessions",
                )
                backward = app.fetch_sessions("sessions", f"u{i}", descending=True)
                assert [(s["start"] - T0, s["end"] - T0) for s in backward.value] == [
                    w[:2] for w in want[::-1]
                ]
                bounded = app.fetch_sessions("sessions", f"u{i}", T0 + first + 2_001)
                assert [(s["start"] - T0, s["end"] - T0) for s in bounded.value] == [want[1][:2]]
            base = f"http://{app.query_endpoint}/stores"
            status, body = http_get(f"{base}/per-10s/windows?from={T0}&to={T0 + 10_000}", None)
            assert (status, body["entries"]) == (200, expected)
            status, body = http_get(f"{base}/per-10s/keys/u3/windows?from={T0}&to={T0}", None)
            assert (status, body["value"]) == (
                200,
                [{"start": T0, "end": T0 + 10_000, "value": 2}],
            )
            query = urllib.parse.urlencode({"earliest_end": T0 + 30_000, "descending": "true"})
            status, body = http_get(f"{base}/sessions/keys/u3/sessions?{query}", None)
            assert (status, [s["start"] - T0 for s in body["value"]]) == (200, [30_003])
            status, body = http_get(f"{base}/sessions/range", None)
            assert (status, body["error"]) == (400, "unknown-query-type")
            status, body = http_get(f"{base}/per-10s/windows?from=soon", None)
            assert (status, body["error"]) == (400, "bad-request")
    finally:
        for app in apps:
            app.close()

"""What each range read answers from one store partition, how partitions' answers merge, and
how a range answer travels as JSON (streams_runtime.queries.reads and results), without a
broker. Routing them to every partition's copy is test_range_queries_broker.py."""

from __future__ import annotations

import base64

from streams_runtime.queries import PartitionResult, RangeResult, UnsupportedQueryError
from streams_runtime.queries.reads import (
    KeyRange,
    KeyRead,
    PointRead,
    SessionKeyRead,
    WindowKeyRead,
    WindowStartRange,
    merge_partitions,
)
from streams_runtime.serdes import Bytes, Integer, String, ValueAndTimestamp
from streams_runtime.state import (
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueStore,
    SessionStore,
    WindowStore,
)
from streams_runtime.topology import QueryableStore

TABLE = QueryableStore("table", "key_value", String(), String())
WINDOWS = QueryableStore("windows", "window", String(), Integer())
SESSIONS = QueryableStore("sessions", "session", String(), Integer())


def _table(rows: dict[str, str]) -> KeyValueStore:
    store = KeyValueStore("table", 0, InMemoryKeyValueEngine(), None)
    for n, (key, value) in enumerate(rows.items()):
        store.put(key.encode(), ValueAndTimestamp(value.encode(), 100 + n).to_bytes(), 0)
    return store


def _windows(store: SessionStore, *windows: tuple[str, int, int, int]) -> SessionStore:
    for key, start, end, value in windows:
        store.put(key.encode(), start, end, Integer().serialize(value), 0)
    return store


def test_a_key_range_reads_entries_with_value_and_timestamp() -> None:
    store = _table({"b": "2", "a": "1", "c": "3"})
    read = KeyRange(b"a", b"b")
    assert read.read(TABLE, store) == [
        {"key": "a", "value": "1", "timestamp": 101},
        {"key": "b", "value": "2", "timestamp": 100},
    ]
    assert [e["key"] for e in KeyRange(descending=True).read(TABLE, store)] == ["c", "b", "a"]
    assert KeyRange(b"c", b"a").read(TABLE, store) == []
    assert [e["key"] for e in KeyRange(prefix=b"b").read(TABLE, store)] == ["b"]


def test_window_reads_of_a_key_and_of_every_key() -> None:
    store = _windows(
        WindowStore("windows", 0, InMemorySessionEngine(), None),
        ("a", 0, 9, 1),
        ("a", 10, 19, 2),
        ("b", 0, 9, 3),
    )
    found, value, timestamp = WindowKeyRead(0, 9).read(WINDOWS, store, b"a")
    assert (found, value, timestamp) == (True, [{"start": 0, "end": 9, "value": 1}], 9)
    assert WindowKeyRead(10, 0).read(WINDOWS, store, b"a") == (False, [], None)
    assert WindowStartRange(0, 10).read(WINDOWS, store) == [
        {"key": "a", "start": 0, "end": 9, "value": 1},
        {"key": "b", "start": 0, "end": 9, "value": 3},
        {"key": "a", "start": 10, "end": 19, "value": 2},
    ]
    # Any int is a bound: clamped to what a store holds.
    assert len(WindowStartRange(-(2**70), 2**70).read(WINDOWS, store)) == 3


def test_session_reads_order_by_end_then_start() -> None:
    store = _windows(
        SessionStore("sessions", 0, InMemorySessionEngine(), None),
        ("k", 0, 30, 1),
        ("k", 10, 20, 2),
        ("k", 40, 50, 3),
    )

    def windows(read: KeyRead) -> list[tuple[int, int]]:
        _, value, _ = read.read(SESSIONS, store, b"k")
        assert isinstance(value, list)
        return [(s["start"], s["end"]) for s in value]

    assert windows(SessionKeyRead()) == [(10, 20), (0, 30), (40, 50)]
    assert windows(SessionKeyRead(25, 40, descending=True)) == [(40, 50), (0, 30)]
    # The point read keeps its order (by start).
    assert windows(PointRead()) == [(0, 30), (10, 20), (40, 50)]


def test_partitions_merge_in_the_order_of_serialized_keys() -> None:
    parts = [[{"key": "a"}, {"key": "c"}], [{"key": "b"}, {"key": "d"}]]
    assert [e["key"] for e in merge_partitions(TABLE, KeyRange(), parts)] == ["a", "b", "c", "d"]
    descending = [list(reversed(part)) for part in parts]
    merged = merge_partitions(TABLE, KeyRange(descending=True), descending)
    assert [e["key"] for e in merged] == ["d", "c", "b", "a"]
    # Integer keys sort as their big-endian two's complement bytes, as Kafka Streams' do:
    # negative keys after the positive ones.
    ints = QueryableStore("ints", "key_value", Integer(), String())
    merged = merge_partitions(ints, KeyRange(), [[{"key": 0}, {"key": -1}], [{"key": 5}]])
    assert [e["key"] for e in merged] == [0, 5, -1]
    # Bytes keys travel as base64: ordered by the bytes, not by the text.
    raw = QueryableStore("raw", "key_value", Bytes(), String())
    keys = [base64.b64encode(k).decode() for k in (b"\x00", b"\xff", b"\x7f")]
    merged = merge_partitions(
        raw, KeyRange(), [[{"key": keys[0]}, {"key": keys[1]}], [{"key": keys[2]}]]
    )
    assert [e["key"] for e in merged] == [keys[0], keys[2], keys[1]]


def test_windows_of_every_partition_merge_by_start_then_key() -> None:
    parts = [
        [{"key": "a", "start": 0, "end": 9}, {"key": "a", "start": 10, "end": 19}],
        [{"key": "b", "start": 0, "end": 9}, {"key": "c", "start": 5, "end": 14}],
    ]
    merged = merge_partitions(WINDOWS, WindowStartRange(), parts)
    assert [(e["start"], e["key"]) for e in merged] == [(0, "a"), (0, "b"), (5, "c"), (10, "a")]


def test_reads_say_how_they_travel() -> None:
    assert KeyRange(b"a", None, descending=True).params() == {
        "descending": "true",
        "from_b64": base64.b64encode(b"a").decode(),
    }
    assert KeyRange(prefix=b"\xff").params() == {"prefix_b64": "/w=="}
    assert WindowStartRange(1, 2).params() == {"from": "1", "to": "2"}
    assert (
        WindowKeyRead.path,
        SessionKeyRead.path,
        KeyRange().path,
        KeyRange(prefix=b"").path,
    ) == (
        "/windows",
        "/sessions",
        "/range",
        "/prefix",
    )


def test_a_range_result_round_trips_as_json() -> None:
    parts = [
        PartitionResult(0, "active", "i1", "h:1", 0, 0),
        PartitionResult(1, "standby", "i2", None, 3, 40),
    ]
    result = RangeResult("table", [{"key": "a", "value": "1", "timestamp": 5}], parts)
    assert result.stale
    assert not parts[0].stale
    data = result.to_json()
    assert data["stale"] is True
    assert RangeResult.from_json({**data, "unknown": 1}) == result


def test_an_unsupported_query_is_a_400_with_its_code() -> None:
    error = UnsupportedQueryError("no ranges of window stores")
    assert (error.status, error.code, error.to_json()["error"]) == (
        400,
        "unknown-query-type",
        "unknown-query-type",
    )
    assert isinstance(error, TypeError)

"""Tables: emit-on-change (KIP-557) and its crash safety (KAFKA-12508) against the real broker,
and the pieces of tables checked without one. What table topologies output is
tests/streams_runtime/topologies/test_tables_driver.py (the driver)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from progress_control.protocol import is_control_record
from streams_runtime import App, StreamsBuilder, Table
from streams_runtime.processors import (
    Processor,
    TableSourceProcessor,
    TimestampedTableStore,
    is_idempotent_update,
)
from streams_runtime.record import Record, TopicPartitionId
from streams_runtime.serdes import Json, SerializationError, String, ValueAndTimestamp
from streams_runtime.state import (
    SOURCE_HEADER,
    changelog_topic,
    decode_source,
    encode_source,
)
from tests.helpers import TopicReader, unique_name, wait_for
from tests.paths import APPS, ROOT
from tests.streams_runtime.processors.memory_context import MemoryContext

broker = pytest.mark.broker

APP = APPS / "tables_app.py"
SKIPS = "streams_idempotent_update_skip"

Update = tuple[str | None, Any, int]  # key, value (None: delete), timestamp


# -- without a broker ------------------------------------------------------------------------


def test_store_value_format_is_timestamp_then_value() -> None:
    encoded = ValueAndTimestamp(b"v", 258).to_bytes()
    assert encoded == b"\x00\x00\x00\x00\x00\x00\x01\x02v"
    assert ValueAndTimestamp.from_bytes(encoded) == (b"v", 258)
    assert ValueAndTimestamp.from_bytes(ValueAndTimestamp(b"", -1).to_bytes()) == (b"", -1)
    with pytest.raises(SerializationError):
        ValueAndTimestamp.from_bytes(b"\x00" * 7)


@pytest.mark.parametrize(
    ("stored", "value", "timestamp", "idempotent"),
    [
        ((b"a", 10), b"a", 11, True),  # same bytes, strictly newer: dropped
        ((b"a", 10), b"a", 10, False),  # same bytes, same time (re-processing): forwarded
        ((b"a", 10), b"a", 9, False),  # same bytes, older: forwarded
        ((b"a", 10), b"b", 11, False),  # changed
        ((b"a", 10), None, 11, False),  # delete
        (None, b"a", 11, False),  # new key
        (None, None, 11, False),  # delete of an absent key
    ],
)
def test_idempotent_update_rule(
    stored: tuple[bytes, int] | None, value: bytes | None, timestamp: int, idempotent: bool
) -> None:
    previous = None if stored is None else ValueAndTimestamp(*stored)
    assert is_idempotent_update(previous, value, timestamp) is idempotent


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Update] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.seen.append((record.key, record.value, record.timestamp))


def test_table_source_writes_every_update_and_forwards_only_changes() -> None:
    context = MemoryContext()
    table = TableSourceProcessor("prices", String(), Json())
    sink = _Collect()
    table.children = [sink]
    table.init(context)
    updates: list[Update] = [
        ("k", {"p": 1}, 10),
        ("k", {"p": 1}, 20),  # idempotent: stored (timestamp 20), not forwarded
        ("k", {"p": 1}, 15),  # older than the stored 20: forwarded
        ("k", {"p": 2}, 30),
        ("k", {"p": 2}, 5),  # older: written and forwarded
        (None, {"p": 9}, 40),  # null key
        ("k", None, 50),
    ]
    for key, value, ts in updates:
        table.process(Record(key, value, ts))
    assert sink.seen == [
        ("k", {"p": 1}, 10),
        ("k", {"p": 1}, 15),
        ("k", {"p": 2}, 30),
        ("k", {"p": 2}, 5),
        ("k", None, 50),
    ]
    assert context.skips == ["prices"]
    assert context.dropped == ["null-key"]
    assert context.kv_store("prices").get(b"k") is None
    table.process(Record("k", {"p": 3}, 60))
    stored = TimestampedTableStore(context.kv_store("prices"), context).get(b"k")
    assert stored == ValueAndTimestamp(b'{"p":3}', 60)


def test_aggregations_make_changelogged_key_value_stores() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("clicks").group_by_key()
    grouped.count(name="counts")
    grouped.reduce(max)
    grouped.aggregate(list, lambda _k, v, agg: [*agg, v])
    [sub] = builder.build("app").subtopologies
    assert [s.kind for s in sub.stores] == ["key_value"] * 3
    assert [s.logged for s in sub.stores] == [True] * 3
    assert sub.stores[0].name == "counts"
    assert all(s.name.startswith("KSTREAM-AGGREGATE-STATE-STORE-") for s in sub.stores[1:])


def test_aggregation_after_a_key_change_repartitions() -> None:
    builder = StreamsBuilder()
    builder.stream("clicks").select_key(lambda _k, v: v).group_by_key().count().to_stream().to("o")
    first, second = builder.build("app").subtopologies
    assert not first.stores
    assert [s.kind for s in second.stores] == ["key_value"]


def test_a_join_over_a_derived_table_shares_the_task_of_its_store() -> None:
    builder = StreamsBuilder()
    table = builder.table("users", store_name="users").filter(lambda _k, v: v["vip"])
    derived: Table[Any, Any] = table.map_values(lambda v: v["name"])
    builder.stream("orders").join(derived, lambda o, u: (o, u)).to("out")
    [sub] = builder.build("app").subtopologies
    assert set(sub.source_topics) == {"users", "orders"}
    assert derived.store_name == "users"


# -- against the broker --------------------------------------------------------------------


def to_json(value: Any) -> bytes:
    return json.dumps(value).encode()


def produce(
    bootstrap: str,
    topic: str,
    records: list[Update],
    encode: Callable[[Any], bytes] = to_json,
) -> None:
    """String keys, values encoded with ``encode`` (``None``: a tombstone), explicit
    timestamps, in order, to partition 0 of ``topic``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, ts in records:
        producer.produce(
            topic,
            key=None if key is None else key.encode(),
            value=None if value is None else encode(value),
            timestamp=ts,
            partition=0,
        )
    producer.flush(10)


def updates(messages: list[Message], decode: Callable[[bytes], Any] = json.loads) -> list[Update]:
    found: list[Update] = []
    for m in messages:
        if is_control_record(m):
            continue  # progress ticks the runtime writes to its outputs
        raw = m.value()
        key = m.key()
        found.append(
            (
                None if key is None else key.decode(),
                None if raw is None else decode(raw),
                m.timestamp()[1],
            )
        )
    return found


def read_updates(
    reader: TopicReader, count: int, decode: Callable[[bytes], Any] = json.loads
) -> list[Update]:
    """The data records of ``reader``'s topic, once there are at least ``count``."""
    wait_for(
        lambda: len(updates(reader.read(), decode)) >= count,
        timeout_s=30,
        message=f"{count} updates",
    )
    return updates(reader.read(), decode)


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def latest_value_table(kind: str, source: str, sink: str, store: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    table: Table[Any, Any]
    if kind == "table":
        table = builder.table(source, store_name=store)
    else:
        table = builder.stream(source).group_by_key().reduce(lambda _old, new: new, name=store)
    table.to_stream().to(sink)
    return builder


@broker
@pytest.mark.parametrize(
    ("kind", "expected_k", "expected_c"),
    [
        ("table", [("k", "B", 3000), ("k", "B", 2000)], [("c", "B", 2000)]),
        # An aggregate carries the largest timestamp so far: the second update is at 3000 too.
        # For "c", the skipped update still stored its timestamp (3000), as Kafka Streams' store
        # does, so the next one is stamped 3000 and forwarded (not strictly newer).
        ("reduce", [("k", "B", 3000), ("k", "B", 3000)], [("c", "B", 3000)]),
    ],
)
def test_changelog_ahead_of_committed_input_is_not_restored(  # noqa: PLR0917 (pytest fixtures)
    kind: str,
    expected_k: list[Update],
    expected_c: list[Update],
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    """KAFKA-12508, deterministic: a crashed run flushed its changelog (the value "B" at 2000,
    caused by input offset 3) but neither its output nor its input offsets. Restoring that
    record would make re-processing offset 2 ("B" at 3000) an idempotent update, never
    forwarded. Restore skips it, so offset 2 is forwarded. Key "c" is the control: its
    changelog record names committed input, is restored, and "B" at 3000 is dropped."""
    source, sink = create_topic("latest"), create_topic("latest-updates")
    app_id, store = unique_name("eoc-crash"), "latest"
    produce(kafka_bootstrap, source, [("k", "A", 1000), ("c", "A", 1000)])  # offsets 0, 1
    first = run_app(latest_value_table(kind, source, sink, store), application_id=app_id)
    reader = reader_for(sink, 1)
    assert read_updates(reader, 2) == [("k", "A", 1000), ("c", "A", 1000)]
    first.close()
    assert first.state == "NOT_RUNNING"
    assert committed_offset(kafka_bootstrap, app_id, source) == 2

    changelog = changelog_topic(app_id, store)
    input_tp = TopicPartitionId(source, 0)
    value = ValueAndTimestamp(json.dumps("B").encode(), 2000).to_bytes()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, source_offset in (("k", 3), ("c", 1)):
        header: list[tuple[str, str | bytes | None]] = [
            (SOURCE_HEADER, encode_source(input_tp, source_offset))
        ]
        producer.produce(changelog, key=key.encode(), value=value, partition=0, headers=header)
    producer.flush(10)
    produce(
        kafka_bootstrap,
        source,
        [("k", "B", 3000), ("k", "B", 2000), ("c", "B", 3000), ("c", "B", 2000)],  # 2..5
    )

    second = run_app(latest_value_table(kind, source, sink, store), application_id=app_id)
    after = read_updates(reader, 2 + len(expected_k) + 1)[2:]
    assert [u for u in after if u[0] == "k"] == expected_k
    assert [u for u in after if u[0] == "c"] == expected_c
    assert second.metrics.total(SKIPS, processor=store) == 1  # the control's, never k's


# -- a real crash: the app process is SIGKILLed ---------------------------------------------


@pytest.fixture
def crashing_app(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[[list[str], str], subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    log = open(os.environ.get("TABLES_TEST_LOG", os.devnull), "ab")  # noqa: SIM115
    root = ROOT
    app_id = unique_name("eoc-kill")

    def start(args: list[str], engine: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": app_id,
            "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "PROGRESS_CONTROL_RUNTIME_PROCESSING_GUARANTEE": "at_least_once",
            "PROGRESS_CONTROL_RUNTIME_STATE_ENGINE": engine,
            "PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS": "100",
            "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(tmp_path / "state"),
            # A restarted process takes over its predecessor's membership at once.
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__GROUP_INSTANCE_ID": "tables-test-instance",
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        }
        process = subprocess.Popen(
            [sys.executable, str(APP), *args], env=env, stdout=subprocess.DEVNULL, stderr=log
        )
        processes.append(process)
        return process

    start.app_id = app_id  # type: ignore[attr-defined]
    yield start
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    log.close()


def changelog_records(bootstrap: str, topic: str) -> list[tuple[str, ValueAndTimestamp, int]]:
    """(key, store value, source offset) of every record of a changelog partition."""
    reader = TopicReader(bootstrap, topic, 1)
    try:
        found = []
        for m in reader.read(max_s=3):
            source = dict(m.headers() or [])[SOURCE_HEADER]
            assert isinstance(source, bytes)
            raw = m.value()
            assert raw is not None
            key = m.key() or b""
            found.append(
                (key.decode(), ValueAndTimestamp.from_bytes(raw), decode_source(source)[1])
            )
        return found
    finally:
        reader.close()


@broker
@pytest.mark.parametrize("engine", ["memory", "sqlite", "rocksdb"])
def test_killed_between_changelog_and_offset_commit_forwards_again(  # noqa: PLR0917 (pytest fixtures)
    engine: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    crashing_app: Callable[[list[str], str], subprocess.Popen[bytes]],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """KAFKA-12508 with a real process kill, at least once: the store and its changelog on the
    broker hold updates whose output downstream never received and whose input offsets were
    never committed; after the restart, re-processing the input forwards them."""
    source, sink, store = create_topic("prices"), create_topic("price-updates"), "prices"
    app_id: str = crashing_app.app_id  # type: ignore[attr-defined]
    args = [source, sink, store, str(tmp_path / "crashed-once")]
    output = reader_for(sink, 1)
    produce(kafka_bootstrap, source, [("k", "A", 1000)], str.encode)  # offset 0
    first = crashing_app(args, engine)
    assert read_updates(output, 1, bytes.decode) == [("k", "A", 1000)]
    wait_for(
        lambda: committed_offset(kafka_bootstrap, app_id, source) == 1,
        timeout_s=30,
        message="offset 0 committed",
    )

    # Offsets 1..3. The crashing run stores "B" at 3000 and then at 2000 (older: written), so
    # its changelog says "B" at 2000, caused by offset 2; none of it reaches the output.
    produce(
        kafka_bootstrap,
        source,
        [("k", "B", 3000), ("k", "B", 2000), ("end", "x", 3500)],
        str.encode,
    )
    assert first.wait(60) == -signal.SIGKILL
    assert (tmp_path / "crashed-once").exists()
    assert committed_offset(kafka_bootstrap, app_id, source) == 1
    latest = {
        key: (value, offset)
        for key, value, offset in changelog_records(kafka_bootstrap, changelog_topic(app_id, store))
    }
    assert latest["k"] == (ValueAndTimestamp(b"B", 2000), 2)  # ahead of committed offset 1
    assert updates(output.read(), bytes.decode) == [("k", "A", 1000)]

    # Restored from that changelog, the store would hold "B" at 2000, and offset 1 ("B" at
    # 3000, same bytes, newer) would be dropped as idempotent: the update lost for good.
    crashing_app(args, engine)
    after = read_updates(output, 4, bytes.decode)
    assert after == [
        ("k", "A", 1000),
        ("k", "B", 3000),
        ("k", "B", 2000),
        ("end", "x", 3500),
    ]

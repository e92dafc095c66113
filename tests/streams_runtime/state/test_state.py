"""State stores of streams_runtime: engines, changelog encodings, stores, and the task state
manager's restore/checkpoint contract, partly against a real broker."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams_runtime.cluster import StandbyReplica, StorePartition
from streams_runtime.record import TopicPartitionId
from streams_runtime.state import (
    SOURCE_HEADER,
    ChangelogWriter,
    Checkpoint,
    EngineKind,
    KeyValueEngine,
    KeyValueStore,
    RestoreError,
    SessionEngine,
    SessionStore,
    SourcePosition,
    StateDirectoryLockedError,
    StoreSpec,
    TaskStateManager,
    changelog_topic,
    changelog_topic_config,
    decode_source,
    encode_source,
    make_kv_engine,
    make_session_engine,
    session_changelog_key,
    split_session_changelog_key,
)
from streams_runtime.state.changelog_readers import ChangelogReaders
from streams_runtime.state.directory import (
    CHECKPOINT_FILE,
    checkpoint_path,
    read_checkpoint,
    write_checkpoint,
)
from tests.helpers import unique_name
from tests.streams_runtime.state.record_sinks import ListSink, ProducerSink

ENGINES: list[EngineKind] = ["memory", "sqlite", "rocksdb"]
PERSISTENT: list[EngineKind] = ["sqlite", "rocksdb"]
INPUT = TopicPartitionId("input", 0)


# ------------------------------------------------------------------------------------------
# helpers


def kv_engine(kind: EngineKind, tmp_path: Path) -> KeyValueEngine:
    return make_kv_engine(kind, tmp_path / f"kv.{kind}")


def session_engine(kind: EngineKind, tmp_path: Path) -> SessionEngine:
    return make_session_engine(kind, tmp_path / f"sessions.{kind}")


def manager(  # noqa: PLR0917
    tmp_path: Path,
    specs: list[StoreSpec],
    engine: EngineKind = "sqlite",
    sink: Any = None,
    position: SourcePosition | None = None,
    bootstrap: str | None = None,
    application_id: str = "app",
) -> TaskStateManager:
    return TaskStateManager(
        application_id=application_id,
        task_id="0_0",
        partition=0,
        specs=specs,
        engine=engine,
        state_dir=tmp_path,
        sink=sink if sink is not None else ListSink(),
        position=position if position is not None else SourcePosition(),
        consumer_config={"bootstrap.servers": bootstrap} if bootstrap else {},
    )


# ------------------------------------------------------------------------------------------
# key-value engines


@pytest.mark.parametrize("kind", ENGINES)
def test_kv_engine_basics(kind: EngineKind, tmp_path: Path) -> None:
    engine = kv_engine(kind, tmp_path)
    assert engine.get(b"a") is None
    assert engine.count() == 0
    engine.put(b"b", b"2")
    engine.put(b"a", b"1")
    engine.put(b"c", b"")
    engine.put(b"b", b"22")
    assert engine.get(b"b") == b"22"
    assert engine.get(b"c") == b""
    assert list(engine.items()) == [(b"a", b"1"), (b"b", b"22"), (b"c", b"")]
    assert engine.count() == 3
    engine.delete(b"a")
    engine.delete(b"missing")
    assert list(engine.items()) == [(b"b", b"22"), (b"c", b"")]
    engine.commit()
    engine.clear()
    assert engine.count() == 0
    assert list(engine.items()) == []
    engine.close()


@pytest.mark.parametrize("kind", ENGINES)
def test_kv_engine_items_sorted_by_bytes_across_pages_and_writes(
    kind: EngineKind, tmp_path: Path
) -> None:
    engine = kv_engine(kind, tmp_path)
    keys = [i.to_bytes(2, "big") for i in range(1500)] + [b"\xff", b"\x00", b"\x00\x00\x00"]
    for key in reversed(keys):
        engine.put(key, key * 2)
    seen = []
    for key, value in engine.items():
        assert value == key * 2
        seen.append(key)
        # Writes during iteration (as a processor would do) must not break it.
        if key != b"\x00\x06":
            engine.put(key, key * 2)
        if key == b"\x00\x05":
            engine.delete(b"\x00\x06")
    expected = sorted(set(keys) - {b"\x00\x06"})
    # Sorted, no duplicates; whether the entry deleted mid-iteration still shows is unspecified
    # (a snapshot in memory, pages in SQLite).
    assert [key for key in seen if key != b"\x00\x06"] == expected
    assert engine.count() == len(expected)
    engine.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_persistent_kv_engine_durability(kind: EngineKind, tmp_path: Path) -> None:
    path = tmp_path / f"kv.{kind}"
    engine = make_kv_engine(kind, path)
    engine.put(b"committed", b"1")
    engine.commit()
    engine.put(b"uncommitted", b"2")
    engine.delete(b"committed")
    # Reads see the connection's own uncommitted writes.
    assert engine.get(b"uncommitted") == b"2"
    assert engine.get(b"committed") is None
    engine.close()
    reopened = make_kv_engine(kind, path)
    assert list(reopened.items()) == [(b"committed", b"1")]
    reopened.put(b"x", b"y")
    reopened.clear()  # durable, and discards the open transaction too
    reopened.close()
    again = make_kv_engine(kind, path)
    assert again.count() == 0
    if kind == "sqlite":
        mode = again._conn.execute("PRAGMA journal_mode").fetchone()[0]  # type: ignore[attr-defined]
        assert mode == "wal"
    again.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_persistent_engine_is_usable_from_another_thread(kind: EngineKind, tmp_path: Path) -> None:
    engine = make_kv_engine(kind, tmp_path / f"kv.{kind}")
    engine.put(b"k", b"v")
    seen: list[bytes | None] = []
    reader = threading.Thread(target=lambda: seen.append(engine.get(b"k")))
    reader.start()
    reader.join()
    assert seen == [b"v"]
    engine.close()


def test_engine_factories_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        make_kv_engine("leveldb", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path"):
        make_session_engine("sqlite", None)
    with pytest.raises(ValueError, match="rocksdb engine needs a path"):
        make_session_engine("rocksdb", None)
    assert make_kv_engine("memory").count() == 0


# ------------------------------------------------------------------------------------------
# session engines


@pytest.mark.parametrize("kind", ENGINES)
def test_session_engine_find(kind: EngineKind, tmp_path: Path) -> None:
    engine = session_engine(kind, tmp_path)
    engine.put(b"k", 100, 200, b"a")
    engine.put(b"k", 300, 300, b"b")
    engine.put(b"k", -50, -10, b"neg")
    engine.put(b"other", 100, 200, b"o")
    assert engine.find(b"k", 0, 1000) == [(100, 200, b"a"), (300, 300, b"b")]
    assert engine.find(b"k", -1000, 1000) == [
        (-50, -10, b"neg"),
        (100, 200, b"a"),
        (300, 300, b"b"),
    ]
    # Bounds are inclusive: end >= earliest_end, start <= latest_start.
    assert engine.find(b"k", 200, 100) == [(100, 200, b"a")]
    assert engine.find(b"k", 201, 299) == []
    assert engine.find(b"k", 300, 300) == [(300, 300, b"b")]
    assert engine.find(b"missing", 0, 1000) == []
    engine.put(b"k", 100, 200, b"a2")  # replaces
    assert engine.find(b"k", 150, 150) == [(100, 200, b"a2")]
    assert engine.count() == 4
    # A point read sees exactly one window, before and after the commit, and removals.
    assert engine.get(b"k", 100, 200) == b"a2"
    assert engine.get(b"k", 100, 201) is None
    assert engine.get(b"missing", 100, 200) is None
    engine.commit()
    assert engine.get(b"k", -50, -10) == b"neg"
    engine.remove(b"k", -50, -10)
    assert engine.get(b"k", -50, -10) is None
    engine.close()


@pytest.mark.parametrize("kind", ENGINES)
def test_session_engine_remove_items_purge(kind: EngineKind, tmp_path: Path) -> None:
    engine = session_engine(kind, tmp_path)
    for i in range(700):  # more than one SQLite page of items
        engine.put(i.to_bytes(2, "big"), i, i + 10, b"v")
    engine.put(b"\x00\x01", 5, 6, b"early")
    items = list(engine.items())
    assert len(items) == 701
    assert items[:3] == [
        (b"\x00\x00", 0, 10, b"v"),
        (b"\x00\x01", 5, 6, b"early"),
        (b"\x00\x01", 1, 11, b"v"),
    ]
    assert [item[0] for item in items] == sorted(item[0] for item in items)
    engine.remove(b"\x00\x01", 5, 6)
    engine.remove(b"\x00\x01", 5, 7)  # absent: no-op
    assert engine.count() == 700
    assert engine.purge_ended_before(110) == 100  # ends 10..109
    assert engine.count() == 600
    assert engine.find(b"\x00\x63", -1000, 1000) == []
    assert engine.find(b"\x00\x64", -1000, 1000) == [(100, 110, b"v")]
    assert engine.purge_ended_before(110) == 0
    with pytest.raises(ValueError, match="after its end"):
        engine.put(b"k", 10, 9, b"x")
    engine.commit()
    engine.clear()
    assert engine.count() == 0
    engine.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_persistent_session_engine_durability(kind: EngineKind, tmp_path: Path) -> None:
    path = tmp_path / f"s.{kind}"
    engine = make_session_engine(kind, path)
    engine.put(b"k", 1, 2, b"kept")
    engine.commit()
    engine.put(b"k", 3, 4, b"lost")
    engine.purge_ended_before(100)
    assert engine.count() == 0
    engine.close()
    reopened = make_session_engine(kind, path)
    assert list(reopened.items()) == [(b"k", 1, 2, b"kept")]
    reopened.close()


# ------------------------------------------------------------------------------------------
# encodings


def test_changelog_topic_name() -> None:
    assert changelog_topic("shop", "counts") == "shop-counts-changelog"


@pytest.mark.parametrize(
    ("key", "start", "end"),
    [(b"user-1", 0, 10), (b"", -5, -1), (b"\x00" * 20, -(2**63), 2**63 - 1)],
)
def test_session_changelog_key_round_trip(key: bytes, start: int, end: int) -> None:
    raw = session_changelog_key(key, start, end)
    assert len(raw) == len(key) + 16
    assert split_session_changelog_key(raw) == (key, start, end)


def test_session_changelog_key_layout_and_garbage() -> None:
    assert session_changelog_key(b"k", 1, 2) == b"k" + (1).to_bytes(8, "big") + (2).to_bytes(
        8, "big"
    )
    with pytest.raises(ValueError, match="too short"):
        split_session_changelog_key(b"short")


@pytest.mark.parametrize(
    ("tp", "offset"),
    [(TopicPartitionId("clicks", 0), 0), (TopicPartitionId("tópico-ü", 7), 2**40), (INPUT, -1)],
)
def test_source_header_round_trip(tp: TopicPartitionId, offset: int) -> None:
    assert decode_source(encode_source(tp, offset)) == (tp, offset)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x01",
        b"\x02" + encode_source(INPUT, 1)[1:],  # unknown version
        encode_source(INPUT, 1)[:-1],  # truncated
        encode_source(INPUT, 1) + b"x",  # trailing bytes
        b"\x01\x00\x02\xff\xfe" + b"\x00" * 12,  # topic not UTF-8
        b"\x01\x00\x00" + b"\x00" * 12,  # empty topic
        encode_source(TopicPartitionId("t", -1), 1),  # negative partition
        encode_source(INPUT, -2),  # offset below -1
        b"pc-source garbage",
    ],
)
def test_source_header_garbage_rejected(raw: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (every malformation has its own message)
        decode_source(raw)


def test_changelog_writer_headers() -> None:
    sink = ListSink()
    position = SourcePosition()
    writer = ChangelogWriter(sink, "cl", 3, position)
    writer.log(b"k", b"v", 5)  # nothing being processed: no source
    position.set(INPUT, 42)
    writer.log(b"k", None, 6)
    writer.log(b"k", b"x", 7, source=(TopicPartitionId("other", 1), 9))
    writer.log(b"k", b"y", 8, source=(None, -1))  # a write that names no input
    assert sink.sent[0] == ("cl", 3, b"k", b"v", 5, None)
    assert sink.sent[1] == ("cl", 3, b"k", None, 6, [(SOURCE_HEADER, encode_source(INPUT, 42))])
    headers = sink.sent[2][5]
    assert headers is not None
    assert decode_source(headers[0][1] or b"") == (TopicPartitionId("other", 1), 9)
    assert sink.sent[3] == ("cl", 3, b"k", b"y", 8, None)
    assert writer.tp == TopicPartitionId("cl", 3)


# ------------------------------------------------------------------------------------------
# stores


def test_key_value_store_logs_writes_not_restores() -> None:
    sink = ListSink()
    position = SourcePosition(INPUT, 3)
    store = KeyValueStore(
        "counts", 0, make_kv_engine("memory"), ChangelogWriter(sink, "cl", 0, position)
    )
    store.put(b"a", b"1", 100)
    store.put(b"b", b"2", 101)
    store.put(b"a", None, 102)
    store.restore(b"c", b"3")
    store.restore(b"b", None)
    assert store.get(b"a") is None
    assert list(store.items()) == [(b"c", b"3")]
    assert store.count() == 1
    assert [(s[2], s[3], s[4]) for s in sink.sent] == [
        (b"a", b"1", 100),
        (b"b", b"2", 101),
        (b"a", None, 102),
    ]
    unlogged = KeyValueStore("plain", 0, make_kv_engine("memory"), None)
    unlogged.put(b"a", b"1", 1)
    unlogged.delete(b"a", 2)
    assert unlogged.count() == 0


def test_session_store_logs_writes_not_restores() -> None:
    sink = ListSink()
    store = SessionStore(
        "sessions",
        1,
        make_session_engine("memory"),
        ChangelogWriter(sink, "cl", 1, SourcePosition(INPUT, 8)),
    )
    store.put(b"u", 10, 20, b"x", 20)
    store.put(b"u", 30, 40, b"y", 40)
    store.remove(b"u", 10, 20, 41)
    store.restore(session_changelog_key(b"v", 1, 2), b"z")
    assert store.find_sessions(b"u", 0, 100) == [(30, 40, b"y")]
    assert store.fetch(b"u", 30, 40) == b"y"
    assert store.fetch(b"u", 30, 41) is None
    assert list(store.items()) == [(b"u", 30, 40, b"y"), (b"v", 1, 2, b"z")]
    store.restore(session_changelog_key(b"v", 1, 2), None)
    assert store.count() == 1
    assert store.purge_ended_before(41) == 1
    assert [(s[2], s[3]) for s in sink.sent] == [
        (session_changelog_key(b"u", 10, 20), b"x"),
        (session_changelog_key(b"u", 30, 40), b"y"),
        (session_changelog_key(b"u", 10, 20), None),
    ]
    with pytest.raises(ValueError, match="too short"):
        store.restore(b"bad", b"v")


# ------------------------------------------------------------------------------------------
# specs, topic config, checkpoints


def test_store_spec_validation_and_topic_config() -> None:
    kv = StoreSpec("counts", "key_value")
    assert changelog_topic_config(kv) == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "3600000",
    }
    session = StoreSpec("sessions", "session", retention_ms=60_000)
    # Compacted only: time-based deletion acts on record timestamps (event time when old data
    # is replayed); expired sessions are removed with tombstones instead.
    assert changelog_topic_config(session) == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "3600000",
    }
    with pytest.raises(ValueError, match="retention_ms"):
        changelog_topic_config(StoreSpec("s", "session"))
    for bad in ("", "a/b", "..", "a b"):
        with pytest.raises(ValueError, match="store name"):
            StoreSpec(bad, "key_value")
    with pytest.raises(ValueError, match="kind"):
        StoreSpec("x", "timeline")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retention"):
        StoreSpec("x", "session", retention_ms=-1)


def test_checkpoint_file_round_trip_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    assert read_checkpoint(path) is None
    checkpoint = Checkpoint(
        inputs={INPUT: 5, TopicPartitionId("b", 0): 0},
        changelog_offsets={TopicPartitionId("app-s-changelog", 0): 17},
        stores=frozenset({"s", "t"}),
    )
    write_checkpoint(path, checkpoint)
    assert read_checkpoint(path) == checkpoint
    assert not path.with_name(path.name + ".tmp").exists()
    data = json.loads(path.read_text())
    assert data["inputs"] == [
        {"topic": "b", "partition": 0, "offset": 0},
        {"topic": "input", "partition": 0, "offset": 5},
    ]
    for garbage in ("", "{", "[]", '{"version": 2}', '{"version": 1, "inputs": [{}]}'):
        path.write_text(garbage)
        assert read_checkpoint(path) is None


@pytest.mark.parametrize("kind", PERSISTENT)
def test_checkpoint_write_delete_reuse_without_changelog(kind: EngineKind, tmp_path: Path) -> None:
    """Unlogged persistent stores: the checkpoint alone decides whether local data survives."""
    specs = [StoreSpec("kv", "key_value", logged=False), StoreSpec("s", "session", logged=False)]
    checkpoint = checkpoint_path(tmp_path / "app" / "0_0", kind)

    first = manager(tmp_path, specs, kind)
    result = first.restore({INPUT: 0})
    assert not result.reused_checkpoint
    assert result.stores_wiped == ["kv", "s"]
    assert read_checkpoint(checkpoint) == Checkpoint({INPUT: 0}, {}, frozenset({"kv", "s"}))
    first.mark_processing()
    assert not checkpoint.exists()
    first.mark_processing()  # cheap when already deleted
    first.kv_store("kv").put(b"k", b"v", 1)
    first.session_store("s").put(b"k", 1, 2, b"s", 2)
    first.commit({INPUT: 1})
    assert read_checkpoint(checkpoint) == Checkpoint({INPUT: 1}, {}, frozenset({"kv", "s"}))
    first.close()

    # Same committed position: local data reused.
    second = manager(tmp_path, specs, kind)
    result = second.restore({INPUT: 1})
    assert result.reused_checkpoint
    assert result.stores_wiped == []
    assert second.kv_store("kv").get(b"k") == b"v"
    # Processing started, then a crash (close without commit): the checkpoint is gone.
    second.mark_processing()
    second.kv_store("kv").put(b"k", b"ahead", 2)
    second.close()
    assert not checkpoint.exists()

    # No checkpoint: wiped, even though the committed position did not change.
    third = manager(tmp_path, specs, kind)
    result = third.restore({INPUT: 1})
    assert not result.reused_checkpoint
    assert third.kv_store("kv").count() == 0
    assert third.session_store("s").count() == 0
    third.kv_store("kv").put(b"k", b"v3", 3)
    third.commit({INPUT: 2})
    third.close()

    # A checkpoint for other committed offsets: wiped.
    fourth = manager(tmp_path, specs, kind)
    result = fourth.restore({INPUT: 5})
    assert not result.reused_checkpoint
    assert fourth.kv_store("kv").get(b"k") is None
    fourth.close(wipe=True)
    assert not checkpoint.exists()
    assert not (tmp_path / "app" / "0_0" / f"kv.{kind}").exists()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_new_store_not_in_checkpoint_is_wiped_others_reused(
    kind: EngineKind, tmp_path: Path
) -> None:
    first = manager(tmp_path, [StoreSpec("a", "key_value", logged=False)], kind)
    first.restore({})
    first.mark_processing()
    first.kv_store("a").put(b"k", b"v", 1)
    first.commit({INPUT: 1})
    first.close()
    # A stale file for "b" that the checkpoint does not vouch for.
    stale = make_kv_engine(kind, tmp_path / "app" / "0_0" / f"b.{kind}")
    stale.put(b"stale", b"x")
    stale.commit()
    stale.close()
    specs = [StoreSpec("a", "key_value", logged=False), StoreSpec("b", "key_value", logged=False)]
    second = manager(tmp_path, specs, kind)
    result = second.restore({INPUT: 1})
    assert result.reused_checkpoint
    assert result.stores_wiped == ["b"]
    assert second.kv_store("a").get(b"k") == b"v"
    assert second.kv_store("b").count() == 0
    second.close()


def test_switching_engines_never_reuses_the_other_engines_checkpoint(tmp_path: Path) -> None:
    specs = [StoreSpec("a", "key_value", logged=False)]
    with manager(tmp_path, specs, "sqlite") as sqlite:
        sqlite.restore({INPUT: 0})
        sqlite.mark_processing()
        sqlite.kv_store("a").put(b"k", b"sqlite", 1)
        sqlite.commit({INPUT: 1})
    # SQLite's checkpoint names the committed offsets, but vouches for SQLite's files only.
    with manager(tmp_path, specs, "rocksdb") as rocksdb:
        result = rocksdb.restore({INPUT: 1})
        assert not result.reused_checkpoint
        assert result.stores_wiped == ["a"]
        rocksdb.mark_processing()
        rocksdb.kv_store("a").put(b"k", b"rocksdb", 2)
        rocksdb.commit({INPUT: 2})
    # Back to SQLite after RocksDB moved on: its old checkpoint is for other offsets.
    with manager(tmp_path, specs, "sqlite") as sqlite:
        result = sqlite.restore({INPUT: 2})
        assert not result.reused_checkpoint
        assert sqlite.kv_store("a").get(b"k") is None


def _damage(store: Path) -> None:
    if store.is_dir():  # RocksDB: a CURRENT file that names no manifest
        (store / "CURRENT").write_bytes(b"\x00" * 100)
    else:
        store.write_bytes(b"not a database" * 100)


@pytest.mark.parametrize("kind", PERSISTENT)
def test_damaged_store_files_are_recreated(kind: EngineKind, tmp_path: Path) -> None:
    specs = [StoreSpec("a", "key_value", logged=False)]
    first = manager(tmp_path, specs, kind)
    first.restore({})
    first.close()
    _damage(tmp_path / "app" / "0_0" / f"a.{kind}")
    second = manager(tmp_path, specs, kind)
    result = second.restore({})
    assert result.stores_wiped == ["a"]
    assert not result.reused_checkpoint
    second.kv_store("a").put(b"k", b"v", 1)
    second.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_state_directory_is_locked(kind: EngineKind, tmp_path: Path) -> None:
    specs = [StoreSpec("a", "key_value", logged=False)]
    first = manager(tmp_path, specs, kind)
    with pytest.raises(StateDirectoryLockedError):
        manager(tmp_path, specs, kind)
    first.close()
    first.close()  # idempotent
    with manager(tmp_path, specs, kind) as second:
        assert second.store("a").name == "a"
    with pytest.raises(RuntimeError, match="closed"):
        second.commit({})


def test_manager_store_lookup_and_memory_engine(tmp_path: Path) -> None:
    specs = [
        StoreSpec("kv", "key_value"),
        StoreSpec("s", "session", retention_ms=1000),
        StoreSpec("local", "key_value", logged=False),
    ]
    with manager(tmp_path, specs, engine="memory", application_id="shop") as state:
        assert state.changelog_partitions() == [
            TopicPartitionId("shop-kv-changelog", 0),
            TopicPartitionId("shop-s-changelog", 0),
        ]
        assert isinstance(state.store("kv"), KeyValueStore)
        assert isinstance(state.session_store("s"), SessionStore)
        with pytest.raises(TypeError):
            state.kv_store("s")
        with pytest.raises(TypeError):
            state.session_store("kv")
        with pytest.raises(KeyError, match="nope"):
            state.store("nope")
        assert state.session_store("s").changelog is not None
        assert state.kv_store("local").changelog is None
    assert not (tmp_path / "shop").exists()  # memory engine: no files
    with pytest.raises(ValueError, match="duplicate"):
        manager(tmp_path, [StoreSpec("a", "key_value"), StoreSpec("a", "session")])


# ------------------------------------------------------------------------------------------
# real broker


@pytest.fixture
def changelog_for(kafka_admin: AdminClient) -> Callable[[str, StoreSpec], str]:
    """Create the changelog topic of ``spec`` for ``application_id``, configured as the runtime
    would (``create_topic`` cannot make the exact name a changelog needs)."""

    def create(application_id: str, spec: StoreSpec) -> str:
        name = changelog_topic(application_id, spec.name)
        topic = NewTopic(
            name, num_partitions=1, replication_factor=1, config=changelog_topic_config(spec)
        )
        for future in kafka_admin.create_topics([topic]).values():
            future.result(timeout=30)
        return name

    return create


@pytest.fixture
def sinks(kafka_bootstrap: str) -> Iterator[Callable[..., ProducerSink]]:
    made: list[ProducerSink] = []

    def make(transactional_id: str | None = None) -> ProducerSink:
        made.append(ProducerSink(kafka_bootstrap, transactional_id))
        return made[-1]

    yield make
    for sink in made:
        sink.producer.flush(10)


KV = StoreSpec("counts", "key_value")
SESSIONS = StoreSpec("sessions", "session", retention_ms=3_600_000)


@pytest.mark.broker
def test_restore_skips_records_of_uncommitted_input(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    app = unique_name("app")
    topic = changelog_for(app, KV)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks()
    position = SourcePosition()
    writer = manager(tmp_path / "w", [KV], "memory", sink, position, kafka_bootstrap, app)
    writer.restore({})
    store = writer.kv_store("counts")
    position.set(source, 5)
    store.put(b"k", b"v1", 1000)
    writer.flush()  # a commit interval ends between the two writes
    position.set(source, 10)
    store.put(b"k", b"v2", 2000)
    writer.flush()
    sink.flush()
    writer.close()

    left: list[int] = []  # what restore reports as the changelog records left to read

    def restored(committed: dict[TopicPartitionId, int]) -> tuple[bytes | None, Any]:
        left.clear()
        with manager(
            tmp_path / "r", [KV], "memory", ListSink(), None, kafka_bootstrap, app
        ) as state:
            result = state.restore(committed, timeout_s=60, on_remaining=left.append)
            return state.kv_store("counts").get(b"k"), result

    value, result = restored({source: 8})
    assert value == b"v1"
    assert (result.records_applied, result.records_skipped_uncommitted) == (1, 1)
    assert result.unattributed == 0
    assert result.end_offsets == {TopicPartitionId(topic, 0): 2}
    assert not result.reused_checkpoint
    assert result.corrections == 1
    assert (left[0], left[-1]) == (2, 0)
    value, result = restored({source: 11})
    assert value == b"v2"
    assert (result.records_applied, result.records_skipped_uncommitted) == (2, 0)
    assert result.corrections == 0
    value, result = restored({})  # no committed offset for the source: skipped
    assert value is None
    assert result.records_skipped_uncommitted == 2

    # Records without a (valid) source header are applied and counted.
    sink.send(topic, 0, b"plain", b"p", 3000, None)
    sink.send(topic, 0, b"junk", b"j", 3000, [(SOURCE_HEADER, b"garbage")])
    sink.flush()
    value, result = restored({source: 8})
    assert result.unattributed == 2
    assert result.records_applied == 3
    assert result.end_offsets == {TopicPartitionId(topic, 0): 4}


@pytest.mark.broker
def test_restore_logs_corrections_for_skipped_records(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    """A skipped record must not resurface once its input offset is committed by a later run
    that (emit-on-change) wrote nothing for that key."""
    app = unique_name("app")
    changelog_for(app, KV)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks()
    position = SourcePosition()
    with manager(tmp_path / "a", [KV], "memory", sink, position, kafka_bootstrap, app) as first:
        first.restore({})
        position.set(source, 5)
        first.kv_store("counts").put(b"k", b"v1", 1000)
        first.flush()  # committed with input offset 8
        position.set(source, 10)
        first.kv_store("counts").put(b"k", b"v2", 2000)  # the crashed run's write
        first.flush()
        sink.flush()
    with manager(tmp_path / "b", [KV], "memory", sink, position, kafka_bootstrap, app) as second:
        result = second.restore({source: 8})
        assert result.corrections == 1
        assert second.kv_store("counts").get(b"k") == b"v1"
        second.mark_processing()  # logs the correction: k = v1, as of the committed position
        # Re-processing offsets 8..11 yields v1 again for k: emit-on-change writes nothing.
        second.flush()
        sink.flush()
    with manager(tmp_path / "c", [KV], "memory", sink, position, kafka_bootstrap, app) as third:
        result = third.restore({source: 12})
        assert third.kv_store("counts").get(b"k") == b"v1"
        assert result.records_applied == 3
        assert result.corrections == 0


@pytest.mark.broker
def test_restore_from_a_standby_copy_equals_a_full_restore(  # noqa: PLR0915 - one scenario
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    """A task promoted on an instance with a standby starts from the standby's copy and reads
    only the changelog's tail, and ends exactly where a full restore ends: records of
    uncommitted input are kept out of the copy (but shown to stale queries), and their keys get
    the same corrections."""
    app = unique_name("app")
    topic = changelog_for(app, KV)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks()
    position = SourcePosition()

    def write(offset: int | None, key: bytes, value: bytes | None) -> None:
        # ``None``: a write that names no input (as before a task took any record).
        cause = (None, -1) if offset is None else (source, offset)
        if value is None:
            store.put(key, None, 1000 + len(key), source=cause)
        else:
            store.put(key, value, 1000 + (offset or 0), source=cause)
        writer.flush()

    writer = manager(tmp_path / "w", [KV], "memory", sink, position, kafka_bootstrap, app)
    writer.restore({})
    store = writer.kv_store("counts")
    write(1, b"a", b"a1")
    write(2, b"b", b"b1")
    write(3, b"gone", b"g1")
    write(4, b"gone", None)
    write(None, b"plain", b"p1")  # unattributed: always applied
    write(5, b"a", b"a2")
    write(9, b"b", b"b2")  # input not committed at 8: skipped, corrected
    write(10, b"new", b"n1")  # same
    sink.flush()

    replica = StandbyReplica(KV, StorePartition(KV.name, 0), topic)
    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("standby"),
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records: list[Message] = []
    try:
        while len(records) < 8:
            records += [msg for msg in reader.consume(10, 1) if msg.error() is None]
    finally:
        reader.close()
    for msg in records:
        replica.apply(msg)
        if replica.position() == 3:
            replica.fold({source: 2})  # the committed offsets the standby saw meanwhile
    assert replica.store.get(b"b") == b"b2"  # what a stale query sees
    write(6, b"tail", b"t1")  # written after the standby's last read
    write(11, b"a", b"a3")
    sink.flush()
    writer.close()

    committed = {source: 8}
    with manager(tmp_path / "cold", [KV], "memory", ListSink(), None, kafka_bootstrap, app) as cold:
        full = cold.restore(committed, timeout_s=60)
        expected = dict(cold.kv_store("counts").items())
    copy = replica.warm_store(committed)
    assert copy.changelog_offset == 8
    assert set(copy.skipped) == {b"b", b"new"}
    for engine in ENGINES:
        with manager(
            tmp_path / engine, [KV], engine, ListSink(), None, kafka_bootstrap, app
        ) as warm:
            result = warm.restore(committed, timeout_s=60, warm={KV.name: copy})
            assert dict(warm.kv_store("counts").items()) == expected
            assert expected == {b"a": b"a2", b"b": b"b1", b"plain": b"p1", b"tail": b"t1"}
            assert (result.warm_stores, result.records_from_standby) == (["counts"], 3)
            assert result.records_applied == 1  # only the tail's committed record
            assert result.records_skipped_uncommitted == 1
            assert result.corrections == full.corrections == 3  # b, new and a
            assert result.end_offsets == full.end_offsets


def read_into(replica: StandbyReplica, bootstrap: str) -> None:
    """Feed ``replica`` its changelog from its position (the beginning when -1) to the end, as
    the replicator's read_committed consumer does."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("standby"),
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    start = replica.next_offset if replica.next_offset >= 0 else OFFSET_BEGINNING
    reader.assign([TopicPartition(replica.tp.topic, replica.tp.partition, start)])
    try:
        while True:
            batch = reader.consume(100, 5)
            assert batch, "no end of partition"
            for msg in batch:
                error = msg.error()
                if error is None:
                    replica.apply(msg)
                else:
                    replica.eof_offset = msg.offset() or 0
                    return
    finally:
        reader.close()


@pytest.mark.broker
def test_sqlite_standby_resumes_from_its_checkpoint(  # noqa: PLR0915 - one scenario
    kafka_bootstrap: str,
    changelog_for: Callable[[str, StoreSpec], str],
    create_topic: Callable[..., str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    """A standby on disk, closed and reopened, resumes from its checkpoint: it reads only the
    changelog's tail, shows what a standby reading everything shows, and keeps the pending
    records (input not committed) out of its committed copy across the restart. A corrupt
    checkpoint means reading from the beginning, with the same result."""
    app = unique_name("app")
    topic = changelog_for(app, KV)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks()
    position = SourcePosition()
    writer = manager(tmp_path / "w", [KV], "memory", sink, position, kafka_bootstrap, app)
    writer.restore({})
    store = writer.kv_store("counts")

    def write(offset: int, key: bytes, value: bytes) -> None:
        position.set(source, offset)
        store.put(key, value, 1000 + offset)
        writer.flush()
        sink.flush()

    write(1, b"a", b"a1")
    write(2, b"b", b"b1")
    write(9, b"b", b"b2")  # input not committed (at 8) when the standby closes
    sp = StorePartition(KV.name, 0)
    directory = tmp_path / "standby"
    first = StandbyReplica(KV, sp, topic, directory)
    assert first.resumed_from == -1
    read_into(first, kafka_bootstrap)
    first.fold({source: 8})
    assert set(first.pending) == {b"b"}
    first.close()
    checkpoint = (directory / CHECKPOINT_FILE).read_text(encoding="utf-8")
    assert json.loads(checkpoint)["changelog"]["offset"] == 3
    write(10, b"c", b"c1")  # the tail, written while the standby's instance was down
    write(11, b"a", b"a2")

    second = StandbyReplica(KV, sp, topic, directory)
    assert (second.resumed_from, second.position(), second.records_read) == (3, 3, 0)
    assert set(second.pending) == {b"b"}  # still unknown: not in the committed copy
    assert second.committed.get(b"b") == b"b1"
    read_into(second, kafka_bootstrap)
    assert second.records_read == 2  # the tail only
    everything = StandbyReplica(KV, sp, topic)  # in memory, from the beginning
    read_into(everything, kafka_bootstrap)
    assert dict(second.store.items()) == dict(everything.store.items())
    assert dict(second.store.items()) == dict(store.items())  # the active's
    everything.fold({source: 8})
    for committed in ({source: 8}, {source: 10}, {source: 12}):
        assert second.warm_store(committed) == everything.warm_store(committed)
    second.close()
    everything.close()

    (directory / CHECKPOINT_FILE).write_text("{not json", encoding="utf-8")
    third = StandbyReplica(KV, sp, topic, directory)
    assert (third.resumed_from, third.position(), third.store.count()) == (-1, -1, 0)
    read_into(third, kafka_bootstrap)
    assert third.records_read == 5
    assert dict(third.store.items()) == dict(store.items())
    with pytest.raises(StateDirectoryLockedError):
        StandbyReplica(KV, sp, topic, directory)
    third.close()
    writer.close()


@pytest.mark.broker
def test_session_store_restore_round_trip(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    app = unique_name("app")
    changelog_for(app, SESSIONS)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks()
    position = SourcePosition()
    with manager(tmp_path / "w", [SESSIONS], "sqlite", sink, position, kafka_bootstrap, app) as w:
        w.restore({})
        w.mark_processing()
        store = w.session_store("sessions")
        for offset, (key, start, end, value) in enumerate(
            [
                (b"alice", 10, 10, b"1"),
                (b"alice", 10, 25, b"2"),  # merged: the old session removed, a new one written
                (b"bob", -5, 3, b"3"),
                (b"carol", 100, 200, b"4"),
            ]
        ):
            position.set(source, offset)
            if key == b"alice" and end == 25:
                store.remove(b"alice", 10, 10, 25)
            store.put(key, start, end, value, max(end, 0))
        position.set(source, 4)
        store.remove(b"carol", 100, 200, 200)
        # Not a session key (compacted topics refuse null keys, so this is the malformed case).
        w.session_store("sessions").changelog.log(b"short", b"x", 200)  # type: ignore[union-attr]
        w.flush()
        sink.flush()
        expected = list(store.items())
    assert expected == [(b"alice", 10, 25, b"2"), (b"bob", -5, 3, b"3")]
    for engine in ENGINES:
        with manager(
            tmp_path / f"r-{engine}", [SESSIONS], engine, ListSink(), None, kafka_bootstrap, app
        ) as state:
            result = state.restore({source: 5}, timeout_s=60)
            assert list(state.session_store("sessions").items()) == expected
            # Writes to one key within a commit interval are sent once (alice@10..10 and carol
            # were put and removed): 4 of the 6 writes reach the changelog.
            assert result.records_applied == 4
            assert result.records_malformed == 1
            assert result.records_skipped_uncommitted == 0


@pytest.mark.broker
def test_restore_reads_committed_transactions_only_and_terminates(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    app = unique_name("app")
    kv_topic = changelog_for(app, KV)
    session_topic = changelog_for(app, SESSIONS)
    source = TopicPartitionId(create_topic("input"), 0)
    sink = sinks(unique_name("txn"))
    position = SourcePosition()
    with manager(
        tmp_path / "w", [KV, SESSIONS], "memory", sink, position, kafka_bootstrap, app
    ) as w:
        w.restore({})
        kv = w.kv_store("counts")
        sessions = w.session_store("sessions")
        sink.producer.begin_transaction()
        position.set(source, 1)
        kv.put(b"k", b"committed", 1000)
        w.flush()
        sink.producer.commit_transaction(30)
        sink.producer.begin_transaction()
        position.set(source, 2)
        kv.put(b"k", b"aborted", 2000)
        kv.put(b"other", b"aborted", 2000)
        sessions.put(b"s", 1, 2, b"aborted", 2000)  # this changelog gets only an aborted txn
        w.flush()
        sink.flush()  # on the broker, not purged from the queue by the abort
        sink.producer.abort_transaction(30)
    # Each changelog now ends with a transaction marker: a read_committed position can stop
    # short of the high watermark, and restore must still finish.
    with manager(
        tmp_path / "r", [KV, SESSIONS], "memory", ListSink(), None, kafka_bootstrap, app
    ) as r:
        result = r.restore({source: 100}, timeout_s=30)
        assert r.kv_store("counts").get(b"k") == b"committed"
        assert r.kv_store("counts").get(b"other") is None
        assert r.session_store("sessions").count() == 0
        assert result.records_applied == 1
        assert result.records_skipped_uncommitted == 0
        assert result.duration_s < 20
        # Offsets: 0 record, 1 commit marker, 2-3 aborted records, 4 abort marker.
        assert result.end_offsets[TopicPartitionId(kv_topic, 0)] >= 4
        # 0 aborted record, 1 abort marker.
        assert result.end_offsets[TopicPartitionId(session_topic, 0)] >= 1


@pytest.mark.broker
@pytest.mark.parametrize("kind", PERSISTENT)
def test_persistent_checkpoint_reuse_restores_only_the_tail(  # noqa: PLR0917
    kind: EngineKind,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    app = unique_name("app")
    topic = changelog_for(app, KV)
    changelog_tp = TopicPartitionId(topic, 0)
    source = TopicPartitionId(create_topic("input"), 0)
    checkpoint = checkpoint_path(tmp_path / app / "0_0", kind)
    sink = sinks()
    position = SourcePosition()

    def open_state() -> TaskStateManager:
        return manager(tmp_path, [KV], kind, sink, position, kafka_bootstrap, app)

    first = open_state()
    result = first.restore({})
    assert result.end_offsets == {changelog_tp: 0}
    first.mark_processing()
    for offset in range(3):
        position.set(source, offset)
        first.kv_store("counts").put(f"k{offset}".encode(), b"v", 1000 + offset)
    first.flush()
    sink.flush()
    first.commit({source: 3})  # changelog end offsets asked from the broker
    assert read_checkpoint(checkpoint) == Checkpoint(
        {source: 3}, {changelog_tp: 3}, frozenset({"counts"})
    )
    first.commit({source: 3})  # nothing processed since: the checkpoint still holds
    first.close()
    # A record appended after the checkpoint (e.g. by another owner of the task in between)
    # whose input is committed: the tail to restore.
    position.set(source, 1)
    ChangelogWriter(sink, topic, 0, position).log(b"tail", b"t", 1001)
    sink.flush()

    second = open_state()
    result = second.restore({source: 3})
    assert result.reused_checkpoint
    assert result.records_applied == 1  # the tail only
    assert result.stores_wiped == []
    assert result.end_offsets == {changelog_tp: 4}
    assert [k for k, _ in second.kv_store("counts").items()] == [b"k0", b"k1", b"k2", b"tail"]
    assert read_checkpoint(checkpoint) == Checkpoint(
        {source: 3}, {changelog_tp: 4}, frozenset({"counts"})
    )
    second.close()

    # Different committed offsets: wipe and restore everything (k2 and later are skipped).
    third = open_state()
    result = third.restore({source: 2})
    assert not result.reused_checkpoint
    assert result.stores_wiped == ["counts"]
    assert result.records_applied == 3
    assert result.records_skipped_uncommitted == 1
    assert [k for k, _ in third.kv_store("counts").items()] == [b"k0", b"k1", b"tail"]
    # The skipped k2 needs a correction, so no checkpoint until it is logged.
    assert result.corrections == 1
    assert not checkpoint.exists()
    third.mark_processing()
    third.flush()
    sink.flush()
    third.commit({source: 3}, {changelog_tp: 5})  # offsets as the collector reports them
    assert read_checkpoint(checkpoint) == Checkpoint(
        {source: 3}, {changelog_tp: 5}, frozenset({"counts"})
    )
    third.close()


@pytest.mark.broker
def test_restore_fails_clearly_without_changelog_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = unique_name("app")
    state = manager(tmp_path, [KV], "memory", ListSink(), None, kafka_bootstrap, app)
    with pytest.raises(RestoreError, match="changelog"):
        state.restore({}, timeout_s=15)
    state.close()


def test_buffered_changelog_writer_sends_the_latest_write_per_key() -> None:
    sink = ListSink()
    position = SourcePosition()
    writer = ChangelogWriter(sink, "cl", 0, position, buffered=True, max_buffered=3)
    source = TopicPartitionId("in", 0)
    for offset, (key, value) in enumerate([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"a", None)]):
        position.set(source, offset)
        writer.log(key, value, offset)
    assert sink.sent == []
    assert writer.flush() == 2
    # The latest write per key, with the newest source offset of the writes it stands for.
    assert [
        (key, value, decode_source(headers[0][1])[1])
        for _, _, key, value, _, headers in sink.sent
        if headers
    ] == [
        (b"a", None, 3),
        (b"b", b"1", 1),
    ]
    for key in (b"x", b"y", b"z"):  # reaching max_buffered flushes early
        writer.log(key, b"v", 9)
    assert len(sink.sent) == 5
    writer.log(b"gone", b"v", 10)
    writer.discard()
    assert writer.flush() == 0


@pytest.mark.broker
def test_a_thread_s_changelog_readers_restore_task_after_task(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    changelog_for: Callable[[str, StoreSpec], str],
    sinks: Callable[..., ProducerSink],
    tmp_path: Path,
) -> None:
    """One restoring thread's consumers serve one task after another (each restore sees only
    its own changelog, though the consumer read another's before), and a restore with nothing
    to read starts no record consumer."""
    source = TopicPartitionId(create_topic("input"), 0)
    apps = [unique_name("app") for _ in range(2)]
    for n, app in enumerate(apps):
        changelog_for(app, KV)
        sink = sinks()
        position = SourcePosition()
        with manager(tmp_path / f"w{n}", [KV], "memory", sink, position, kafka_bootstrap, app) as w:
            w.restore({})
            w.mark_processing()
            position.set(source, 0)
            w.kv_store("counts").put(f"task-{n}".encode(), b"1", 1)
            w.flush()
            sink.flush()
    readers = ChangelogReaders({"bootstrap.servers": kafka_bootstrap}, "test", "worker-0")
    try:
        empty = unique_name("app")
        changelog_for(empty, KV)
        with manager(tmp_path / "e", [KV], "memory", None, None, kafka_bootstrap, empty) as state:
            state.restore({source: 0}, timeout_s=60, readers=readers)
        assert readers._records is None  # nothing to read: never made
        consumers = []
        for n, app in enumerate(apps):
            with manager(
                tmp_path / f"r{n}", [KV], "memory", None, None, kafka_bootstrap, app
            ) as state:
                result = state.restore({source: 1}, timeout_s=60, readers=readers)
                assert list(state.kv_store("counts").items()) == [(f"task-{n}".encode(), b"1")]
                assert result.records_applied == 1
            consumers.append(readers.records())
            assert readers.records().assignment() == []  # released for the next task
        assert consumers[0] is consumers[1]
    finally:
        readers.close()

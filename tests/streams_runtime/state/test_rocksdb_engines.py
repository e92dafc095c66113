"""The RocksDB engines' own contract: pending writes visible before commit, one atomic batch per
commit, a crash losing only what was not committed, ordered scans across pending and committed
entries, and session keys whose byte order is the protocol's order."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from progress_control.extras import MissingExtraError
from streams_runtime.state import make_kv_engine, make_session_engine
from streams_runtime.state.rocksdb_engines import RocksDbKeyValueEngine, RocksDbSessionEngine

REPO = Path(__file__).resolve().parents[3]


def test_pending_writes_are_read_before_commit_and_kept_only_by_it(tmp_path: Path) -> None:
    path = tmp_path / "kv.rocksdb"
    engine = make_kv_engine("rocksdb", path)
    engine.put(b"a", b"1")
    engine.put(b"b", b"2")
    engine.commit()
    engine.put(b"a", b"1'")
    engine.delete(b"b")
    engine.put(b"c", b"3")
    assert (engine.get(b"a"), engine.get(b"b"), engine.get(b"c")) == (b"1'", None, b"3")
    assert list(engine.items()) == [(b"a", b"1'"), (b"c", b"3")]
    engine.close()  # without commit: the pending writes are gone
    reopened = make_kv_engine("rocksdb", path)
    assert list(reopened.items()) == [(b"a", b"1"), (b"b", b"2")]
    reopened.close()


def test_a_crash_loses_only_the_writes_since_the_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "kv.rocksdb"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from streams_runtime.state import make_kv_engine, make_session_engine
        kv = make_kv_engine("rocksdb", Path({str(path)!r}))
        sessions = make_session_engine("rocksdb", Path({str(path)!r} + "-s"))
        for i in range(1000):
            kv.put(b"k%04d" % i, b"committed")
        sessions.put(b"s", 1, 2, b"committed")
        kv.commit()
        sessions.commit()
        kv.put(b"k0000", b"uncommitted")
        kv.delete(b"k0001")
        kv.put(b"new", b"uncommitted")
        sessions.remove(b"s", 1, 2)
        os._exit(0)  # no close, no flush: as a SIGKILL would
        """
    )
    # cwd: ``-c`` puts it first on sys.path, so the child imports this tree's runtime.
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=REPO)
    kv = make_kv_engine("rocksdb", path)
    assert kv.count() == 1000
    assert {value for _, value in kv.items()} == {b"committed"}
    assert kv.get(b"new") is None
    kv.close()
    sessions = make_session_engine("rocksdb", Path(str(path) + "-s"))
    assert list(sessions.items()) == [(b"s", 1, 2, b"committed")]
    sessions.close()


def test_items_merge_pending_and_committed_in_order_across_pages(tmp_path: Path) -> None:
    engine = RocksDbKeyValueEngine(tmp_path / "kv.rocksdb")
    expected: dict[bytes, bytes] = {}
    for i in range(0, 2000, 2):  # even keys committed, over several pages
        key = i.to_bytes(2, "big")
        engine.put(key, b"old")
        expected[key] = b"old"
    engine.commit()
    for i in range(0, 2000, 3):  # pending: odd keys new, even keys replaced or deleted
        key = i.to_bytes(2, "big")
        if i % 4 == 0:
            engine.delete(key)
            expected.pop(key, None)
        else:
            engine.put(key, b"new")
            expected[key] = b"new"
    engine.put(b"", b"empty key first")
    engine.put(b"\xff" * 3, b"last")
    expected |= {b"": b"empty key first", b"\xff" * 3: b"last"}
    assert list(engine.items()) == sorted(expected.items())
    engine.commit()
    assert list(engine.items()) == sorted(expected.items())
    engine.clear()
    assert list(engine.items()) == []
    engine.close()


def test_session_keys_keep_byte_order_and_never_mix_prefixes(tmp_path: Path) -> None:
    engine = RocksDbSessionEngine(tmp_path / "s.rocksdb")
    keys = [b"", b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"ab"]
    for key in reversed(keys):
        engine.put(key, 5, 10, key + b"-late")
        engine.put(key, -(2**62), 3, key + b"-early")
    engine.commit()
    engine.put(b"a", 20, 30, b"pending")
    for key in keys:
        found = engine.find(key, -(2**63), 2**63 - 1)
        tail = [(20, 30, b"pending")] if key == b"a" else []
        assert found == [(-(2**62), 3, key + b"-early"), (5, 10, key + b"-late"), *tail]
        assert engine.find(key, 4, 100) == [(5, 10, key + b"-late"), *tail]
    items = list(engine.items())
    assert [item[0] for item in items] == sorted(item[0] for item in items)
    assert len(items) == 2 * len(keys) + 1
    engine.remove(b"a", 5, 10)  # pending removal hides a committed session
    assert engine.find(b"a", 4, 25) == [(20, 30, b"pending")]
    assert engine.purge_ended_before(4) == len(keys)
    engine.commit()
    assert engine.count() == len(keys)
    engine.close()


def test_readers_on_other_threads_while_the_stream_thread_writes(tmp_path: Path) -> None:
    engine = RocksDbKeyValueEngine(tmp_path / "kv.rocksdb")
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                keys = [key for key, _ in engine.items()]
                assert keys == sorted(keys)
                engine.get(b"k0")
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(3000):
        engine.put(b"k%d" % (i % 700), b"%d" % i)
        if i % 500 == 0:
            engine.commit()
    done.set()
    reader.join()
    engine.close()
    assert errors == []


def test_missing_rocksdict_names_the_setting_and_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def without_rocksdict(name: str, *args: object) -> object:
        return None if name == "rocksdict" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_rocksdict)
    with pytest.raises(MissingExtraError, match=r"state_engine=rocksdb .*\[runtime\]"):
        make_kv_engine("rocksdb", tmp_path / "kv.rocksdb")


def test_every_store_shares_one_bounded_memory(tmp_path: Path) -> None:
    """``rocksdb_memory_bytes``: the memtables of every store are charged to one shared block
    cache and flushed when they fill half of it. The bound is Kafka Streams' soft one: writes do
    not wait for flushes, so under load memtables being flushed still count until their flush
    ends (a store holds two at most); once flushes catch up the memtables are back within the
    budget, however much was written: 36 MB here, into six stores, against 8 MB. 0 leaves
    RocksDB's defaults."""
    from streams_runtime.state import bound_engine_memory, rocksdb_engines

    budget = 8 * 2**20
    written = 36 * 2**20
    bound_engine_memory("rocksdb", budget)
    try:
        write_buffers = rocksdb_engines._shared._write_buffers
        assert write_buffers is not None
        engines = [make_kv_engine("rocksdb", tmp_path / f"kv-{i}.rocksdb") for i in range(6)]
        value = b"v" * 1_000
        peak = 0
        for batch in range(6):  # 6 stores x 6 MB: far beyond the budget without flushes
            for i, engine in enumerate(engines):
                for n in range(1_000):
                    engine.put(b"%d-%d-%d" % (i, batch, n), value)
                engine.commit()
                peak = max(peak, write_buffers.get_usage())
        assert 0 < peak < written // 2
        deadline = time.monotonic() + 60
        while write_buffers.get_usage() > budget and time.monotonic() < deadline:
            time.sleep(0.05)  # background flushes still running
        assert write_buffers.get_usage() <= budget
        for engine in engines:
            engine.close()
        bound_engine_memory("rocksdb", 0)
        assert rocksdb_engines._shared._write_buffers is None  # each store its own defaults
        unbounded = make_kv_engine("rocksdb", tmp_path / "kv-defaults.rocksdb")
        unbounded.put(b"a", b"1")
        unbounded.commit()
        unbounded.close()
    finally:
        bound_engine_memory("rocksdb", rocksdb_engines.DEFAULT_MEMORY_BYTES)

"""Ordered reads of the engines and stores, without a broker (Kafka Streams' ``range``,
``reverseRange``, ``all``, ``prefixScan``, ``fetch(key, from, to)``, ``fetchAll(from, to)`` and
the session stores' ``fetch``/``findSessions``): inclusive and open bounds, reversed bounds
answering nothing, descending order, pages, pending RocksDB writes, and the record cache merged
over the store (cached values win, cached deletes hide stored entries)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime.state import (
    EngineKind,
    KeyValueEngine,
    KeyValueStore,
    SessionEngine,
    SessionStore,
    SourcePosition,
    TaskCaches,
    ThreadCache,
    WindowStore,
    make_kv_engine,
    make_session_engine,
    rocksdb_engines,
    sqlite_engines,
)
from streams_runtime.state.caching import merge_ordered
from streams_runtime.state.stores import EARLIEST, LATEST, windows_of
from tests.hypothesis_profiles import examples

ENGINES: list[EngineKind] = ["memory", "sqlite", "rocksdb"]
KEYS = [b"", b"a", b"ab", b"ab\x00", b"abc", b"ab\xff", b"ac", b"b", b"\xff"]  # byte order


def kv_engine(kind: EngineKind, path: Path) -> KeyValueEngine:
    return make_kv_engine(kind, path / f"kv.{kind}")


def session_engine(kind: EngineKind, path: Path) -> SessionEngine:
    return make_session_engine(kind, path / f"sessions.{kind}")


@pytest.fixture(params=ENGINES)
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueEngine]:
    engine = kv_engine(request.param, tmp_path)
    for n, key in enumerate(KEYS):
        engine.put(key, b"%d" % n)
    engine.commit()
    yield engine
    engine.close()


def _keys(entries: Iterator[tuple[bytes, bytes]]) -> list[bytes]:
    return [key for key, _ in entries]


# -- key-value engines ---------------------------------------------------------------------


def test_a_range_is_inclusive_and_ascending_by_key_bytes(kv: KeyValueEngine) -> None:
    assert _keys(kv.range(b"ab", b"abc")) == [b"ab", b"ab\x00", b"abc"]
    assert _keys(kv.range(b"ab\x01", b"ac")) == [b"abc", b"ab\xff", b"ac"]
    assert list(kv.range(b"b", b"b")) == [(b"b", b"7")]
    assert list(kv.range(b"aa", b"aa")) == []  # a bound that is no key


def test_open_bounds_and_all(kv: KeyValueEngine) -> None:
    assert _keys(kv.range(None, b"ab")) == [b"", b"a", b"ab"]
    assert _keys(kv.range(b"ac", None)) == [b"ac", b"b", b"\xff"]
    assert _keys(kv.range(None, None)) == KEYS
    assert _keys(kv.items()) == KEYS


def test_descending_is_the_same_entries_reversed(kv: KeyValueEngine) -> None:
    assert _keys(kv.range(b"ab", b"ac", reverse=True)) == [
        b"ac",
        b"ab\xff",
        b"abc",
        b"ab\x00",
        b"ab",
    ]
    assert _keys(kv.range(None, None, reverse=True)) == KEYS[::-1]
    assert _keys(kv.range(None, b"a", reverse=True)) == [b"a", b""]
    assert _keys(kv.range(b"b", None, reverse=True)) == [b"\xff", b"b"]


def test_reversed_bounds_answer_nothing(kv: KeyValueEngine) -> None:
    # Kafka Streams: "from > to" is an empty iterator (and a warning), never an error.
    assert list(kv.range(b"b", b"a")) == []
    assert list(kv.range(b"b", b"a", reverse=True)) == []


@pytest.mark.parametrize("kind", ENGINES)
def test_an_empty_engine_has_empty_ranges(kind: EngineKind, tmp_path: Path) -> None:
    engine = kv_engine(kind, tmp_path)
    assert list(engine.range(None, None)) == []
    assert list(engine.range(b"a", b"z", reverse=True)) == []
    engine.close()


@pytest.mark.parametrize("kind", ["sqlite", "rocksdb"])
def test_ranges_page_through_more_than_a_page(
    kind: EngineKind, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = sqlite_engines if kind == "sqlite" else rocksdb_engines
    monkeypatch.setattr(module, "_PAGE_SIZE", 3)
    engine = kv_engine(kind, tmp_path)
    keys = [b"k%02d" % n for n in range(20)]
    for key in keys:
        engine.put(key, key)
    engine.commit()
    assert _keys(engine.range(b"k03", b"k15")) == keys[3:16]
    assert _keys(engine.range(b"k03", b"k15", reverse=True)) == keys[3:16][::-1]
    assert _keys(engine.range(None, None, reverse=True)) == keys[::-1]
    assert _keys(engine.range(b"k18", None)) == keys[18:]
    engine.close()


def test_rocksdb_ranges_merge_pending_writes_both_ways(tmp_path: Path) -> None:
    engine = kv_engine("rocksdb", tmp_path)
    for key in (b"a", b"c", b"e", b"g"):
        engine.put(key, b"committed")
    engine.commit()
    engine.put(b"b", b"pending")
    engine.delete(b"c")
    engine.put(b"e", b"updated")
    engine.put(b"h", b"outside")
    expected = [(b"b", b"pending"), (b"e", b"updated"), (b"g", b"committed")]
    assert list(engine.range(b"b", b"g")) == expected
    assert list(engine.range(b"b", b"g", reverse=True)) == expected[::-1]
    engine.close()


def test_in_memory_order_follows_added_and_removed_keys(tmp_path: Path) -> None:
    engine = kv_engine("memory", tmp_path)
    engine.put(b"b", b"1")
    assert _keys(engine.range(None, None)) == [b"b"]
    engine.put(b"a", b"2")  # a new key: sorted again
    engine.put(b"b", b"3")  # an update: the order holds
    assert list(engine.range(None, None)) == [(b"a", b"2"), (b"b", b"3")]
    engine.delete(b"a")
    engine.delete(b"zz")  # absent: nothing changes
    assert list(engine.range(None, None)) == [(b"b", b"3")]


_BYTES = st.binary(max_size=3)


@settings(max_examples=examples(40))
@given(
    ops=st.lists(st.tuples(_BYTES, st.none() | _BYTES, st.booleans()), max_size=30),
    lower=st.none() | _BYTES,
    upper=st.none() | _BYTES,
    reverse=st.booleans(),
)
def test_every_engine_agrees_with_a_sorted_dict(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[bytes, bytes | None, bool]],
    lower: bytes | None,
    upper: bytes | None,
    reverse: bool,
) -> None:
    model: dict[bytes, bytes] = {}
    for key, value, _ in ops:
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    expected = sorted(
        (k, v)
        for k, v in model.items()
        if (lower is None or k >= lower) and (upper is None or k <= upper)
    )
    if reverse:
        expected.reverse()
    for kind in ENGINES:
        engine = kv_engine(kind, tmp_path_factory.mktemp(kind))
        for key, value, commit in ops:  # commits in between: RocksDB merges both
            if value is None:
                engine.delete(key)
            else:
                engine.put(key, value)
            if commit:
                engine.commit()
        assert list(engine.range(lower, upper, reverse=reverse)) == expected, kind
        engine.close()


def test_prefix_scan_is_the_range_of_keys_starting_with_it(kv: KeyValueEngine) -> None:
    store = KeyValueStore("s", 0, kv, None)
    assert _keys(store.prefix_scan(b"ab")) == [b"ab", b"ab\x00", b"abc", b"ab\xff"]
    assert _keys(store.prefix_scan(b"\xff")) == [b"\xff"]
    assert _keys(store.prefix_scan(b"z")) == []
    assert _keys(store.prefix_scan(b"")) == KEYS


# -- session and window engines --------------------------------------------------------------


@pytest.fixture(params=ENGINES)
def windows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionEngine]:
    engine = session_engine(request.param, tmp_path)
    for key, start in ((b"b", 0), (b"a", 0), (b"a", 10), (b"b", 20), (b"c", 10), (b"a", -5)):
        engine.put(key, start, start + 9, b"%s@%d" % (key, start))
    engine.commit()
    yield engine
    engine.close()


def test_windows_starting_in_a_range_of_every_key_by_start_then_key(
    windows: SessionEngine,
) -> None:
    found = windows.windows_starting(0, 10)
    assert [(k, s) for k, s, _, _ in found] == [(b"a", 0), (b"b", 0), (b"a", 10), (b"c", 10)]
    assert found[0] == (b"a", 0, 9, b"a@0")
    assert [(k, s) for k, s, _, _ in windows.windows_starting(-5, -5)] == [(b"a", -5)]
    assert windows.windows_starting(EARLIEST, LATEST)[-1][:2] == (b"b", 20)
    assert windows.windows_starting(11, 19) == []
    assert windows.windows_starting(10, 0) == []  # reversed: nothing


def test_rocksdb_windows_starting_sees_pending_writes(tmp_path: Path) -> None:
    engine = session_engine("rocksdb", tmp_path)
    engine.put(b"a", 0, 9, b"old")
    engine.put(b"b", 0, 9, b"gone")
    engine.commit()
    engine.put(b"a", 0, 9, b"new")
    engine.remove(b"b", 0, 9)
    engine.put(b"c", 5, 14, b"pending")
    assert engine.windows_starting(0, 5) == [(b"a", 0, 9, b"new"), (b"c", 5, 14, b"pending")]
    engine.close()


def test_windows_of_a_key_start_in_the_range(windows: SessionEngine) -> None:
    store = WindowStore("w", 0, windows, None)
    assert [s for s, _, _ in store.fetch_range(b"a", -5, 10)] == [-5, 0, 10]
    assert [s for s, _, _ in store.fetch_range(b"a", -4, 9)] == [0]  # by start, not overlap
    assert store.fetch_range(b"a", 10, -5) == []
    assert windows_of(store, b"zz", EARLIEST, LATEST) == []


@pytest.mark.parametrize("kind", ENGINES)
def test_sessions_of_a_key_by_end_then_start(kind: EngineKind, tmp_path: Path) -> None:
    store = SessionStore("s", 0, session_engine(kind, tmp_path), None)
    # Not what merged sessions look like, but it shows the order: by end, then start.
    for start, end in ((0, 30), (10, 20), (5, 20), (40, 50)):
        store.put(b"k", start, end, b"%d-%d" % (start, end), 0)
    store.put(b"other", 0, 100, b"x", 0)
    order = [(s, e) for s, e, _ in store.sessions(b"k")]
    assert order == [(5, 20), (10, 20), (0, 30), (40, 50)]
    assert [(s, e) for s, e, _ in store.sessions(b"k", reverse=True)] == order[::-1]
    # findSessions: ending at or after 25, starting at or before 40.
    assert [(s, e) for s, e, _ in store.sessions(b"k", 25, 40)] == [(0, 30), (40, 50)]
    assert store.sessions(b"none") == []
    store.engine.close()


# -- through the record cache -----------------------------------------------------------------


def _caches() -> TaskCaches:
    return TaskCaches(ThreadCache(1 << 20), "0_0", SourcePosition())


@pytest.mark.parametrize("kind", ENGINES)
def test_a_cached_range_merges_cache_and_store(kind: EngineKind, tmp_path: Path) -> None:
    inner = KeyValueStore("t", 0, kv_engine(kind, tmp_path), None)
    for key in (b"a", b"b", b"c", b"d"):
        inner.put(key, b"stored", 0)
    inner.engine.commit()
    store = _caches().kv_store(inner)
    store.put(b"b", b"cached", 1)  # wins over the store
    store.put(b"c", None, 1)  # a cached delete hides the stored entry
    store.put(b"bb", b"new", 1)  # only in the cache
    store.put(b"z", b"outside", 1)
    expected = [(b"b", b"cached"), (b"bb", b"new"), (b"d", b"stored")]
    assert list(store.range(b"b", b"d")) == expected
    assert list(store.range(b"b", b"d", reverse=True)) == expected[::-1]
    assert _keys(store.range(None, None)) == [b"a", b"b", b"bb", b"d", b"z"]
    assert _keys(store.range(None, None, reverse=True)) == [b"z", b"d", b"bb", b"b", b"a"]
    assert list(store.prefix_scan(b"b")) == [(b"b", b"cached"), (b"bb", b"new")]
    assert list(store.range(b"d", b"b")) == []
    # The same after the cache is flushed to the store.
    store.flush_cache()
    assert list(store.range(b"b", b"d")) == expected
    assert list(inner.range(b"b", b"d")) == expected
    inner.engine.close()


def test_merge_ordered_descending() -> None:
    stored = [(5, "s5"), (3, "s3"), (1, "s1")]
    cached: list[tuple[int, str | None]] = [(4, "c4"), (3, None), (1, "c1")]
    merged = list(merge_ordered(stored, cached, reverse=True))
    assert merged == [(5, "s5"), (4, "c4"), (1, "c1")]


@pytest.mark.parametrize("kind", ENGINES)
def test_cached_window_reads_merge_cache_and_store(kind: EngineKind, tmp_path: Path) -> None:
    inner = WindowStore("w", 0, session_engine(kind, tmp_path), None)
    for key, start in ((b"a", 0), (b"b", 0), (b"a", 10), (b"c", 20)):
        inner.put(key, start, start + 9, b"stored", 0)
    inner.engine.commit()
    store = _caches().window_store(inner)
    store.put(b"a", 0, 9, b"cached", 1)
    store.put(b"b", 0, 9, None, 1)  # deleted in the cache
    store.put(b"c", 10, 19, b"new", 1)
    assert store.windows_starting(0, 10) == [
        (b"a", 0, 9, b"cached"),
        (b"a", 10, 19, b"stored"),
        (b"c", 10, 19, b"new"),
    ]
    assert store.windows_starting(10, 0) == []
    assert store.fetch_range(b"a", 0, 10) == [(0, 9, b"cached"), (10, 19, b"stored")]
    assert store.fetch_range(b"b", 0, 10) == []
    sessions = _caches().session_store(
        SessionStore("s", 0, session_engine(kind, tmp_path / "s"), None)
    )
    sessions.put(b"k", 0, 5, b"first", 0)
    sessions.put(b"k", 10, 15, b"second", 0)
    sessions.flush_cache()
    sessions.put(b"k", 0, 5, None, 1)  # merged away, in the cache only
    sessions.put(b"k", 10, 20, b"grown", 1)
    assert sessions.sessions(b"k") == [(10, 15, b"second"), (10, 20, b"grown")]
    inner.engine.close()
    sessions.engine.close()

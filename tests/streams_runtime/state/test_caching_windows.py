"""The record cache over session and window stores, without a broker (Kafka Streams'
``CachingSessionStore``/``CachingWindowStore`` rules): the merged view of cache and store,
flushes and evictions, and windowed aggregations over cached stores agreeing with uncached ones.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streams_runtime.processors import Processor
from streams_runtime.processors.sessions import SessionAggregateProcessor, SuppressProcessor
from streams_runtime.processors.time_windows import (
    SlidingWindowAggregateProcessor,
    TimeWindowAggregateProcessor,
)
from streams_runtime.processors.windowed_aggregate import WindowedAggregateProcessor
from streams_runtime.record import Record, TopicPartitionId
from streams_runtime.serdes import Integer, String
from streams_runtime.state import (
    CachingSessionStore,
    CachingWindowStore,
    ChangelogWriter,
    InMemorySessionEngine,
    SessionStore,
    SourcePosition,
    TaskCaches,
    ThreadCache,
    WindowStore,
    make_session_engine,
    session_changelog_key,
)
from streams_runtime.state.caching import ENTRY_OVERHEAD, merge_ordered
from streams_runtime.windowed import Windowed
from streams_runtime.windows import SessionWindows, SlidingWindows, TimeWindows, WindowSpec
from tests.streams_runtime.processors.memory_context import MemoryContext
from tests.streams_runtime.state.record_sinks import ListSink

_BIG = 10 * 1024 * 1024
_SMALL = 9 * (ENTRY_OVERHEAD + 20) // 2  # room for about four windows: constant evictions
INPUT = TopicPartitionId("in", 0)


class WindowCachedContext(MemoryContext):
    """A task context whose window stores are logged and go through a record cache (none
    when ``max_bytes`` is ``None``)."""

    def __init__(self, max_bytes: int | None, engine_path: Path | None = None) -> None:
        super().__init__()
        self.engine_path = engine_path  # of a SQLite or RocksDB engine; in memory without
        self.position = SourcePosition()
        self.sink = ListSink()
        thread = None if max_bytes is None else ThreadCache(max_bytes)
        self.thread = thread
        self.caches = TaskCaches(thread, "0_0", self.position)

    def session_store(self, name: str) -> WindowStore:
        return self.window_store(name)

    def window_store(self, name: str) -> WindowStore:
        if name not in self.windows:
            changelog = ChangelogWriter(self.sink, f"{name}-changelog", 0, self.position)
            engine = (
                InMemorySessionEngine()
                if self.engine_path is None
                else make_session_engine(self.engine_path.suffix[1:], self.engine_path)  # type: ignore[arg-type]
            )
            self.windows[name] = WindowStore(name, 0, engine, changelog)
        return self.caches.window_store(self.windows[name])

    def commit(self) -> None:
        self.caches.flush()
        for store in self.windows.values():
            assert store.changelog is not None
            store.changelog.flush()


class _Collect(Processor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Windowed[Any], Any, int]] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.seen.append((record.key, record.value, record.timestamp))

    def latest(self) -> dict[Windowed[Any], tuple[Any, int]]:
        """Each window's last update (deleted windows left out)."""
        view: dict[Windowed[Any], tuple[Any, int]] = {}
        for key, value, ts in self.seen:
            if value is None:
                view.pop(key, None)
            else:
                view[key] = (value, ts)
        return view


def _store(
    max_bytes: int = _BIG,
) -> tuple[CachingSessionStore, WindowStore, ListSink, SourcePosition]:
    position = SourcePosition()
    sink = ListSink()
    inner = WindowStore(
        "w", 0, InMemorySessionEngine(), ChangelogWriter(sink, "w-changelog", 0, position)
    )
    cached = TaskCaches(ThreadCache(max_bytes), "0_0", position).window_store(inner)
    assert isinstance(cached, CachingWindowStore)
    return cached, inner, sink, position


def test_range_reads_see_cache_over_store_and_cached_deletes_hide_stored_windows() -> None:
    store, inner, _, _ = _store()
    inner.put(b"k", 0, 10, b"stored-0", 10)
    inner.put(b"k", 20, 30, b"stored-20", 30)
    inner.put(b"j", 0, 5, b"other-key", 5)
    store.put(b"k", 20, 30, None, 31)  # merged away, in the cache only
    store.put(b"k", 0, 10, b"cached-0", 11)
    store.put(b"k", 40, 50, b"cached-40", 50)
    assert store.find_sessions(b"k", 0, 100) == [(0, 10, b"cached-0"), (40, 50, b"cached-40")]
    assert store.find_sessions(b"k", 11, 45) == [(40, 50, b"cached-40")]
    assert store.fetch_range(b"k", 1, 100) == [(40, 50, b"cached-40")]
    assert store.fetch(b"k", 20, 30) is None
    assert store.fetch(b"k", 0, 10) == b"cached-0"
    assert list(store.items()) == [
        (b"j", 0, 5, b"other-key"),
        (b"k", 0, 10, b"cached-0"),
        (b"k", 40, 50, b"cached-40"),
    ]
    assert store.count() == 3
    assert inner.engine.find(b"k", 0, 100)[0] == (0, 10, b"stored-0")  # nothing written yet


def test_a_flush_writes_each_dirty_window_once_with_its_latest_source() -> None:
    store, inner, sink, position = _store()
    flushed: list[tuple[bytes, int, int, bytes | None, bytes | None, int]] = []
    store.set_flush_listener(
        lambda k, s, e, new, old, ts, _h: flushed.append((k, s, e, new, old, ts))
    )
    inner.put(b"k", 0, 0, b"old", 0)
    for offset, (start, end, value) in enumerate(
        [(0, 0, b"v1"), (5, 5, b"x"), (0, 0, b"v2"), (5, 5, None), (7, 9, None)]
    ):
        position.set(INPUT, offset)
        store.put(b"k", start, end, value, 100 + offset)
    assert inner.changelog is not None
    inner.changelog.flush()
    sink.sent.clear()  # the setup's own write
    store.flush_cache()
    inner.changelog.flush()
    # (5, 5) was made and deleted within the interval and (7, 9) never existed: neither is
    # written nor forwarded. (0, 0) is forwarded with what the store held before.
    assert flushed == [(b"k", 0, 0, b"v2", b"old", 102)]
    assert sink.changes() == [(session_changelog_key(b"k", 0, 0), b"v2", 2)]
    assert inner.engine.find(b"k", 0, 10) == [(0, 0, b"v2")]
    assert store.cache.size_bytes > 0  # v2 stays cached, clean; the deletes left
    assert store.find_sessions(b"k", 0, 10) == [(0, 0, b"v2")]


def test_eviction_flushes_the_store_cache_least_recently_used_first() -> None:
    entry = ENTRY_OVERHEAD + len(session_changelog_key(b"a", 0, 0)) + 1
    store, inner, _, _ = _store(2 * entry)
    flushed: list[bytes] = []
    store.set_flush_listener(lambda k, *_rest: flushed.append(k))
    store.put(b"a", 0, 0, b"1", 0)
    store.put(b"b", 0, 0, b"1", 0)
    assert flushed == []
    store.fetch(b"a", 0, 0)  # a read makes "a" the most recently used
    store.put(b"c", 0, 0, b"1", 0)
    assert flushed == [b"b", b"a", b"c"]
    assert [k for k, *_ in inner.items()] == [b"a", b"b", b"c"]
    assert store.cache.peek(session_changelog_key(b"b", 0, 0)) is None
    # The evicted window is read from the store again.
    assert store.find_sessions(b"b", 0, 0) == [(0, 0, b"1")]
    assert store.cache.stats.evictions == 1


def test_expiry_bypasses_the_cache_and_forwards_nothing() -> None:
    store, inner, _, _ = _store()
    flushed: list[bytes] = []
    store.set_flush_listener(lambda k, *_rest: flushed.append(k))
    store.put(b"k", 0, 10, b"v", 10)
    store.flush_cache()
    store.expire(b"k", 0, 10, 99)
    assert store.find_sessions(b"k", 0, 100) == []
    assert inner.engine.find(b"k", 0, 100) == []
    store.flush_cache()
    assert flushed == [b"k"]


def test_merge_ordered_is_one_ordered_pass() -> None:
    stored = iter([(1, "s1"), (3, "s3"), (5, "s5")])
    cached: list[tuple[int, str | None]] = [(0, "c0"), (3, None), (5, "c5"), (9, "c9")]
    assert list(merge_ordered(stored, cached)) == [(0, "c0"), (1, "s1"), (5, "c5"), (9, "c9")]


def _aggregation(kind: str, windows: WindowSpec) -> WindowedAggregateProcessor[Any, Any]:
    counting: dict[str, Any] = {"initializer": lambda: 0, "aggregator": lambda k, v, a: a + v}
    if kind == "session":
        assert isinstance(windows, SessionWindows)
        return SessionAggregateProcessor(
            "w", windows, String(), Integer(), merger=lambda k, a, b: a + b, **counting
        )
    if kind == "time":
        assert isinstance(windows, TimeWindows)
        return TimeWindowAggregateProcessor("w", windows, String(), Integer(), **counting)
    assert isinstance(windows, SlidingWindows)
    return SlidingWindowAggregateProcessor("w", windows, String(), Integer(), **counting)


_WINDOWS: dict[str, WindowSpec] = {
    "session": SessionWindows(gap_ms=5, grace_ms=10),
    "time": TimeWindows(size_ms=10, advance_ms=5, grace_ms=10),
    "sliding": SlidingWindows(time_difference_ms=8, grace_ms=10),
}


def _run(
    kind: str,
    records: list[tuple[str, int, int]],
    max_bytes: int | None,
    commit_every: int,
    engine_path: Path | None = None,
) -> tuple[_Collect, _Collect, dict[Any, Any], int]:
    """Feed ``records`` (key, timestamp, value) through an aggregation and a suppression;
    commit every ``commit_every`` records and at the end. Updates, final results, the store's
    windows, and the changelog records sent."""
    context = WindowCachedContext(max_bytes, engine_path)
    aggregate = _aggregation(kind, _WINDOWS[kind])
    updates, finals = _Collect(), _Collect()
    suppress = SuppressProcessor("final", _WINDOWS[kind], String(), Integer())
    suppress.children = [finals]
    aggregate.children = [updates, suppress]
    aggregate.init(context)
    suppress.init(context)
    for offset, (key, ts, value) in enumerate(records):
        context.position.set(INPUT, offset)
        aggregate.process(Record(key, value, ts))
        if (offset + 1) % commit_every == 0:
            context.commit()
    context.commit()
    aggregate.advance(10_000)  # every window final
    context.commit()
    stored = {(k, s, e): v for k, s, e, v in context.windows["w"].items()}
    return updates, finals, stored, len(context.sink.sent)


def _records(seed: str) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)  # noqa: S311 - test data
    records = []
    t = 0
    for _ in range(300):
        t += rng.choice([0, 1, 2, 3, 7])
        late = rng.random() < 0.15
        records.append((rng.choice("abcd"), max(0, t - rng.randint(0, 25) if late else t), 1))
    return records


@pytest.mark.parametrize("kind", ["session", "time", "sliding"])
@pytest.mark.parametrize("max_bytes", [_BIG, _SMALL])
def test_cached_aggregations_agree_with_uncached_ones_with_fewer_updates(
    kind: str, max_bytes: int
) -> None:
    _agree(kind, max_bytes, None)


@pytest.mark.parametrize("engine", ["sqlite", "rocksdb"])
@pytest.mark.parametrize("kind", ["session", "sliding"])
def test_persistent_engines_work_under_the_cache(kind: str, engine: str, tmp_path: Path) -> None:
    _agree(kind, _SMALL, tmp_path / f"store.{engine}")


def _agree(kind: str, max_bytes: int, engine_path: Path | None) -> None:
    records = _records(f"{kind}-{max_bytes}")
    plain_updates, plain_finals, plain_store, plain_sent = _run(kind, records, None, 17)
    cached_updates, cached_finals, cached_store, cached_sent = _run(
        kind, records, max_bytes, 17, engine_path
    )
    if kind == "sliding":
        # A record at exactly end + grace still updates a sliding window its suppression already
        # emitted, which emits it again (Kafka Streams does the same): when it was emitted first
        # depends on the cache, the last emission does not.
        assert cached_finals.latest() == plain_finals.latest()
    else:
        assert cached_finals.seen == plain_finals.seen
    assert cached_updates.latest() == plain_updates.latest()
    assert cached_store == plain_store
    assert len(cached_updates.seen) < len(plain_updates.seen)
    assert cached_sent <= plain_sent


def _suppressed_time_count(
    context: WindowCachedContext, windows: TimeWindows
) -> tuple[WindowedAggregateProcessor[Any, Any], SuppressProcessor, _Collect]:
    """A cached windowed count with a final-results suppression below it, both initialised on
    ``context`` at input offset 0; returns the count, the suppression and what it emits."""
    aggregate = _aggregation("time", windows)
    finals = _Collect()
    suppress = SuppressProcessor("final", windows, String(), Integer())
    suppress.children = [finals]
    aggregate.children = [suppress]
    aggregate.init(context)
    suppress.init(context)
    context.position.set(INPUT, 0)
    return aggregate, suppress, finals


def test_control_time_flushes_the_cache_before_suppression_sees_it() -> None:
    context = WindowCachedContext(_BIG)
    windows = TimeWindows(size_ms=10)
    aggregate, _, finals = _suppressed_time_count(context, windows)
    aggregate.process(Record("k", 2, 3))
    aggregate.process(Record("k", 5, 4))
    aggregate.advance(50)  # a control record: the window [0, 10) is final
    assert finals.seen == [(Windowed("k", 0, 10), 7, 4)]


def test_a_session_made_and_merged_away_within_an_interval_is_never_forwarded() -> None:
    context = WindowCachedContext(_BIG)
    aggregate = _aggregation("session", SessionWindows(gap_ms=5, grace_ms=100))
    updates = _Collect()
    aggregate.children = [updates]
    aggregate.init(context)
    for offset, ts in enumerate([0, 20, 10]):  # three sessions (gap 5)
        context.position.set(INPUT, offset)
        aggregate.process(Record("k", 1, ts))
    context.commit()
    assert updates.seen == [
        (Windowed("k", 0, 0), 1, 0),
        (Windowed("k", 20, 20), 1, 20),
        (Windowed("k", 10, 10), 1, 10),
    ]
    for offset, ts in enumerate([5, 15, 30], start=3):  # 5 and 15 merge 0..20; 30 alone
        context.position.set(INPUT, offset)
        aggregate.process(Record("k", 1, ts))
    context.commit()
    # The stored sessions merged away are forwarded as deletes (their end as timestamp); the
    # intermediate session [0, 10], made and merged away in the interval, is not.
    assert updates.seen[3:] == [
        (Windowed("k", 0, 0), None, 0),
        (Windowed("k", 10, 10), None, 10),
        (Windowed("k", 20, 20), None, 20),
        (Windowed("k", 0, 20), 5, 20),
        (Windowed("k", 30, 30), 1, 30),
    ]


def test_uncached_stores_are_returned_as_they_are_when_the_cache_is_off() -> None:
    inner = SessionStore("s", 0, InMemorySessionEngine(), None)
    assert TaskCaches(ThreadCache(0), "0_0", SourcePosition()).session_store(inner) is inner
    assert TaskCaches(None, "0_0", SourcePosition()).session_store(inner) is inner


def _finals_per_record(
    kind: str, records: list[tuple[str, int, int]], max_bytes: int | None
) -> list[list[tuple[Windowed[Any], Any, int]]]:
    """The final results out after each record, with no commit at all (a commit interval
    longer than the input)."""
    context = WindowCachedContext(max_bytes)
    aggregate = _aggregation(kind, _WINDOWS[kind])
    finals = _Collect()
    suppress = SuppressProcessor("final", _WINDOWS[kind], String(), Integer())
    suppress.children = [finals]
    aggregate.children = [_Collect(), suppress]
    aggregate.init(context)
    suppress.init(context)
    out = []
    for offset, (key, ts, value) in enumerate(records):
        context.position.set(INPUT, offset)
        before = len(finals.seen)
        aggregate.process(Record(key, value, ts))
        out.append(finals.seen[before:])
    return out


@pytest.mark.parametrize("kind", ["session", "time", "sliding"])
@pytest.mark.parametrize("max_bytes", [_BIG, _SMALL])
def test_data_closing_windows_emits_their_final_results_at_once_under_the_cache(
    kind: str, max_bytes: int
) -> None:
    # Without a commit, the cache alone would hold the final results back until one: every
    # window comes out at the record that closes it, as with the cache off.
    records = _records(f"closing-{kind}")
    plain = _finals_per_record(kind, records, None)
    cached = _finals_per_record(kind, records, max_bytes)
    assert sum(map(len, plain)) > 20
    if kind == "sliding":
        # A record at exactly end + grace may emit a window a second time (see above): the
        # same windows come out at each record, the last emission of each the same.
        assert [{w for w, _, _ in out} for out in cached] == [
            {w for w, _, _ in out} for out in plain
        ]
        flat = [r for out in cached for r in out]
        assert {w: (v, ts) for w, v, ts in flat} == {
            w: (v, ts) for out in plain for w, v, ts in out
        }
    else:
        assert cached == plain


def test_a_window_flushed_before_is_emitted_when_data_closes_it() -> None:
    # The window's updates reached the suppression at a commit; the record closing it stays in
    # the cache, yet the suppression learns its time and emits the window.
    context = WindowCachedContext(_BIG)
    windows = TimeWindows(size_ms=10, grace_ms=2)
    aggregate, suppress, finals = _suppressed_time_count(context, windows)
    aggregate.process(Record("k", 2, 3))
    context.commit()
    aggregate.process(Record("k", 5, 11))  # [0, 10) open until 12
    assert finals.seen == []
    aggregate.process(Record("other", 1, 12))
    assert finals.seen == [(Windowed("k", 0, 10), 2, 3)]
    assert suppress.observed_stream_time == 12

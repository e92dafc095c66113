"""A flush of the record cache whose listener (user code below the store) raises on one entry:
every other entry is still written and forwarded, or stays dirty for the next flush, for each
store kind (key-value, window, session)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams_runtime.record import TopicPartitionId
from streams_runtime.state import (
    ChangelogWriter,
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueStore,
    SessionStore,
    SourcePosition,
    TaskCaches,
    ThreadCache,
    WindowStore,
)
from tests.streams_runtime.state.record_sinks import ListSink

KEYS = [b"a", b"b", b"c", b"d"]
BAD = b"b"


class UserCodeError(Exception):
    pass


class _Store:
    """One cached store of ``kind``, its flush listener raising on ``BAD``'s first forward."""

    def __init__(self, kind: str) -> None:
        position = SourcePosition()
        position.set(TopicPartitionId("in", 0), 0)
        self.sink = ListSink()
        self.caches = TaskCaches(ThreadCache(10 * 1024 * 1024), "0_0", position)
        changelog = ChangelogWriter(self.sink, f"{kind}-changelog", 0, position)
        self.forwarded: list[bytes] = []
        self.kind = kind
        self.store: Any
        if kind == "key-value":
            inner = KeyValueStore(kind, 0, InMemoryKeyValueEngine(), changelog)
            self.store = self.caches.kv_store(inner)
            self.store.set_flush_listener(lambda key, *_: self._forward(key))
            self.written: Callable[[bytes], bool] = lambda k: inner.get(k) is not None
        else:
            windowed = (WindowStore if kind == "window" else SessionStore)(
                kind, 0, InMemorySessionEngine(), changelog
            )
            self.store = (
                self.caches.window_store(windowed)
                if isinstance(windowed, WindowStore)
                else self.caches.session_store(windowed)
            )
            self.store.set_flush_listener(lambda key, *_: self._forward(key))
            self.written = lambda k: windowed.fetch(k, 0, 10) is not None

    def _forward(self, key: bytes) -> None:
        if key == BAD and BAD not in self.forwarded:
            self.forwarded.append(BAD)  # it reached user code, which raised
            raise UserCodeError(key)
        self.forwarded.append(key)

    def put_all(self) -> None:
        for n, key in enumerate(KEYS):
            if self.kind == "key-value":
                self.store.put(key, b"v", n)
            else:
                self.store.put(key, 0, 10, b"v", n)


@pytest.mark.parametrize("kind", ["key-value", "window", "session"])
def test_a_commit_flush_hands_the_failure_to_the_policy_and_goes_on(kind: str) -> None:
    store = _Store(kind)
    store.put_all()
    failures: list[Exception] = []
    store.caches.flush(failures.append)
    assert [type(f) for f in failures] == [UserCodeError]
    assert store.forwarded == KEYS  # the failing one reached user code; all the others too
    assert all(store.written(k) for k in KEYS)
    assert not any(s.cache.dirty for s in store.caches.caches())


@pytest.mark.parametrize("kind", ["key-value", "window", "session"])
def test_entries_after_the_failing_one_stay_dirty_when_the_failure_is_raised(kind: str) -> None:
    # An eviction while a record is processed: the failure goes up to the record's policy,
    # and the entries the flush did not reach are flushed next time.
    store = _Store(kind)
    store.put_all()
    with pytest.raises(UserCodeError):
        store.caches.flush()
    assert store.forwarded == [b"a", BAD]
    assert not store.written(b"c")
    assert any(s.cache.dirty for s in store.caches.caches())
    store.caches.flush()
    assert store.forwarded == KEYS
    assert all(store.written(k) for k in KEYS)

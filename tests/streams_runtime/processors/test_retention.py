"""The purge of expired windows: tombstones for what is expired, at most every 30 seconds."""

from __future__ import annotations

import pytest

from streams_runtime.processors import retention
from streams_runtime.processors.retention import RetentionPurge
from streams_runtime.state import InMemorySessionEngine, WindowStore


def test_expired_windows_are_removed_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(retention.time, "monotonic", lambda: now[0])
    store = WindowStore("w", 0, InMemorySessionEngine(), None)
    for start in (0, 10, 20):
        store.put(b"k", start, start + 10, b"v", start)
    purge = RetentionPurge()
    purge.run(store, lambda start, _end: start < 15, 100)
    assert store.count() == 3  # too soon after it was made
    now[0] += 30.0
    purge.run(store, lambda start, _end: start < 15, 100)
    assert [s for _k, s, _e, _v in store.items()] == [20]
    store.put(b"k", 5, 15, b"v", 100)
    purge.run(store, lambda start, _end: start < 15, 100)
    assert store.count() == 2  # the next purge is 30 s away again

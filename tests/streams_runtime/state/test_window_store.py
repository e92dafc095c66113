"""Window stores: time windows and join buffers kept as intervals, read by window start."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_runtime.state import (
    StoreSpec,
    WindowStore,
    changelog_topic_config,
    make_session_engine,
    session_changelog_key,
)


@pytest.fixture(params=["memory", "sqlite", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> WindowStore:
    path = tmp_path / f"windows.{request.param}" if request.param != "memory" else None
    return WindowStore("w", 0, make_session_engine(request.param, path), None)


def test_fetch_range_selects_windows_by_start(store: WindowStore) -> None:
    for start in (0, 10, 20, 30):
        store.put(b"k", start, start + 15, f"v{start}".encode(), start)
    store.put(b"other", 10, 25, b"x", 10)
    assert store.fetch_range(b"k", 10, 20) == [(10, 25, b"v10"), (20, 35, b"v20")]
    assert store.fetch_range(b"k", 11, 19) == []
    assert store.fetch(b"k", 30, 45) == b"v30"


def test_join_buffer_points_are_found_within_the_join_window(store: WindowStore) -> None:
    for ts in (100, 105, 110):
        store.put(b"k", ts, ts, str(ts).encode(), ts)
    assert [s for s, _, _ in store.fetch_range(b"k", 100, 105)] == [100, 105]
    store.remove(b"k", 105, 105, 120)
    assert [s for s, _, _ in store.fetch_range(b"k", 0, 1_000)] == [100, 110]


def test_restore_reads_the_session_changelog_key_format(store: WindowStore) -> None:
    store.restore(session_changelog_key(b"k", 0, 60_000), b"3")
    assert store.fetch_range(b"k", 0, 0) == [(0, 60_000, b"3")]
    store.restore(session_changelog_key(b"k", 0, 60_000), None)
    assert store.count() == 0


def test_window_specs_need_a_retention() -> None:
    assert changelog_topic_config(StoreSpec("w", "window", retention_ms=1))["cleanup.policy"] == (
        "compact"
    )
    with pytest.raises(ValueError, match="window store 'w' needs retention_ms"):
        changelog_topic_config(StoreSpec("w", "window"))

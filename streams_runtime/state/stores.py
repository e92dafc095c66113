"""The stores processors use: an engine for local reads and writes, plus an optional changelog.

Every write goes to the engine and, when the store is logged, to its changelog partition, with
the given timestamp and the source header of the input that caused it: the task's current input
record unless the write names another (a cache's write-back). ``restore``
applies a changelog record without logging it.

Reads in order, as Kafka Streams' read-only stores give them: a key-value store's key range
(``range``, ``reverseRange``, ``all``, ``prefixScan``: :meth:`KeyValueStore.range`,
:meth:`KeyValueStore.prefix_scan`), a session store's sessions of a key by end then start
(``fetch``, ``findSessions`` and their backward twins: :meth:`SessionStore.sessions`), a window
store's windows of a key by start (``fetch(key, from, to)``: :meth:`WindowStore.fetch_range`)
and of every key (``fetchAll(from, to)``: :meth:`SessionStore.windows_starting`). A cached store
overrides the reads it merges with its cache; the others are built on those.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

from streams_runtime.record import Headers
from streams_runtime.state.changelog import (
    ChangelogWriter,
    InputRef,
    session_changelog_key,
    split_session_changelog_key,
)
from streams_runtime.state.engines import (
    EngineKind,
    KeyValueEngine,
    SessionEngine,
    make_kv_engine,
    make_session_engine,
)
from streams_runtime.state.spec import StoreSpec

__all__ = [
    "EARLIEST",
    "LATEST",
    "FlushListener",
    "KeyValueStore",
    "SessionStore",
    "WindowFlushListener",
    "WindowStore",
    "open_store",
    "windows_of",
]

FlushListener = Callable[[bytes, bytes | None, bytes | None, int, Headers | None], None]
"""``(key, new value, old value, timestamp, headers)`` of one flushed dirty entry."""

EARLIEST = -(2**63)
"""The earliest time a store holds (Kafka Streams' ``Long.MIN_VALUE``): no bound."""
LATEST = 2**63 - 1
"""The latest time a store holds (``Long.MAX_VALUE``): no bound."""

WindowFlushListener = Callable[
    [bytes, int, int, bytes | None, bytes | None, int, Headers | None], None
]
"""``(key, start, end, new value, old value, timestamp, headers)`` of one flushed window."""


class KeyValueStore:
    """One partition of a key-value store (bytes to bytes)."""

    def __init__(
        self,
        name: str,
        partition: int,
        engine: KeyValueEngine,
        changelog: ChangelogWriter | None,
    ) -> None:
        self.name = name
        self.partition = partition
        self.engine = engine
        self.changelog = changelog

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None``."""
        return self.engine.get(key)

    def set_flush_listener(self, listener: FlushListener) -> bool:
        """Forward updates when a record cache flushes them, through ``listener``; whether this
        store caches (Kafka Streams' ``CachedStateStore.setFlushListener``). A store without a
        cache writes at once, so the caller forwards its updates itself."""
        return False

    def flush_cache(self) -> None:
        """Write (and forward) what the record cache holds dirty; nothing without a cache."""

    def put(
        self,
        key: bytes,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None = None,
        *,
        source: InputRef | None = None,
    ) -> None:
        """Write ``key``; ``None`` deletes it (a tombstone in the changelog). ``headers`` are
        the record context a cached store forwards with the update (not stored); ``source`` the
        input that caused the write when it is not the one being processed."""
        if value is None:
            self.engine.delete(key)
        else:
            self.engine.put(key, value)
        if self.changelog is not None:
            self.changelog.log(key, value, timestamp, source=source)

    def delete(self, key: bytes, timestamp: int) -> None:
        """Same as ``put(key, None, timestamp)``."""
        self.put(key, None, timestamp)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """All entries, sorted by key."""
        return self.engine.items()

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lower <= key <= upper`` (``None``: unbounded), ascending by key bytes
        (descending with ``reverse``); none when ``lower > upper``, as Kafka Streams'
        ``range``/``reverseRange``."""
        return self.engine.range(lower, upper, reverse=reverse)

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries whose key starts with ``prefix``, ascending (Kafka Streams' ``prefixScan``,
        given the prefix serialized): the range from ``prefix`` on, while keys match."""
        return itertools.takewhile(
            lambda entry: entry[0].startswith(prefix), self.range(prefix, None)
        )

    def count(self) -> int:
        """How many entries the store holds (may scan the store: never a truth test)."""
        return self.engine.count()

    def restore(self, key: bytes, value: bytes | None) -> None:
        """Apply one changelog record (no logging)."""
        if value is None:
            self.engine.delete(key)
        else:
            self.engine.put(key, value)

    def __repr__(self) -> str:
        return f"KeyValueStore({self.name!r}, partition={self.partition})"


class SessionStore:
    """One partition of a session store: ``(key, start, end) -> value``, bounds inclusive."""

    def __init__(
        self,
        name: str,
        partition: int,
        engine: SessionEngine,
        changelog: ChangelogWriter | None,
    ) -> None:
        self.name = name
        self.partition = partition
        self.engine = engine
        self.changelog = changelog

    def find_sessions(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        """Sessions ``(start, end, value)`` of ``key`` with ``end >= earliest_end`` and
        ``start <= latest_start``, sorted by ``(start, end)``."""
        return self.engine.find(key, earliest_end, latest_start)

    def fetch(self, key: bytes, start: int, end: int) -> bytes | None:
        """The value of exactly the session ``(key, start, end)``, or ``None``."""
        return self.engine.get(key, start, end)

    def sessions(
        self,
        key: bytes,
        earliest_end: int = EARLIEST,
        latest_start: int = LATEST,
        *,
        reverse: bool = False,
    ) -> list[tuple[int, int, bytes]]:
        """:meth:`find_sessions` in Kafka Streams' order: by end, then start (``fetch(key)``,
        ``findSessions``; descending with ``reverse``, their ``backward`` twins). Built on
        :meth:`find_sessions`, so a cached store's merged view is what it orders."""
        found = self.find_sessions(key, earliest_end, latest_start)
        found.sort(key=lambda s: (s[1], s[0]), reverse=reverse)
        return found

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        """Every key's windows ``(key, start, end, value)`` starting in ``[time_from,
        time_to]``, sorted by ``(start, key, end)``; none when ``time_from > time_to``."""
        return self.engine.windows_starting(time_from, time_to)

    def set_flush_listener(self, listener: WindowFlushListener) -> bool:
        """Forward updates when a record cache flushes them, through ``listener``; whether this
        store caches (see :meth:`KeyValueStore.set_flush_listener`)."""
        return False

    def flush_cache(self) -> None:
        """Write (and forward) what the record cache holds dirty; nothing without a cache."""

    def put(  # noqa: PLR0917 - the window, its value, and the record context
        self,
        key: bytes,
        start: int,
        end: int,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None = None,
        *,
        source: InputRef | None = None,
    ) -> None:
        """Write the session ``(key, start, end)``; ``None`` removes it (a tombstone).
        ``headers``, ``source``: as for :meth:`KeyValueStore.put`."""
        if value is None:
            self.engine.remove(key, start, end)
        else:
            self.engine.put(key, start, end, value)
        if self.changelog is not None:
            changelog_key = session_changelog_key(key, start, end)
            self.changelog.log(changelog_key, value, timestamp, source=source)

    def remove(self, key: bytes, start: int, end: int, timestamp: int) -> None:
        """Same as ``put(key, start, end, None, timestamp)``."""
        self.put(key, start, end, None, timestamp)

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        """All sessions ``(key, start, end, value)``, sorted by ``(key, end, start)``."""
        return self.engine.items()

    def purge_ended_before(self, end: int) -> int:
        """Local retention: drop sessions ending before ``end`` (not logged: the changelog
        topic's time retention removes them there); returns how many were dropped."""
        return self.engine.purge_ended_before(end)

    def count(self) -> int:
        """How many sessions the store holds (may scan the store: never a truth test)."""
        return self.engine.count()

    def expire(self, key: bytes, start: int, end: int, timestamp: int) -> None:
        """Delete a window retention expired (a tombstone in the changelog); a cached store
        bypasses its cache, as expiry is no update to forward."""
        self.put(key, start, end, None, timestamp)

    def restore(self, changelog_key: bytes, value: bytes | None) -> None:
        """Apply one changelog record (no logging); ``ValueError`` on a malformed key."""
        key, start, end = split_session_changelog_key(changelog_key)
        if value is None:
            self.engine.remove(key, start, end)
        else:
            self.engine.put(key, start, end, value)

    def __repr__(self) -> str:
        return f"SessionStore({self.name!r}, partition={self.partition})"


class WindowStore(SessionStore):
    """One partition of a window store: ``(key, start, end) -> value``.

    Time-window aggregations keep one entry per window ``[start, start + size)``; stream-stream
    joins buffer each side's records as the point ``[timestamp, timestamp]``. Windows are
    intervals too, so a window store is a session store (same engines, changelog key format,
    restore and standby path) that is also read by window start.
    """

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> list[tuple[int, int, bytes]]:
        """Windows ``(start, end, value)`` of ``key`` starting in ``[time_from, time_to]``,
        sorted by ``(start, end)`` (Kafka Streams' ``fetch(key, timeFrom, timeTo)``)."""
        return windows_of(self, key, time_from, time_to)

    def __repr__(self) -> str:
        return f"WindowStore({self.name!r}, partition={self.partition})"


def windows_of(
    store: SessionStore, key: bytes, time_from: int, time_to: int
) -> list[tuple[int, int, bytes]]:
    """The windows ``(start, end, value)`` of ``key`` in ``store`` starting in ``[time_from,
    time_to]``, by ``(start, end)``: :meth:`SessionStore.find_sessions` (a window starting at or
    after ``time_from`` ends there or later), so any window store, cached or not, answers it."""
    if time_from > time_to:
        return []
    return [w for w in store.find_sessions(key, time_from, time_to) if w[0] >= time_from]


def open_store(
    spec: StoreSpec,
    partition: int,
    engine: EngineKind,
    path: Path | None = None,
    changelog: ChangelogWriter | None = None,
) -> KeyValueStore | SessionStore:
    """Partition ``partition`` of the store ``spec`` asks for, on a new ``engine`` (SQLite at
    ``path``), logging to ``changelog`` when given."""
    if spec.kind == "key_value":
        return KeyValueStore(spec.name, partition, make_kv_engine(engine, path), changelog)
    store_class = WindowStore if spec.kind == "window" else SessionStore
    return store_class(spec.name, partition, make_session_engine(engine, path), changelog)

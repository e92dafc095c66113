"""Storage engines: raw-bytes key-value and session tables, one instance per store partition.

Three implementations of each kind:

- in memory (dicts; state lives only as long as the process and is rebuilt from the changelog on
  every start);
- SQLite (stdlib ``sqlite3``; :mod:`streams_runtime.state.sqlite_engines`), persistent and
  *transactional*: writes go into one open transaction that ``commit`` makes durable, so a store
  commit can be aligned with the runtime's commit (local state and its checkpoint describe the
  same committed input position), and it needs no native wheel;
- RocksDB (``rocksdict``, the ``runtime`` extra; :mod:`streams_runtime.state.rocksdb_engines`),
  persistent with the same commit contract: one write batch per commit.

Engines know nothing about changelogs or serialization; the stores in ``stores.py`` add those.
Every engine is safe to call from several threads (interactive queries read while the stream
thread writes); reads see the stream thread's not yet committed writes, as in Kafka Streams.

Ordered reads (Kafka Streams' ``KeyValueStore.range``/``reverseRange`` and the window stores'
``fetchAll``): a key-value engine iterates a key range in byte order either way
(:meth:`KeyValueEngine.range`; SQLite and RocksDB seek to the bound and page, memory bisects
a sorted list of its keys, re-sorted only after a key was added or removed), and a session
engine lists every key's windows starting in a time range
(:meth:`SessionEngine.windows_starting`; SQLite narrows by its index on the window end,
memory and RocksDB scan every window: neither has a time index).
"""

from __future__ import annotations

import sqlite3
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Protocol, get_args, runtime_checkable

from progress_control.extras import require_extra

__all__ = [
    "ENGINE_FILE_ERRORS",
    "ENGINE_KINDS",
    "EngineFileError",
    "EngineKind",
    "InMemoryKeyValueEngine",
    "InMemorySessionEngine",
    "KeyValueEngine",
    "SessionEngine",
    "empty_range",
    "engine_files",
    "make_kv_engine",
    "make_session_engine",
]

EngineKind = Literal["memory", "sqlite", "rocksdb"]
ENGINE_KINDS: tuple[EngineKind, ...] = get_args(EngineKind)


class EngineFileError(Exception):
    """A persistent engine's files cannot be opened (damaged, or not a database)."""


# What opening a damaged store raises, whatever its engine: the runtime then recreates it.
ENGINE_FILE_ERRORS: tuple[type[Exception], ...] = (sqlite3.DatabaseError, EngineFileError)


@runtime_checkable
class KeyValueEngine(Protocol):
    """A sorted map of byte keys to byte values."""

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None``."""
        ...

    def put(self, key: bytes, value: bytes) -> None:
        """Insert or replace ``key``."""
        ...

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (no-op when absent)."""
        ...

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """All entries, sorted by key. Writes made while iterating are allowed; whether the
        iteration sees them is unspecified."""
        ...

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The entries with ``lower <= key <= upper`` (``None``: unbounded on that side), in
        ascending byte order of their keys, descending with ``reverse``; none when ``lower >
        upper`` (Kafka Streams' ``range``/``reverseRange``). Writes made while iterating: as
        :meth:`items`."""
        ...

    def count(self) -> int:
        """How many entries there are (RocksDB scans: never a truth test)."""
        ...

    def commit(self) -> None:
        """Make the writes since the last commit durable (no-op in memory)."""
        ...

    def clear(self) -> None:
        """Drop every entry, durably (uncommitted writes are discarded too)."""
        ...

    def close(self) -> None:
        """Release the engine; writes not committed are discarded."""
        ...


@runtime_checkable
class SessionEngine(Protocol):
    """Sessions ``(key, start, end) -> value``, ``start <= end``, both inclusive."""

    def find(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        """Sessions ``(start, end, value)`` of ``key`` with ``end >= earliest_end`` and
        ``start <= latest_start``, sorted by ``(start, end)``."""
        ...

    def get(self, key: bytes, start: int, end: int) -> bytes | None:
        """The value of exactly the session ``(key, start, end)``, or ``None`` (a point read:
        cache flushes and fetches ask for one window, not a range)."""
        ...

    def put(self, key: bytes, start: int, end: int, value: bytes) -> None:
        """Insert or replace the session ``(key, start, end)``."""
        ...

    def remove(self, key: bytes, start: int, end: int) -> None:
        """Remove the session ``(key, start, end)`` (no-op when absent)."""
        ...

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        """All sessions ``(key, start, end, value)``, sorted by ``(key, end, start)``. Writes made
        while iterating are allowed; whether the iteration sees them is unspecified."""
        ...

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        """Every key's windows ``(key, start, end, value)`` with ``time_from <= start <=
        time_to``, sorted by ``(start, key, end)``; none when ``time_from > time_to`` (Kafka
        Streams' ``ReadOnlyWindowStore.fetchAll(timeFrom, timeTo)``)."""
        ...

    def purge_ended_before(self, end: int) -> int:
        """Drop every session whose end is before ``end``; returns how many were dropped.

        Local retention only: nothing is logged, the changelog topic has its own time retention.
        """
        ...

    def count(self) -> int:
        """How many entries there are (RocksDB scans: never a truth test)."""
        ...

    def commit(self) -> None:
        """Make the writes since the last commit durable (no-op in memory)."""
        ...

    def clear(self) -> None:
        """Drop every session, durably (uncommitted writes are discarded too)."""
        ...

    def close(self) -> None:
        """Release the engine; writes not committed are discarded."""
        ...


# --------------------------------------------------------------------------------------------
# In memory


class InMemoryKeyValueEngine:
    """A dict, and its keys in byte order (sorted again by the first ordered read after a key
    was added or removed; an update of a key keeps them). Ordered reads copy the entries in
    range under the lock, so writes during iteration are safe. A range read of a store whose
    keys churn is a sort of every key: a sorted scan, not an index (Kafka Streams'
    ``InMemoryKeyValueStore`` keeps a ``TreeMap``)."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = []
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        with self._lock:
            if key not in self._data:
                self._sorted = None
            self._data[key] = value

    def delete(self, key: bytes) -> None:
        with self._lock:
            if self._data.pop(key, None) is not None:
                self._sorted = None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        if empty_range(lower, upper):
            return iter(())
        with self._lock:
            keys = self._sorted
            if keys is None:
                keys = self._sorted = sorted(self._data)
            first = 0 if lower is None else bisect_left(keys, lower)
            last = len(keys) if upper is None else bisect_right(keys, upper)
            data = self._data
            snapshot = [(key, data[key]) for key in keys[first:last]]
        if reverse:
            snapshot.reverse()
        return iter(snapshot)

    def count(self) -> int:
        return len(self._data)

    def commit(self) -> None:
        """Nothing to do: memory is never durable."""

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._sorted = []

    def close(self) -> None:
        self.clear()


class InMemorySessionEngine:
    """Per key, a dict ``(start, end) -> value``; a key's sessions are few (they merge), so
    scanning them in ``find`` is cheaper than maintaining an ordered index."""

    def __init__(self) -> None:
        self._data: dict[bytes, dict[tuple[int, int], bytes]] = {}
        self._count = 0
        self._lock = threading.Lock()

    def find(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        with self._lock:
            sessions = self._data.get(key)
            if not sessions:
                return []
            found = [
                (start, end, value)
                for (start, end), value in sessions.items()
                if end >= earliest_end and start <= latest_start
            ]
        found.sort(key=lambda s: (s[0], s[1]))
        return found

    def get(self, key: bytes, start: int, end: int) -> bytes | None:
        with self._lock:
            sessions = self._data.get(key)
            return None if sessions is None else sessions.get((start, end))

    def put(self, key: bytes, start: int, end: int, value: bytes) -> None:
        check_session(start, end)
        with self._lock:
            sessions = self._data.setdefault(key, {})
            if (start, end) not in sessions:
                self._count += 1
            sessions[(start, end)] = value

    def remove(self, key: bytes, start: int, end: int) -> None:
        with self._lock:
            sessions = self._data.get(key)
            if sessions is None or sessions.pop((start, end), None) is None:
                return
            self._count -= 1
            if not sessions:
                del self._data[key]

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        with self._lock:
            snapshot = [
                (key, start, end, value)
                for key, sessions in self._data.items()
                for (start, end), value in sessions.items()
            ]
        snapshot.sort(key=lambda s: (s[0], s[2], s[1]))
        return iter(snapshot)

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        # A scan of every window: no index by time (the windows of a key are few, keys many).
        with self._lock:
            found = [
                (key, start, end, value)
                for key, sessions in self._data.items()
                for (start, end), value in sessions.items()
                if time_from <= start <= time_to
            ]
        found.sort(key=lambda w: (w[1], w[0], w[2]))
        return found

    def purge_ended_before(self, end: int) -> int:
        purged = 0
        with self._lock:
            for key in list(self._data):
                sessions = self._data[key]
                old = [window for window in sessions if window[1] < end]
                for window in old:
                    del sessions[window]
                purged += len(old)
                if not sessions:
                    del self._data[key]
            self._count -= purged
        return purged

    def count(self) -> int:
        return self._count

    def commit(self) -> None:
        """Nothing to do: memory is never durable."""

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._count = 0

    def close(self) -> None:
        self.clear()


def empty_range(lower: bytes | None, upper: bytes | None) -> bool:
    """Whether ``[lower, upper]`` holds no key: both bounds given and ``lower > upper`` (Kafka
    Streams answers such a range with an empty iterator, not an error)."""
    return lower is not None and upper is not None and lower > upper


def check_session(start: int, end: int) -> None:
    """``ValueError`` unless ``start <= end``."""
    if start > end:
        raise ValueError(f"session start {start} is after its end {end}")


# --------------------------------------------------------------------------------------------
# Factories


def make_kv_engine(kind: EngineKind, path: Path | None = None) -> KeyValueEngine:
    """A key-value engine of ``kind``; ``path`` is the SQLite file or RocksDB directory (unused
    in memory)."""
    if kind == "memory":
        return InMemoryKeyValueEngine()
    if kind == "sqlite":
        from streams_runtime.state import sqlite_engines  # it imports this module

        return sqlite_engines.SqliteKeyValueEngine(_required(kind, path))
    if kind == "rocksdb":
        from streams_runtime.state import rocksdb_engines

        return rocksdb_engines.RocksDbKeyValueEngine(_required(kind, path))
    raise ValueError(f"unknown engine kind {kind!r} ({', '.join(ENGINE_KINDS)})")


def make_session_engine(kind: EngineKind, path: Path | None = None) -> SessionEngine:
    """A session engine of ``kind``; ``path`` is the SQLite file or RocksDB directory (unused
    in memory)."""
    if kind == "memory":
        return InMemorySessionEngine()
    if kind == "sqlite":
        from streams_runtime.state import sqlite_engines

        return sqlite_engines.SqliteSessionEngine(_required(kind, path))
    if kind == "rocksdb":
        from streams_runtime.state import rocksdb_engines

        return rocksdb_engines.RocksDbSessionEngine(_required(kind, path))
    raise ValueError(f"unknown engine kind {kind!r} ({', '.join(ENGINE_KINDS)})")


def bound_engine_memory(kind: EngineKind, rocksdb_bytes: int) -> None:
    """Before stores of ``kind`` open: with RocksDB, every store of the process shares
    ``rocksdb_bytes`` (:func:`streams_runtime.state.rocksdb_engines.share_memory`)."""
    if kind == "rocksdb":
        require_extra("runtime", "state_engine=rocksdb", "rocksdict")
        from streams_runtime.state import rocksdb_engines

        rocksdb_engines.share_memory(rocksdb_bytes)


def _required(kind: EngineKind, path: Path | None) -> Path:
    if path is None:
        raise ValueError(f"the {kind} engine needs a path")
    if kind == "rocksdb":
        # Imported only now: rocksdict is optional, and memory and SQLite work without it.
        require_extra("runtime", "state_engine=rocksdb", "rocksdict")
    return path


def engine_files(path: Path) -> list[Path]:
    """What a persistent engine at ``path`` may leave behind: the SQLite database, WAL and
    shared memory, or the RocksDB directory (``path`` itself)."""
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]

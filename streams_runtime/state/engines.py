"""Storage engines: raw-bytes key-value and session tables, one instance per store partition.

Three implementations of each kind:

- in memory (dicts; state lives only as long as the process and is rebuilt from the changelog on
  every start);
- SQLite (stdlib ``sqlite3``), persistent and *transactional*: writes go into one open
  transaction that :meth:`commit` makes durable, so a store commit can be aligned with the
  runtime's commit (local state and its checkpoint describe the same committed input position),
  and it needs no native wheel;
- RocksDB (``rocksdict``, the ``runtime`` extra; :mod:`streams_runtime.state.rocksdb_engines`),
  persistent with the same commit contract: one write batch per commit.

Engines know nothing about changelogs or serialization; the stores in ``stores.py`` add those.
Every engine is safe to call from several threads (interactive queries read while the stream
thread writes); reads see the stream thread's not yet committed writes, as in Kafka Streams.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, runtime_checkable

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
    "SqliteKeyValueEngine",
    "SqliteSessionEngine",
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

# Rows fetched per query while iterating a SQLite table: iteration pages by key instead of holding
# one cursor open, so writes made between pages (on the same connection) cannot upset it.
_PAGE_SIZE = 512


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
    """A dict; ``items()`` sorts a snapshot, so writes during iteration are safe."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        with self._lock:
            self._data[key] = value

    def delete(self, key: bytes) -> None:
        with self._lock:
            self._data.pop(key, None)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            snapshot = sorted(self._data.items())
        return iter(snapshot)

    def count(self) -> int:
        return len(self._data)

    def commit(self) -> None:
        """Nothing to do: memory is never durable."""

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

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


def check_session(start: int, end: int) -> None:
    """``ValueError`` unless ``start <= end``."""
    if start > end:
        raise ValueError(f"session start {start} is after its end {end}")


# --------------------------------------------------------------------------------------------
# SQLite


class _SqliteEngine:
    """One SQLite database file, one connection, one open write transaction at a time."""

    _schema: tuple[str, ...] = ()
    _table = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the module must not open or commit transactions behind our back;
        # writes BEGIN explicitly and only commit() ends the transaction.
        # check_same_thread=False: interactive queries read from other threads (under our lock).
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL rather than NORMAL: in WAL mode NORMAL skips the fsync at COMMIT, so a power
            # loss could lose a transaction that the (fsynced) checkpoint file then claims. We
            # commit once per runtime commit interval, so this is one fsync per interval.
            self._conn.execute("PRAGMA synchronous=FULL")
            for statement in self._schema:
                self._conn.execute(statement)
        except BaseException:
            self._conn.close()
            raise
        # One cursor for every statement (under the lock, each fully consumed before the next):
        # no cursor object per statement. Statements are prepared once, in the connection's
        # statement cache.
        self._cursor = self._conn.cursor()

    def _write(self, sql: str, params: tuple[object, ...]) -> int:
        """Run a write in the open transaction (beginning one if needed); the rows changed."""
        with self._lock:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN")
            return self._cursor.execute(sql, params).rowcount

    # sqlite3 rows are untyped: each caller converts the columns it selected.
    def _query_one(self, sql: str, params: tuple[object, ...] = ()) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._cursor.execute(sql, params).fetchone()
            return row

    def _query_all(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            rows: list[tuple[Any, ...]] = self._cursor.execute(sql, params).fetchall()
            return rows

    def count(self) -> int:
        row = self._query_one(f"SELECT COUNT(*) FROM {self._table}")  # noqa: S608 (constant)
        assert row is not None
        return int(row[0])

    def commit(self) -> None:
        with self._lock:
            if self._conn.in_transaction:
                self._conn.execute("COMMIT")

    def clear(self) -> None:
        with self._lock:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            self._conn.execute("BEGIN")
            self._conn.execute(f"DELETE FROM {self._table}")  # noqa: S608 (constant)
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            # Closing with a transaction open rolls it back: uncommitted writes are discarded.
            self._conn.close()


class SqliteKeyValueEngine(_SqliteEngine):
    """A key-value table in a SQLite file (``WITHOUT ROWID``: the key is the B-tree key)."""

    _table = "kv"
    _schema = (
        "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY NOT NULL, value BLOB NOT NULL)"
        " WITHOUT ROWID",
    )

    def get(self, key: bytes) -> bytes | None:
        row = self._query_one("SELECT value FROM kv WHERE key = ?", (key,))
        return None if row is None else bytes(row[0])

    def put(self, key: bytes, value: bytes) -> None:
        self._write("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def delete(self, key: bytes) -> None:
        self._write("DELETE FROM kv WHERE key = ?", (key,))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        rows = self._query_all("SELECT key, value FROM kv ORDER BY key LIMIT ?", (_PAGE_SIZE,))
        while rows:
            for key, value in rows:
                yield bytes(key), bytes(value)
            if len(rows) < _PAGE_SIZE:
                return
            rows = self._query_all(
                "SELECT key, value FROM kv WHERE key > ? ORDER BY key LIMIT ?",
                (rows[-1][0], _PAGE_SIZE),
            )


class SqliteSessionEngine(_SqliteEngine):
    """Sessions in a SQLite file.

    The primary key is ``(key, end, start)``: ``find`` asks for a key's sessions ending at or
    after a time, which is a range scan of that key's newest sessions; a second index on ``end``
    serves ``purge_ended_before``.
    """

    _table = "sessions"
    _schema = (
        "CREATE TABLE IF NOT EXISTS sessions ("
        " key BLOB NOT NULL, session_end INTEGER NOT NULL, session_start INTEGER NOT NULL,"
        " value BLOB NOT NULL, PRIMARY KEY (key, session_end, session_start)) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS sessions_by_end ON sessions (session_end)",
    )

    def find(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        # The columns are INTEGER, INTEGER and BLOB (int, int, bytes) by the schema. Sorted here,
        # not by an ORDER BY (a sorter per query): (start, end) is unique per key, so the tuples
        # sort by it alone.
        rows = self._query_all(
            "SELECT session_start, session_end, value FROM sessions"
            " WHERE key = ? AND session_end >= ? AND session_start <= ?",
            (key, earliest_end, latest_start),
        )
        rows.sort()
        return rows

    def get(self, key: bytes, start: int, end: int) -> bytes | None:
        row = self._query_one(
            "SELECT value FROM sessions WHERE key = ? AND session_end = ? AND session_start = ?",
            (key, end, start),
        )
        return None if row is None else row[0]

    def put(self, key: bytes, start: int, end: int, value: bytes) -> None:
        check_session(start, end)
        self._write(
            "INSERT OR REPLACE INTO sessions (key, session_end, session_start, value)"
            " VALUES (?, ?, ?, ?)",
            (key, end, start, value),
        )

    def remove(self, key: bytes, start: int, end: int) -> None:
        self._write(
            "DELETE FROM sessions WHERE key = ? AND session_end = ? AND session_start = ?",
            (key, end, start),
        )

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        select = "SELECT key, session_end, session_start, value FROM sessions"
        order = " ORDER BY key, session_end, session_start LIMIT ?"
        rows = self._query_all(select + order, (_PAGE_SIZE,))
        while rows:
            for key, end, start, value in rows:
                yield bytes(key), int(start), int(end), bytes(value)
            if len(rows) < _PAGE_SIZE:
                return
            last = rows[-1]
            rows = self._query_all(
                select + " WHERE (key, session_end, session_start) > (?, ?, ?)" + order,
                (last[0], last[1], last[2], _PAGE_SIZE),
            )

    def purge_ended_before(self, end: int) -> int:
        return self._write("DELETE FROM sessions WHERE session_end < ?", (end,))


# --------------------------------------------------------------------------------------------
# Factories


def make_kv_engine(kind: EngineKind, path: Path | None = None) -> KeyValueEngine:
    """A key-value engine of ``kind``; ``path`` is the SQLite file or RocksDB directory (unused
    in memory)."""
    if kind == "memory":
        return InMemoryKeyValueEngine()
    if kind == "sqlite":
        return SqliteKeyValueEngine(_required(kind, path))
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
        return SqliteSessionEngine(_required(kind, path))
    if kind == "rocksdb":
        from streams_runtime.state import rocksdb_engines

        return rocksdb_engines.RocksDbSessionEngine(_required(kind, path))
    raise ValueError(f"unknown engine kind {kind!r} ({', '.join(ENGINE_KINDS)})")


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

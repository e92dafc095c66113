"""The SQLite storage engines (stdlib ``sqlite3``): persistent and transactional, one database file
per store partition (see :mod:`streams_runtime.state.engines` for the engine contract)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams_runtime.state.engines import check_session, empty_range

__all__ = ["SqliteKeyValueEngine", "SqliteSessionEngine"]

# Rows fetched per query while iterating a SQLite table: iteration pages by key instead of holding
# one cursor open, so writes made between pages (on the same connection) cannot upset it.
_PAGE_SIZE = 512


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
        return self.range(None, None)

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """A page at a time by the primary key's B-tree (``ORDER BY key``, ``DESC`` with
        ``reverse``), each page after the last key of the one before: BLOBs compare as
        ``memcmp``, the byte order of Python's ``bytes``."""
        if empty_range(lower, upper):
            return
        # The bound the scan moves from (raised page by page), and the one it stops at.
        start, stop = (upper, lower) if reverse else (lower, upper)
        start_op, after_op, stop_op, order = (
            ("<=", "<", ">=", "DESC") if reverse else (">=", ">", "<=", "ASC")
        )
        op = start_op
        while True:
            conditions, params = [], []
            if start is not None:
                conditions.append(f"key {op} ?")
                params.append(start)
            if stop is not None:
                conditions.append(f"key {stop_op} ?")
                params.append(stop)
            where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
            rows = self._query_all(
                f"SELECT key, value FROM kv{where} ORDER BY key {order} LIMIT ?",  # noqa: S608
                (*params, _PAGE_SIZE),
            )
            for key, value in rows:
                yield bytes(key), bytes(value)
            if len(rows) < _PAGE_SIZE:
                return
            start, op = rows[-1][0], after_op


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

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        # A window ends at or after its start: ``session_end >= time_from`` lets the index on
        # the end skip every older window (retention purges those that expired).
        if time_from > time_to:
            return []
        rows = self._query_all(
            "SELECT key, session_start, session_end, value FROM sessions"
            " WHERE session_end >= ? AND session_start BETWEEN ? AND ?"
            " ORDER BY session_start, key, session_end",
            (time_from, time_from, time_to),
        )
        return [(bytes(key), int(start), int(end), bytes(value)) for key, start, end, value in rows]

    def purge_ended_before(self, end: int) -> int:
        return self._write("DELETE FROM sessions WHERE session_end < ?", (end,))

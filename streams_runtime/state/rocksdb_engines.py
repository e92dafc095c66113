"""RocksDB engines through ``rocksdict`` (Kafka Streams' ``RocksDBStore`` and, for sessions and
windows, ``RocksDBSessionStore``/``RocksDBSegmentedBytesStore``), one database directory per
store partition.

Kafka Streams buffers writes in its record cache and flushes them at commit; here the stream
thread's writes since the last commit sit in an in-memory overlay that every read consults first,
and :meth:`commit` applies them as one ``WriteBatch``, synced, so the database always holds the
state of a runtime commit and never a part of an interval (as SQLite's one open transaction does).
The runtime's checkpoint file is written after that commit and deleted before the next record is
processed (:mod:`streams_runtime.state.manager`), so store and checkpoint never disagree.

The overlay holds what one commit writes: a commit interval's updates, or, during a restore
(committed once at its end), every restored entry, as the memory engine would.

A key range is a seek to its first bound (``seek``, or ``seek_for_prev`` going backwards) and a
scan to the other, a page per short-lived iterator, merged with the overlay's writes in the
range. A time range across keys (``windows_starting``) scans every window: the keys lead with
the user key, and there is no time index (Kafka Streams' segments are one per time interval).

**Memory is bounded per process** (Kafka Streams' ``BoundedMemoryRocksDBConfig``, which is per
JVM as this is per process): every store shares one block cache of ``rocksdb_memory_bytes``
(:func:`share_memory`), index and filter blocks included, and one write buffer manager charging
the memtables to that cache and flushing them when they fill half of it. Without it each store
would grow its own memtables and cache (64 MiB and more apiece) and a few stores would grow an
application by hundreds of megabytes before their first flush; with it, memtables flush early and
stay small. The bound is Kafka Streams' soft one: writes never wait for a flush, so in a burst the
memtables being flushed still count until their flush ends (two per store at most).

Needs the ``rocksdict`` package (the ``runtime`` extra); the factories in ``engines`` check it.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from streams_runtime.state.engines import EngineFileError, check_session, empty_range

__all__ = ["DEFAULT_MEMORY_BYTES", "RocksDbKeyValueEngine", "RocksDbSessionEngine", "share_memory"]

DEFAULT_MEMORY_BYTES = 64 * 2**20
"""What every store of a process shares unless :func:`share_memory` says otherwise."""
# A store's memtable: flushed at this size, or sooner when the shared write buffers are full.
_WRITE_BUFFER_BYTES = 8 * 2**20

# Entries read per iterator while scanning: each page is read under the lock with a short-lived
# iterator, so a scan never holds the lock (or an iterator that keeps a closed database alive)
# while the caller works on what it got.
_PAGE_SIZE = 512
_ABSENT = object()
# Session keys: the user key escaped (0x00 -> 0x00 0xFF) and terminated by 0x00 0x00, which keeps
# byte order and makes one key's encoding never a prefix of another's; then end and start as
# offset unsigned 64-bit big-endian, so entries sort by (key, end, start) as the protocol asks.
_TIMES = struct.Struct(">QQ")
_OFFSET = 1 << 63
_TERMINATOR = b"\x00\x00"


class _SharedMemory:
    """The block cache and write buffer manager every store opened next shares (0 bytes: none,
    RocksDB's defaults per store)."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self._cache = Cache(total_bytes) if total_bytes else None
        self._write_buffers = (
            WriteBufferManager.new_write_buffer_manager_with_cache(
                total_bytes // 2, False, self._cache
            )
            if self._cache is not None
            else None
        )

    def options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        if self._cache is None or self._write_buffers is None:
            return options
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_cache_index_and_filter_blocks(True)  # their memory within the bound too
        table.set_pin_top_level_index_and_filter(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self._write_buffers)
        options.set_write_buffer_size(min(_WRITE_BUFFER_BYTES, max(self.total_bytes // 8, 1)))
        options.set_max_write_buffer_number(2)
        return options


_shared = _SharedMemory(DEFAULT_MEMORY_BYTES)
_shared_lock = threading.Lock()


def share_memory(total_bytes: int) -> None:
    """Bound the memory of every RocksDB store this process opens from now on: one block cache
    of ``total_bytes`` for all, the memtables charged to it (``0``: RocksDB's defaults, per
    store and unbounded). Stores already open keep what they share."""
    global _shared  # noqa: PLW0603 - per process, as Kafka Streams' static cache is per JVM
    with _shared_lock:
        if _shared.total_bytes != total_bytes:
            _shared = _SharedMemory(total_bytes)


class _RocksDbEngine:
    """One RocksDB database; pending writes in memory until :meth:`commit`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with _shared_lock:
            options = _shared.options()
        self._sync = WriteOptions()
        # Synced like SQLite's synchronous=FULL: the checkpoint written after a commit must
        # never vouch for a batch a power loss could take back. One fsync per commit interval.
        self._sync.sync = True
        try:
            self._db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises plain Exception for I/O and corruption
            raise EngineFileError(f"cannot open RocksDB store {path}: {exc}") from exc
        self._lock = threading.Lock()

    def _pending_writes(self) -> Iterable[tuple[bytes, bytes | None]]:
        raise NotImplementedError

    def _reset_pending(self) -> None:
        raise NotImplementedError

    def _page(
        self, start: bytes | None, after: bool, stop: bytes | None, reverse: bool
    ) -> list[tuple[bytes, bytes]]:
        """Up to a page of committed entries from ``start`` (``None``: the first, or with
        ``reverse`` the last; excluded when ``after``) up to ``stop`` included, backwards with
        ``reverse``."""
        rows: list[tuple[bytes, bytes]] = []
        with self._lock:
            it = self._db.iter()
            if start is None and reverse:
                it.seek_to_last()
            elif start is None:
                it.seek_to_first()
            elif reverse:
                it.seek_for_prev(start)
            else:
                it.seek(start)
            step = it.prev if reverse else it.next
            if after and it.valid() and it.key() == start:
                step()
            while it.valid() and len(rows) < _PAGE_SIZE:
                key: bytes = it.key()
                if stop is not None and (key < stop if reverse else key > stop):
                    break
                rows.append((key, it.value()))
                step()
            del it, step  # an open iterator keeps the database open
        return rows

    def _committed(
        self, lower: bytes | None = None, upper: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The committed entries in ``[lower, upper]``, a page at a time."""
        start, stop = (upper, lower) if reverse else (lower, upper)
        rows = self._page(start, False, stop, reverse)
        while rows:
            yield from rows
            if len(rows) < _PAGE_SIZE:
                return
            rows = self._page(rows[-1][0], True, stop, reverse)

    def commit(self) -> None:
        """Apply the writes since the last commit as one synced write batch."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            for key, value in self._pending_writes():
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
            if batch.len():
                self._db.write(batch, self._sync)
            self._reset_pending()

    def clear(self) -> None:
        """Drop every entry with one synced range deletion (uncommitted writes too)."""
        with self._lock:
            self._reset_pending()
            it = self._db.iter()
            it.seek_to_first()
            first = it.key() if it.valid() else None
            it.seek_to_last()
            last = it.key() if it.valid() else None
            del it
            if first is None or last is None:
                return
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(first, last)  # the end is exclusive: delete it on its own
            batch.delete(last)
            self._db.write(batch, self._sync)

    def close(self) -> None:
        """Close the database; uncommitted writes are discarded."""
        with self._lock:
            self._reset_pending()
            try:
                self._db.close()
            except Exception as exc:  # flushing the memtable failed: the WAL still has it
                raise EngineFileError(f"closing RocksDB store {self.path}: {exc}") from exc


def _merge(
    committed: Iterator[tuple[bytes, bytes]],
    pending: list[tuple[bytes, bytes | None]],
    reverse: bool = False,
) -> Iterator[tuple[bytes, bytes]]:
    """Committed entries overlaid with ``pending`` (sorted the same way; ``None`` deletes), in
    key order (descending with ``reverse``)."""
    i, n = 0, len(pending)
    for key, value in committed:
        while i < n and (pending[i][0] > key if reverse else pending[i][0] < key):
            p_key, p_value = pending[i]
            i += 1
            if p_value is not None:
                yield p_key, p_value
        if i < n and pending[i][0] == key:
            p_value = pending[i][1]
            i += 1
            if p_value is not None:
                yield key, p_value
            continue
        yield key, value
    for p_key, p_value in pending[i:]:
        if p_value is not None:
            yield p_key, p_value


class RocksDbKeyValueEngine(_RocksDbEngine):
    """A key-value table in a RocksDB database; keys are stored as they are."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._pending: dict[bytes, bytes | None] = {}

    def _pending_writes(self) -> Iterable[tuple[bytes, bytes | None]]:
        return self._pending.items()

    def _reset_pending(self) -> None:
        self._pending = {}

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` (the pending write, else the committed one), or ``None``."""
        with self._lock:
            value = self._pending.get(key, _ABSENT)
            if value is not _ABSENT:
                return value  # type: ignore[return-value]  # bytes | None, never _ABSENT here
            found: bytes | None = self._db.get(key)
            return found

    def put(self, key: bytes, value: bytes) -> None:
        with self._lock:
            self._pending[key] = value

    def delete(self, key: bytes) -> None:
        with self._lock:
            self._pending[key] = None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        if empty_range(lower, upper):
            return iter(())
        with self._lock:
            pending = sorted(
                (
                    (key, value)
                    for key, value in self._pending.items()
                    if (lower is None or key >= lower) and (upper is None or key <= upper)
                ),
                reverse=reverse,
            )
        return _merge(self._committed(lower, upper, reverse), pending, reverse)

    def count(self) -> int:
        # RocksDB keeps no exact count (only an estimate): count by scanning, which only tests
        # and diagnostics ask for.
        return sum(1 for _ in self.items())


def _session_prefix(key: bytes) -> bytes:
    return key.replace(b"\x00", b"\x00\xff") + _TERMINATOR


def _session_key(key: bytes, start: int, end: int) -> bytes:
    return _session_prefix(key) + _TIMES.pack(end + _OFFSET, start + _OFFSET)


def _split_session_key(encoded: bytes) -> tuple[bytes, int, int]:
    end, start = _TIMES.unpack_from(encoded, len(encoded) - _TIMES.size)
    key = encoded[: -_TIMES.size - len(_TERMINATOR)].replace(b"\x00\xff", b"\x00")
    return key, start - _OFFSET, end - _OFFSET


class RocksDbSessionEngine(_RocksDbEngine):
    """Sessions (and windows) in a RocksDB database, keyed by ``(key, end, start)``.

    ``find`` is a seek to the key's first session ending at or after a time and a scan of that
    key's entries. No index by end: ``purge_ended_before`` scans the store, which retention
    does at most every 30 seconds; a second index would double every write.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        # Pending writes per user key, so ``find`` merges only the key's own pending sessions.
        self._pending: dict[bytes, dict[tuple[int, int], bytes | None]] = {}

    def _pending_writes(self) -> Iterable[tuple[bytes, bytes | None]]:
        for key, sessions in self._pending.items():
            for (start, end), value in sessions.items():
                yield _session_key(key, start, end), value

    def _reset_pending(self) -> None:
        self._pending = {}

    def find(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        prefix = _session_prefix(key)
        # Clamped: callers may pass any int as "no bound"; the encoding holds 64-bit times.
        seek = prefix + _TIMES.pack(min(max(earliest_end + _OFFSET, 0), 2 * _OFFSET - 1), 0)
        found: dict[tuple[int, int], bytes] = {}
        with self._lock:
            it = self._db.iter()
            it.seek(seek)
            while it.valid():
                encoded: bytes = it.key()
                if not encoded.startswith(prefix):
                    break
                end, start = _TIMES.unpack_from(encoded, len(prefix))
                if start - _OFFSET <= latest_start:
                    found[(start - _OFFSET, end - _OFFSET)] = it.value()
                it.next()
            del it
            for window, value in self._pending.get(key, {}).items():
                start, end = window
                if value is None:
                    found.pop(window, None)
                elif end >= earliest_end and start <= latest_start:
                    found[window] = value
        return sorted((start, end, value) for (start, end), value in found.items())

    def get(self, key: bytes, start: int, end: int) -> bytes | None:
        with self._lock:
            value = self._pending.get(key, {}).get((start, end), _ABSENT)
            if value is not _ABSENT:
                return value  # type: ignore[return-value]  # bytes | None, never _ABSENT here
            found: bytes | None = self._db.get(_session_key(key, start, end))
            return found

    def put(self, key: bytes, start: int, end: int, value: bytes) -> None:
        check_session(start, end)
        with self._lock:
            self._pending.setdefault(key, {})[(start, end)] = value

    def remove(self, key: bytes, start: int, end: int) -> None:
        with self._lock:
            self._pending.setdefault(key, {})[(start, end)] = None

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        with self._lock:
            pending = sorted(self._pending_writes())
        for encoded, value in _merge(self._committed(), pending):
            key, start, end = _split_session_key(encoded)
            yield key, start, end, value

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        # A scan of every window (see the module docstring).
        if time_from > time_to:
            return []
        found = [
            (key, start, end, value)
            for key, start, end, value in self.items()
            if time_from <= start <= time_to
        ]
        found.sort(key=lambda w: (w[1], w[0], w[2]))
        return found

    def purge_ended_before(self, end: int) -> int:
        expired = [(key, start, ended) for key, start, ended, _ in self.items() if ended < end]
        for key, start, ended in expired:
            self.remove(key, start, ended)
        return len(expired)

    def count(self) -> int:
        # No exact count in RocksDB: scan (tests and diagnostics only).
        return sum(1 for _ in self.items())

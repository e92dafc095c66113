"""Session and window stores read and written through the record cache (Kafka Streams'
``CachingSessionStore`` and ``CachingWindowStore``).

A write caches the window ``(key, start, end)`` (``None``: a cached delete, e.g. a session
merged away), dirty, with the record context of the write. Reads see the merged view of cache
and store: a point read (:meth:`CachingSessionStore.fetch`) asks the cache first, a range read
(``find_sessions``, and so ``sessions`` and ``fetch_range``; ``windows_starting``, ``items``)
overlays the store's windows with the cached ones, deletes hiding stored windows, as Kafka
Streams' ``MergedSortedCacheSessionStoreIterator`` and ``MergedSortedCacheWindowStoreIterator``
do. A flush (before every commit, or when the
least recently used entry is evicted) writes each dirty window once to the store, and so to
its changelog with the source of its latest write, and hands it to the flush listener with the
value the store held before; a delete of a window the store never held is neither written nor
handed on (Kafka Streams' ``putAndMaybeForward``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from streams_runtime.record import Headers
from streams_runtime.state.caching import (
    ENTRY_OVERHEAD,
    CacheEntry,
    NamedCache,
    merge_ordered,
)
from streams_runtime.state.changelog import (
    InputRef,
    SourcePosition,
    session_changelog_key,
    split_session_changelog_key,
)
from streams_runtime.state.stores import SessionStore, WindowFlushListener, WindowStore

__all__ = ["CachingSessionStore", "CachingWindowStore"]


class CachingSessionStore(SessionStore):
    """A session store whose writes go through a :class:`NamedCache`, keyed by the window's
    changelog key. The same engine and changelog as the store it wraps. Without a flush
    listener, flushed windows are only written."""

    def __init__(self, inner: SessionStore, cache: NamedCache, position: SourcePosition) -> None:
        super().__init__(inner.name, inner.partition, inner.engine, inner.changelog)
        self.cache = cache
        self._position = position
        self._listener: WindowFlushListener | None = None
        # The cached windows of each key: the cache is no sorted map, range reads start here.
        # Lists, not sets: a key has few cached windows, and an empty set alone is 216 bytes.
        self._cached: dict[bytes, list[tuple[int, int]]] = {}
        cache.listener = self._write_back
        cache.dropped = self._forget

    def set_flush_listener(self, listener: WindowFlushListener) -> bool:
        """Call ``listener`` for each flushed window that was stored or is stored now."""
        self._listener = listener
        return True

    def find_sessions(
        self, key: bytes, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, bytes]]:
        stored = super().find_sessions(key, earliest_end, latest_start)
        windows = self._cached.get(key)
        if not windows:
            return stored
        merged = {(start, end): value for start, end, value in stored}
        for start, end in list(windows):
            if end < earliest_end or start > latest_start:
                continue
            entry = self.cache.peek(session_changelog_key(key, start, end))
            if entry is None:
                continue
            if entry.value is None:
                merged.pop((start, end), None)
            else:
                merged[(start, end)] = entry.value
        return [(start, end, value) for (start, end), value in sorted(merged.items())]

    def fetch(self, key: bytes, start: int, end: int) -> bytes | None:
        entry = self.cache.get(session_changelog_key(key, start, end))
        if entry is not None:
            return entry.value
        return super().fetch(key, start, end)

    def put(  # noqa: PLR0917 - the store's put, plus the record context
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
        """Cache the window (``None``: a cached delete), dirty, with the record context: the
        ``headers`` downstream will see, and the input that caused the write (``source``, or
        the record being processed)."""
        if start > end:
            raise ValueError(f"session start {start} is after its end {end}")
        cache_key = session_changelog_key(key, start, end)
        if source is None:  # per record: no tuple built on this path
            position = self._position
            tp, offset = position.tp, position.offset
        else:
            tp, offset = source
        size = len(cache_key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
        # Indexed before the put: a put over budget may evict this very entry, which forgets it.
        windows = self._cached.setdefault(key, [])
        if (start, end) not in windows:
            windows.append((start, end))
        self.cache.put(cache_key, CacheEntry(value, timestamp, headers, tp, offset, size))

    def expire(self, key: bytes, start: int, end: int, timestamp: int) -> None:
        """Delete an expired window from the store, bypassing the cache: retention is no
        update, nothing is forwarded (Kafka Streams drops expired segments below its cache)."""
        self.cache.discard(session_changelog_key(key, start, end))
        super().put(key, start, end, None, timestamp)

    def items(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        cached = sorted(
            ((key, end, start), entry.value)
            for cache_key, entry in self.cache.snapshot()
            for key, start, end in (split_session_changelog_key(cache_key),)
        )
        stored = (((k, e, s), v) for k, s, e, v in super().items())
        for (key, end, start), value in merge_ordered(stored, cached):
            yield key, start, end, value

    def windows_starting(self, time_from: int, time_to: int) -> list[tuple[bytes, int, int, bytes]]:
        """The store's windows of every key starting in the range, overlaid with the cached
        ones there (a cached delete hides the stored window), by ``(start, key, end)``."""
        stored = super().windows_starting(time_from, time_to)
        if time_from > time_to:
            return stored
        merged = {(start, key, end): value for key, start, end, value in stored}
        for cache_key, entry in self.cache.snapshot():
            key, start, end = split_session_changelog_key(cache_key)
            if not time_from <= start <= time_to:
                continue
            if entry.value is None:
                merged.pop((start, key, end), None)
            else:
                merged[(start, key, end)] = entry.value
        return [(key, start, end, value) for (start, key, end), value in sorted(merged.items())]

    def count(self) -> int:
        """Windows in the merged view of cache and store (a scan of both)."""
        return sum(1 for _ in self.items())

    def purge_ended_before(self, end: int) -> int:
        for key, windows in list(self._cached.items()):
            for start, window_end in list(windows):
                if window_end < end:
                    self.cache.discard(session_changelog_key(key, start, window_end))
        return super().purge_ended_before(end)

    def flush_cache(self) -> None:
        self.cache.flush()

    def _forget(self, cache_key: bytes) -> None:
        key, start, end = split_session_changelog_key(cache_key)
        windows = self._cached.get(key)
        if windows is not None and (start, end) in windows:
            windows.remove((start, end))
            if not windows:
                del self._cached[key]

    def _write_back(self, entries: Iterable[tuple[bytes, CacheEntry]]) -> None:
        listener = self._listener
        for cache_key, entry in entries:
            key, start, end = split_session_changelog_key(cache_key)
            old = super().fetch(key, start, end)
            if entry.value is None and old is None:
                continue
            # The changelog record says which input caused the latest write (restore's
            # committed-input rule).
            source = (entry.tp, entry.offset)
            super().put(key, start, end, entry.value, entry.timestamp, source=source)
            if listener is not None:
                listener(key, start, end, entry.value, old, entry.timestamp, entry.headers)


class CachingWindowStore(CachingSessionStore, WindowStore):
    """A window store read and written through the record cache (Kafka Streams'
    ``CachingWindowStore``): a :class:`CachingSessionStore` also read by window start."""

    def __repr__(self) -> str:
        return f"CachingWindowStore({self.name!r}, partition={self.partition})"

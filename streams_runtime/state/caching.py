"""The record cache (Kafka Streams' ``ThreadCache``, ``NamedCache`` and
``CachingKeyValueStore``); the cached session and window stores are in
:mod:`streams_runtime.state.caching_windows`, a task's cached stores in
:mod:`streams_runtime.state.task_caches`.

One :class:`ThreadCache` per stream thread holds ``statestore_cache_max_bytes`` (Kafka Streams'
``statestore.cache.max.bytes``) for all of its tasks' cached stores, one :class:`NamedCache`
each. A write to a cached store only goes into its cache: the entry is dirty and remembers the
write's record context (timestamp, headers, and the input record that caused it). Reads go
through the cache. When the cache is flushed, before every commit, or when a put takes the
thread's cache over budget and the least recently used entry of the store written to is evicted
(which flushes that whole store's cache, the evicted entry first), each dirty key is written
once, with its latest value, to the underlying store (and so to its changelog, with the source
of its latest write: restore's committed-input rule holds) and handed to the store's flush
listener with the value the underlying store held before, which is the value before the first
cached write of the interval. A key neither stored nor cached before is not written when its
latest value is a delete. The listener (a table processor) forwards ``Change(new, old)``, as
Kafka Streams' ``TimestampedCacheFlushListener`` does.

Only the stream thread writes a cache; interactive queries read through it from their own
threads. A range read (:meth:`CachingKeyValueStore.range`, and so ``items`` and ``prefix_scan``)
merges the store's range with the cached entries in it, sorted the same way: a cached value
wins over the stored one, a cached delete hides it (Kafka Streams'
``MergedSortedCacheKeyValueBytesStoreIterator``, forward or reverse).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from streams_runtime.record import Headers, TopicPartitionId
from streams_runtime.state.changelog import InputRef, SourcePosition
from streams_runtime.state.engines import empty_range
from streams_runtime.state.stores import FlushListener, KeyValueStore

__all__ = [
    "CacheEntry",
    "CacheStats",
    "CachingKeyValueStore",
    "NamedCache",
    "ThreadCache",
    "merge_ordered",
]

# Per entry, besides key and value bytes: what Kafka Streams counts for an ``LRUNode`` and its
# ``LRUCacheEntry`` (links, dirty flag, timestamp, offset, partition), so a budget holds as many
# entries as Kafka Streams' does. CPython's objects are bigger: an entry really takes about 340
# bytes besides its key and value (a window about 660, with the index of cached windows), so
# the cache's memory is several times its budget (docs/runtime/state.md says how much).
ENTRY_OVERHEAD = 64


class CacheEntry:
    """A cached value (``None``: a cached delete) and the record context of its last write."""

    __slots__ = ("dirty", "headers", "offset", "size", "timestamp", "tp", "value")

    def __init__(  # noqa: PLR0917 - one field each
        self,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        tp: TopicPartitionId | None,
        offset: int,
        size: int,
    ) -> None:
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.tp = tp
        self.offset = offset
        self.size = size
        self.dirty = True


class CacheStats:
    """What one named cache counted (read by the metrics collector from another thread)."""

    __slots__ = ("evictions", "flushes", "hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.flushes = 0

    @property
    def hit_ratio(self) -> float:
        """Hits per read of the cache so far (Kafka Streams' ``hit-ratio``), 0 before a read."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0


class NamedCache:
    """One store partition's share of the thread cache: entries in least recently used order,
    and the dirty keys in the order of their latest write (Kafka Streams' ``NamedCache``)."""

    def __init__(self, thread: ThreadCache, name: str, task: str = "", store: str = "") -> None:
        self.thread = thread
        self.name = name
        self.task = task  # metric labels
        self.store = store
        self.size_bytes = 0
        self.stats = CacheStats()
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()
        self._dirty: dict[bytes, None] = {}
        self.listener: Callable[[Iterable[tuple[bytes, CacheEntry]]], None] | None = None
        self.dropped: Callable[[bytes], None] | None = None
        """Called with each key that leaves the cache (evicted, a flushed delete, cleared)."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def get(self, key: bytes) -> CacheEntry | None:
        """The entry of ``key`` (a read: counted, and the entry becomes the most recent)."""
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        # An interactive query reads from another thread: the stream thread may have
        # evicted the key meanwhile.
        with contextlib.suppress(KeyError):
            self._entries.move_to_end(key)
        return entry

    def peek(self, key: bytes) -> CacheEntry | None:
        """The entry of ``key``, neither counted nor moved (range reads, as Kafka Streams')."""
        return self._entries.get(key)

    def put(self, key: bytes, entry: CacheEntry) -> None:
        old = self._entries.get(key)
        if old is not None:
            self._resize(-old.size)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._resize(entry.size)
        self._dirty.pop(key, None)
        self._dirty[key] = None
        self.thread.maybe_evict(self)

    def discard(self, key: bytes) -> None:
        """Drop ``key`` without writing it anywhere (an expired window after a flush)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._dirty.pop(key, None)
            self._resize(-entry.size)
            self._dropped(key)

    def snapshot(self) -> list[tuple[bytes, CacheEntry]]:
        """Every entry, least recently used first (the order is left as it is)."""
        for _ in range(8):
            # Interactive queries snapshot from their threads while the stream thread writes.
            with contextlib.suppress(RuntimeError):
                return list(self._entries.items())
        return list(self._entries.copy().items())

    def flush(self, evicted: tuple[bytes, CacheEntry] | None = None) -> None:
        """Hand every dirty entry (``evicted`` first) to the listener, in order; each is clean
        once handed over, and a cached delete is dropped once written. When the listener
        raises (user code below the store), the entries not handed over yet stay dirty for
        the next flush: nothing is lost whatever happens to the failing one."""
        if not self._dirty:
            return
        if self.listener is None:
            raise RuntimeError(f"no flush listener for cache {self.name}")
        self.stats.flushes += 1
        entries: list[tuple[bytes, CacheEntry]] = []
        if evicted is not None:
            entries.append(evicted)
            self._dirty.pop(evicted[0], None)
        entries += [(key, self._entries[key]) for key in self._dirty]
        handed: list[tuple[bytes, CacheEntry]] = []
        try:
            self.listener(self._hand_over(entries, handed))
        finally:
            for key, entry in handed:
                if entry.value is None and self._entries.get(key) is entry:
                    del self._entries[key]
                    self._resize(-entry.size)
                    self._dropped(key)

    def _hand_over(
        self, entries: list[tuple[bytes, CacheEntry]], handed: list[tuple[bytes, CacheEntry]]
    ) -> Iterator[tuple[bytes, CacheEntry]]:
        for key, entry in entries:
            entry.dirty = False
            if self._entries.get(key) is entry:  # else a newer write of the key, still dirty
                self._dirty.pop(key, None)
            handed.append((key, entry))
            yield key, entry

    def evict(self) -> None:
        """Drop the least recently used entry, flushing the cache first when it is dirty."""
        key, entry = self._entries.popitem(last=False)
        self._resize(-entry.size)
        self.stats.evictions += 1
        self._dropped(key)
        if key in self._dirty:
            self.flush((key, entry))

    def clear(self) -> None:
        """Drop every entry, dirty or not (the task closes without a commit)."""
        self._resize(-self.size_bytes)
        keys = list(self._entries)
        self._entries.clear()
        self._dirty.clear()
        for key in keys:
            self._dropped(key)

    def _dropped(self, key: bytes) -> None:
        if self.dropped is not None:
            self.dropped(key)

    def _resize(self, delta: int) -> None:
        self.size_bytes += delta
        self.thread.size_bytes += delta


class ThreadCache:
    """The stream thread's record cache: ``max_bytes`` shared by its named caches; a put that
    takes it over budget evicts from the cache written to (Kafka Streams' ``ThreadCache``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self._named: dict[str, NamedCache] = {}

    @property
    def evictions(self) -> int:
        """Entries evicted from the named caches open now."""
        return sum(cache.stats.evictions for cache in self.caches())

    def named(self, name: str, task: str = "", store: str = "") -> NamedCache:
        """A new named cache ``name`` (replacing one of that name, which is cleared) of the
        store ``store`` of task ``task``."""
        old = self._named.pop(name, None)
        if old is not None:
            old.clear()
        cache = self._named[name] = NamedCache(self, name, task, store)
        return cache

    def release(self, cache: NamedCache) -> None:
        """Clear ``cache`` and forget it (its task closed)."""
        cache.clear()
        if self._named.get(cache.name) is cache:
            del self._named[cache.name]

    def caches(self) -> list[NamedCache]:
        """The named caches open now (a copy: the metrics read it from another thread)."""
        return list(self._named.values())

    def maybe_evict(self, cache: NamedCache) -> None:
        while self.size_bytes > self.max_bytes and len(cache):
            cache.evict()


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Ordered)
V = TypeVar("V")


def merge_ordered(
    stored: Iterable[tuple[K, V]], cached: Iterable[tuple[K, V | None]], *, reverse: bool = False
) -> Iterator[tuple[K, V]]:
    """Kafka Streams' ``MergedSortedCacheKeyValueBytesStoreIterator``: the entries of
    ``stored`` overlaid with ``cached`` (both sorted by key, ascending, or descending with
    ``reverse``; unique keys), ``None`` in the cache hiding the stored entry; one pass, nothing
    materialised."""
    stored_it, cached_it = iter(stored), iter(cached)
    s = next(stored_it, None)
    c = next(cached_it, None)
    while s is not None or c is not None:
        if c is None or (s is not None and (c[0] < s[0] if reverse else s[0] < c[0])):
            assert s is not None
            yield s
            s = next(stored_it, None)
            continue
        if s is not None and not (s[0] < c[0] if reverse else c[0] < s[0]):  # same key: cache
            s = next(stored_it, None)
        key, value = c
        if value is not None:
            yield key, value
        c = next(cached_it, None)


class CachingKeyValueStore(KeyValueStore):
    """A key-value store whose writes go through a :class:`NamedCache` (Kafka Streams'
    ``CachingKeyValueStore``). The same engine and changelog as the store it wraps; reads see
    the cache first. Without a flush listener, flushed entries are only written."""

    def __init__(self, inner: KeyValueStore, cache: NamedCache, position: SourcePosition) -> None:
        super().__init__(inner.name, inner.partition, inner.engine, inner.changelog)
        self.cache = cache
        self._position = position
        self._listener: FlushListener | None = None
        cache.listener = self._write_back

    def set_flush_listener(self, listener: FlushListener) -> bool:
        """Call ``listener`` for each flushed entry that was stored or is stored now."""
        self._listener = listener
        return True

    def get(self, key: bytes) -> bytes | None:
        entry = self.cache.get(key)
        if entry is not None:
            return entry.value
        return super().get(key)

    def put(
        self,
        key: bytes,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None = None,
        *,
        source: InputRef | None = None,
    ) -> None:
        """Cache ``key`` (``None``: a cached delete), dirty, with the record context: the
        ``headers`` downstream will see, and the input that caused the write (``source``, or
        the record being processed)."""
        if source is None:  # per record: no tuple built on this path
            position = self._position
            tp, offset = position.tp, position.offset
        else:
            tp, offset = source
        size = len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
        self.cache.put(key, CacheEntry(value, timestamp, headers, tp, offset, size))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    def range(
        self, lower: bytes | None, upper: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The store's range merged with the cached entries in it (see the module docstring):
        the cache is no sorted map, so its entries in range are sorted per read, as Kafka
        Streams' ``NamedCache.range`` reads its ``TreeMap``."""
        if empty_range(lower, upper):
            return iter(())
        cached = sorted(
            (
                (key, entry.value)
                for key, entry in self.cache.snapshot()
                if (lower is None or key >= lower) and (upper is None or key <= upper)
            ),
            reverse=reverse,
        )
        return merge_ordered(super().range(lower, upper, reverse=reverse), cached, reverse=reverse)

    def count(self) -> int:
        """Entries in the merged view of cache and store (a scan of both)."""
        return sum(1 for _ in self.items())

    def flush_cache(self) -> None:
        self.cache.flush()

    def _write_back(self, entries: Iterable[tuple[bytes, CacheEntry]]) -> None:
        listener = self._listener
        for key, entry in entries:
            old = super().get(key)
            if entry.value is None and old is None:
                continue
            # The changelog record says which input caused the latest write (restore's
            # committed-input rule).
            super().put(key, entry.value, entry.timestamp, source=(entry.tp, entry.offset))
            if listener is not None:
                listener(key, entry.value, old, entry.timestamp, entry.headers)

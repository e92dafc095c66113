"""The record cache (Kafka Streams' ``ThreadCache``, ``NamedCache`` and
``CachingKeyValueStore``).

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

Only the stream thread touches a cache; interactive queries read the underlying stores.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator

from streams_runtime.record import Headers, TopicPartitionId
from streams_runtime.state.changelog import SourcePosition
from streams_runtime.state.stores import KeyValueStore

__all__ = [
    "CacheEntry",
    "CachingKeyValueStore",
    "FlushListener",
    "NamedCache",
    "TaskCaches",
    "ThreadCache",
]

# Per entry, besides key and value bytes: what Kafka Streams counts for an ``LRUNode`` and its
# ``LRUCacheEntry`` (links, dirty flag, timestamp, offset, partition), roughly.
_ENTRY_OVERHEAD = 64

FlushListener = Callable[[bytes, bytes | None, bytes | None, int, Headers | None], None]
"""``(key, new value, old value, timestamp, headers)`` of one flushed dirty entry."""


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


class NamedCache:
    """One store partition's share of the thread cache: entries in least recently used order,
    and the dirty keys in the order of their latest write (Kafka Streams' ``NamedCache``)."""

    def __init__(self, thread: ThreadCache, name: str) -> None:
        self.thread = thread
        self.name = name
        self.size_bytes = 0
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()
        self._dirty: dict[bytes, None] = {}
        self.listener: Callable[[list[tuple[bytes, CacheEntry]]], None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def get(self, key: bytes) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            # An interactive query reads from another thread: the stream thread may have
            # evicted the key meanwhile.
            with contextlib.suppress(KeyError):
                self._entries.move_to_end(key)
        return entry

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

    def snapshot(self) -> list[tuple[bytes, CacheEntry]]:
        """Every entry, least recently used first (the order is left as it is)."""
        return list(self._entries.items())

    def flush(self, evicted: tuple[bytes, CacheEntry] | None = None) -> None:
        """Hand every dirty entry (``evicted`` first) to the listener; they are clean after,
        and cached deletes are dropped."""
        if not self._dirty:
            return
        entries: list[tuple[bytes, CacheEntry]] = []
        if evicted is not None:
            entries.append(evicted)
            self._dirty.pop(evicted[0], None)
        for key in self._dirty:
            entry = self._entries[key]
            entry.dirty = False
            entries.append((key, entry))
        self._dirty = {}
        if self.listener is None:
            raise RuntimeError(f"no flush listener for cache {self.name}")
        self.listener(entries)
        for key, entry in entries:
            if entry.value is None and self._entries.get(key) is entry:
                del self._entries[key]
                self._resize(-entry.size)

    def evict(self) -> None:
        """Drop the least recently used entry, flushing the cache first when it is dirty."""
        key, entry = self._entries.popitem(last=False)
        self._resize(-entry.size)
        if key in self._dirty:
            self.flush((key, entry))

    def clear(self) -> None:
        """Drop every entry, dirty or not (the task closes without a commit)."""
        self._resize(-self.size_bytes)
        self._entries.clear()
        self._dirty.clear()

    def _resize(self, delta: int) -> None:
        self.size_bytes += delta
        self.thread.size_bytes += delta


class ThreadCache:
    """The stream thread's record cache: ``max_bytes`` shared by its named caches; a put that
    takes it over budget evicts from the cache written to (Kafka Streams' ``ThreadCache``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.evictions = 0

    def named(self, name: str) -> NamedCache:
        return NamedCache(self, name)

    def maybe_evict(self, cache: NamedCache) -> None:
        while self.size_bytes > self.max_bytes and len(cache):
            cache.evict()
            self.evictions += 1


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

    def set_flush_listener(self, listener: FlushListener) -> None:
        """Call ``listener`` for each flushed entry that was stored or is stored now."""
        self._listener = listener

    def get(self, key: bytes) -> bytes | None:
        entry = self.cache.get(key)
        if entry is not None:
            return entry.value
        return super().get(key)

    def put(
        self, key: bytes, value: bytes | None, timestamp: int, headers: Headers | None = None
    ) -> None:
        """Cache ``key`` (``None``: a cached delete), dirty, with the record context: the
        ``headers`` downstream will see, and the input record being processed."""
        position = self._position
        size = len(key) + (0 if value is None else len(value)) + _ENTRY_OVERHEAD
        self.cache.put(
            key, CacheEntry(value, timestamp, headers, position.tp, position.offset, size)
        )

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        merged = dict(super().items())
        for key, entry in self.cache.snapshot():
            if entry.value is None:
                merged.pop(key, None)
            else:
                merged[key] = entry.value
        return iter(sorted(merged.items()))

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def flush_cache(self) -> None:
        self.cache.flush()

    def _write_back(self, entries: list[tuple[bytes, CacheEntry]]) -> None:
        position = self._position
        saved = position.tp, position.offset
        listener = self._listener
        try:
            for key, entry in entries:
                old = super().get(key)
                if entry.value is None and old is None:
                    continue
                # The changelog record says which input caused the latest write (restore's
                # committed-input rule), and downstream sees that write's context.
                position.tp, position.offset = entry.tp, entry.offset
                super().put(key, entry.value, entry.timestamp)
                if listener is not None:
                    listener(key, entry.value, old, entry.timestamp, entry.headers)
        finally:
            position.tp, position.offset = saved


class TaskCaches:
    """One task's cached stores (Kafka Streams' ``ProcessorStateManager.flushCache``): each
    cached store partition wrapped once, in the order processors asked for them (topological),
    all flushed before the task commits."""

    def __init__(self, thread: ThreadCache | None, task: str, position: SourcePosition) -> None:
        self._thread = thread
        self._task = task
        self._position = position
        self._stores: dict[str, CachingKeyValueStore] = {}

    @property
    def enabled(self) -> bool:
        return self._thread is not None and self._thread.max_bytes > 0

    def kv_store(self, store: KeyValueStore) -> KeyValueStore:
        """``store`` read and written through its cache (``store`` itself when caching is off)."""
        if self._thread is None or not self.enabled:
            return store
        cached = self._stores.get(store.name)
        if cached is None or cached.engine is not store.engine:
            named = self._thread.named(f"{self._task}-{store.name}")
            cached = self._stores[store.name] = CachingKeyValueStore(store, named, self._position)
        return cached

    def cached(self, name: str) -> CachingKeyValueStore | None:
        """The cached store ``name``, ``None`` when it is not cached."""
        return self._stores.get(name)

    def flush(self) -> None:
        """Flush every cache, upstream stores first, until none is dirty: what a flush forwards
        may dirty a downstream store's cache, and nothing is left for after the commit."""
        stores = list(self._stores.values())
        while any(store.cache.dirty for store in stores):
            for store in stores:
                store.cache.flush()

    def clear(self) -> None:
        """Drop every cached entry, written or not (the task closes; without a commit, its
        input is processed again)."""
        for store in self._stores.values():
            store.cache.clear()
        self._stores.clear()

"""One task's cached stores (Kafka Streams' ``ProcessorStateManager.flushCache``)."""

from __future__ import annotations

from collections.abc import Callable

from streams_runtime.state.caching import CachingKeyValueStore, NamedCache, ThreadCache
from streams_runtime.state.caching_windows import CachingSessionStore, CachingWindowStore
from streams_runtime.state.changelog import SourcePosition
from streams_runtime.state.stores import KeyValueStore, SessionStore, WindowStore

__all__ = ["CachedStore", "TaskCaches"]

CachedStore = CachingKeyValueStore | CachingSessionStore
"""A store read and written through the record cache (a window store is a session store)."""


class TaskCaches:
    """One task's cached stores: each cached store partition wrapped once, in the order
    processors asked for them (topological), all flushed before the task commits."""

    def __init__(self, thread: ThreadCache | None, task: str, position: SourcePosition) -> None:
        self._thread = thread
        self._task = task
        self._position = position
        self._stores: dict[str, CachedStore] = {}

    @property
    def enabled(self) -> bool:
        return self._thread is not None and self._thread.max_bytes > 0

    def kv_store(self, store: KeyValueStore) -> KeyValueStore:
        """``store`` read and written through its cache (``store`` itself when caching is off)."""
        if self._thread is None or not self.enabled:
            return store
        cached = self._stores.get(store.name)
        if not isinstance(cached, CachingKeyValueStore) or cached.engine is not store.engine:
            named = self._named(store.name)
            cached = self._stores[store.name] = CachingKeyValueStore(store, named, self._position)
        return cached

    def session_store(self, store: SessionStore) -> SessionStore:
        """``store`` read and written through its cache (``store`` itself when caching is off)."""
        return self._windowed(store, CachingSessionStore)

    def window_store(self, store: WindowStore) -> WindowStore:
        """``store`` read and written through its cache (``store`` itself when caching is off)."""
        cached = self._windowed(store, CachingWindowStore)
        assert isinstance(cached, WindowStore)
        return cached

    def cached(self, name: str) -> CachedStore | None:
        """The cached store ``name``, ``None`` when it is not cached."""
        return self._stores.get(name)

    def caches(self) -> list[CachedStore]:
        """The cached stores, in the order they were opened."""
        return list(self._stores.values())

    def flush(self, on_error: Callable[[Exception], None] | None = None) -> None:
        """Flush every cache, upstream stores first, until none is dirty: what a flush forwards
        may dirty a downstream store's cache, and nothing is left for after the commit. What
        user code below a store raises on one entry goes to ``on_error`` (raised without it),
        and the flush goes on with the entries after it."""
        stores = list(self._stores.values())
        while any(store.cache.dirty for store in stores):
            for store in stores:
                try:
                    store.cache.flush()
                except Exception as exc:
                    if on_error is None:
                        raise
                    on_error(exc)

    def clear(self) -> None:
        """Drop every cached entry, written or not (the task closes; without a commit, its
        input is processed again)."""
        for store in self._stores.values():
            if self._thread is not None:
                self._thread.release(store.cache)
            else:
                store.cache.clear()
        self._stores.clear()

    def _windowed(self, store: SessionStore, kind: type[CachingSessionStore]) -> SessionStore:
        if self._thread is None or not self.enabled:
            return store
        cached = self._stores.get(store.name)
        if not isinstance(cached, kind) or cached.engine is not store.engine:
            cached = self._stores[store.name] = kind(store, self._named(store.name), self._position)
        return cached

    def _named(self, store: str) -> NamedCache:
        assert self._thread is not None
        return self._thread.named(f"{self._task}-{store}", self._task, store)

"""The record cache's Prometheus metrics, read at scrape time from the caches."""

from __future__ import annotations

from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.state import (
    InMemoryKeyValueEngine,
    KeyValueStore,
    SourcePosition,
    TaskCaches,
    ThreadCache,
)
from streams_runtime.state.caching import ENTRY_OVERHEAD


def test_hit_ratio_bytes_evictions_and_flushes_per_store() -> None:
    metrics = RuntimeMetrics("app")
    entry = 1 + 1 + ENTRY_OVERHEAD  # key, value, overhead
    thread = ThreadCache(2 * entry + 10)
    metrics.record_caches.add(thread)
    caches = TaskCaches(thread, "0_1", SourcePosition())
    store = caches.kv_store(KeyValueStore("counts", 1, InMemoryKeyValueEngine(), None))
    store.put(b"a", b"1", 0)
    assert store.get(b"a") == b"1"  # a hit
    assert store.get(b"b") is None  # a miss
    store.put(b"b", b"1", 0)
    store.put(b"c", b"1", 0)  # over two entries: evicts "a", flushing the store's cache
    text = metrics.exposition().decode()
    labels = '{store="counts",task="0_1"}'
    assert f"streams_record_cache_hit_ratio{labels} 0.5" in text
    assert f"streams_record_cache_hits_total{labels} 1.0" in text
    assert f"streams_record_cache_misses_total{labels} 1.0" in text
    assert f"streams_record_cache_evictions_total{labels} 1.0" in text
    assert f"streams_record_cache_flushes_total{labels} 1.0" in text
    assert f"streams_record_cache_entries{labels} 2.0" in text
    assert f"streams_record_cache_size_bytes{labels} {2 * entry}.0" in text
    assert f"streams_record_cache_max_bytes {2 * entry + 10}.0" in text
    caches.clear()  # the task closed: its caches are no longer reported
    assert "streams_record_cache_hit_ratio{" not in metrics.exposition().decode()

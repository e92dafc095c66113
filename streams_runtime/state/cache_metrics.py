"""Prometheus metrics of the record cache (Kafka Streams' cache ``hit-ratio``, plus what an
operator sizing ``statestore_cache_max_bytes`` needs: bytes used, entries, evictions, flushes).

Read at scrape time from the caches themselves (a custom collector), so the stream thread pays
nothing per read or write beyond the counts :class:`~streams_runtime.state.caching.CacheStats`
keeps. Label ``task`` is the task id, ``store`` the store name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams_runtime.state.caching import ThreadCache

__all__ = ["RecordCacheCollector"]

_LABELS = ("task", "store")


class RecordCacheCollector(Collector):
    """Collects the metrics of every stream thread's record cache added to it."""

    def __init__(self) -> None:
        self._threads: list[ThreadCache] = []
        self._lock = threading.Lock()

    def add(self, cache: ThreadCache) -> None:
        """Report ``cache`` (a stream thread's) from now on."""
        with self._lock:
            self._threads.append(cache)

    def collect(self) -> Iterator[Metric]:
        ratio = GaugeMetricFamily(
            "streams_record_cache_hit_ratio",
            "Reads of a store's record cache that found the key, per read so far (Kafka"
            " Streams' hit-ratio; 0 before the first read).",
            labels=_LABELS,
        )
        hits = CounterMetricFamily(
            "streams_record_cache_hits", "Reads answered by the record cache.", labels=_LABELS
        )
        misses = CounterMetricFamily(
            "streams_record_cache_misses",
            "Reads the record cache passed on to the store.",
            labels=_LABELS,
        )
        evictions = CounterMetricFamily(
            "streams_record_cache_evictions",
            "Entries evicted (least recently used) because the thread's cache was full; an"
            " eviction of a dirty entry flushes the store's cache early.",
            labels=_LABELS,
        )
        flushes = CounterMetricFamily(
            "streams_record_cache_flushes",
            "Flushes of a store's cache that wrote and forwarded dirty entries (commits and"
            " evictions).",
            labels=_LABELS,
        )
        used = GaugeMetricFamily(
            "streams_record_cache_size_bytes",
            "Bytes a store's record cache holds (keys, values and per-entry overhead).",
            labels=_LABELS,
        )
        entries = GaugeMetricFamily(
            "streams_record_cache_entries", "Entries a store's record cache holds.", labels=_LABELS
        )
        budget = GaugeMetricFamily(
            "streams_record_cache_max_bytes",
            "The record cache budget (statestore_cache_max_bytes), summed over stream threads.",
        )
        with self._lock:
            threads = list(self._threads)
        budget.add_metric([], sum(thread.max_bytes for thread in threads))
        for thread in threads:
            for cache in thread.caches():
                labels = [cache.task, cache.store]
                stats = cache.stats
                ratio.add_metric(labels, stats.hit_ratio)
                hits.add_metric(labels, stats.hits)
                misses.add_metric(labels, stats.misses)
                evictions.add_metric(labels, stats.evictions)
                flushes.add_metric(labels, stats.flushes)
                used.add_metric(labels, cache.size_bytes)
                entries.add_metric(labels, len(cache))
        yield from (ratio, hits, misses, evictions, flushes, used, entries, budget)

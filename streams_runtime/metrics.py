"""Prometheus metrics of one runtime instance, in a registry of its own (so several apps in one
process, as in tests, never collide)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter as CounterDict
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from progress_control.http_messages import WithoutCreated
from streams_runtime.state.cache_metrics import RecordCacheCollector

__all__ = [
    "GlobalStoreMetrics",
    "RuntimeMetrics",
    "SecurityMetrics",
    "global_store_metrics",
    "security_metrics",
]

# Rejected membership records are logged as the replicator reads them.
logger = logging.getLogger("streams_runtime.cluster.membership_auth")

_MAX_LOGGED = 1000  # forged records may carry endless keys: log the first of this many

# Per-record processing time: microseconds to a second.
_RECORD_LATENCY_BUCKETS = (1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.1, 1.0)
# Record age when processed: milliseconds (live) to hours (catching up on old data).
_E2E_LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0)


class RuntimeMetrics:
    """The runtime's counters and gauges; label ``task`` is ``<subtopology>_<partition>``."""

    def __init__(self, application_id: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"application_id": application_id}
        r = self.registry
        self.records_processed = Counter(
            "streams_records_processed", "Data records processed.", ["task"], registry=r
        ).labels
        self.control_records = Counter(
            "streams_control_records", "Control records that advanced time.", ["task"], registry=r
        ).labels
        self.stream_time = Gauge(
            "streams_stream_time_seconds",
            "Task stream time, as Unix time in seconds (0 until the task took a record).",
            ["task"],
            registry=r,
        ).labels
        self.process_latency = Histogram(
            "streams_process_latency_seconds",
            "Time to process one record (Kafka Streams' process-latency), as the mean over one"
            " processing batch: observed once per batch (elapsed / records), never per record,"
            " so the processing loop pays one clock read and one observation per batch.",
            ["task"],
            buckets=_RECORD_LATENCY_BUCKETS,
            registry=r,
        ).labels
        self.e2e_latency = Histogram(
            "streams_record_e2e_latency_seconds",
            "End-to-end latency at the source (KIP-613's record-e2e-latency): wall-clock time"
            " minus the record's timestamp when the task takes it, sampled once per processing"
            " batch (its last data record).",
            ["task"],
            buckets=_E2E_LATENCY_BUCKETS,
            registry=r,
        ).labels
        self.restore_remaining = Gauge(
            "streams_restore_remaining_records",
            "Changelog records a restoring task still has to read (Kafka Streams'"
            " restore-remaining-records-total); 0 once restored.",
            ["task"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "streams_consumer_lag_records",
            "Records of an input partition on the broker not fetched yet (the consumer's"
            " records-lag), from cached watermarks, updated at most once a second.",
            ["topic", "partition"],
            registry=r,
        )
        self.control_records_rejected = Counter(
            "streams_control_records_rejected",
            "Records with a progress-control header that failed validation and were skipped"
            " (malformed, negative-timestamp, future-timestamp, unsigned, bad-signature, ...).",
            ["reason"],
            registry=r,
        ).labels
        self.enforced_processing = Counter(
            "streams_enforced_processing",
            "Records processed while a caught-up input was empty past max.task.idle.ms.",
            ["task"],
            registry=r,
        ).labels
        self.dropped_records = Counter(
            "streams_dropped_records",
            "Records dropped by an operator (late, null key).",
            ["store", "reason"],
            registry=r,
        ).labels
        self.idempotent_update_skips = Counter(
            "streams_idempotent_update_skip",
            "Table updates dropped by emit-on-change (KIP-557): same serialized value as stored,"
            " strictly newer timestamp. Label processor: the table's store.",
            ["processor"],
            registry=r,
        ).labels
        self.bad_records = Counter(
            "streams_bad_records",
            "Bad records: undeserializable, negative timestamp, user code raised.",
            ["reason", "action"],
            registry=r,
        ).labels
        self.punctuations = Counter(
            "streams_punctuations",
            "Punctuations fired (Kafka Streams' punctuate-total); those that raised count as"
            " bad records with reason punctuation.",
            ["task"],
            registry=r,
        ).labels
        self.suppress_buffer = Gauge(
            "streams_suppress_buffer_records",
            "Sessions waiting in a suppress buffer.",
            ["store"],
            registry=r,
        ).labels
        self.commit_latency = Histogram(
            "streams_commit_latency_seconds", "Duration of one commit (commit-latency).", registry=r
        )
        self.progress_ticks = Counter(
            "streams_progress_ticks", "Control records sent to propagate stream time.", registry=r
        )
        self.progress_promise = Gauge(
            "streams_progress_promise_seconds",
            "What ticks on an output or repartition topic may promise: the least committed bound"
            " over every task writing it (Unix time in seconds; -1: a writer has not committed"
            " one yet).",
            ["topic"],
            registry=r,
        ).labels
        self.progress_unreported_tasks = Gauge(
            "streams_progress_unreported_tasks",
            "Tasks writing an output or repartition topic that have not committed a bound yet: "
            "ticks on the topics they write wait for them.",
            registry=r,
        )
        self.rebalances = Counter(
            "streams_rebalances", "Partitions assigned or revoked.", ["kind"], registry=r
        ).labels
        self.producer_fenced = Counter(
            "streams_producer_fenced",
            "Times a fenced producer made a thread close its tasks and rejoin the group.",
            registry=r,
        )
        self.standby_restored = Counter(
            "streams_standby_restored_records",
            "Changelog records read by standby replicas, per store partition (a standby resumed"
            " from its on-disk checkpoint reads only the changelog's tail).",
            ["store", "partition"],
            registry=r,
        ).labels
        self.standby_lag = Gauge(
            "streams_standby_lag_records",
            "Changelog records a standby replica is behind, per store partition.",
            ["store", "partition"],
            registry=r,
        ).labels
        self.queries_served = Counter(
            "streams_queries_served",
            "Interactive queries answered from a local copy, by its role"
            " (active, standby, restoring).",
            ["role"],
            registry=r,
        ).labels
        self.routing_failures = Counter(
            "streams_query_routing_failures",
            "Interactive queries that could not be answered by the preferred copy, by reason"
            " (forward-failed: another instance did not answer; no-replica: none within bound;"
            " unavailable: no active and stale reads not allowed).",
            ["reason"],
            registry=r,
        ).labels
        self.restored_records = Counter(
            "streams_restored_records",
            "Store records restored by tasks becoming active, by where they came from (changelog:"
            " read from the changelog topic; standby: keys taken from a local standby replica).",
            ["source"],
            registry=r,
        ).labels
        self.tasks = Gauge("streams_active_tasks", "Tasks owned by this instance.", registry=r)
        self.info = Gauge(
            "streams_info", "Constant 1 with the application id.", list(labels), registry=r
        )
        self.info.labels(**labels).set(1)
        # Stream threads add their record caches (streams_record_cache_*).
        self.record_caches = RecordCacheCollector()
        r.register(self.record_caches)

    def total(self, counter: str, **labels: str) -> float:
        """The sum of counter ``counter`` (e.g. ``"streams_records_processed"``) over the label
        values matching ``labels`` (all of them when none are given)."""
        return sum(
            sample.value
            for metric in self.registry.collect()
            if metric.name == counter
            for sample in metric.samples
            if sample.name.endswith("_total") and labels.items() <= sample.labels.items()
        )

    def exposition(self) -> bytes:
        """The metrics in Prometheus text format, as ``/metrics`` serves them."""
        return generate_latest(WithoutCreated(self.registry))


class SecurityMetrics:
    """Counters of what the query server and the membership reader turned away."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        r = metrics.registry
        self.membership_rejected = Counter(
            "streams_membership_records_rejected",
            "Membership records ignored, by reason (unsigned, bad-signature, key-mismatch,"
            " malformed, replayed: older than the record held for that instance).",
            ["reason"],
            registry=r,
        ).labels
        self.connections_closed = Counter(
            "streams_query_connections_closed",
            "Query server connections closed by the server before a request was answered, by"
            " reason (timeout: no complete request in query_request_timeout_ms; evicted: the"
            " oldest idle connection, to make room at query_max_connections; refused: at the"
            " cap with every connection busy; too-large: request header over the limit;"
            " tls: handshake failed).",
            ["reason"],
            registry=r,
        ).labels
        self.unauthorized = Counter(
            "streams_query_unauthorized",
            "Query requests refused with 401 (missing or wrong bearer token).",
            registry=r,
        )
        self.open_connections = Gauge(
            "streams_query_connections", "Open query server connections.", registry=r
        )
        self._lock = threading.Lock()
        self._logged: set[tuple[str, str]] = set()
        self._rejections: CounterDict[str] = CounterDict()

    def reject_membership(self, instance: str, reason: str, detail: str = "") -> None:
        """Count an ignored membership record; log it once per claimed instance and reason."""
        self.membership_rejected(reason).inc()
        with self._lock:
            self._rejections[reason] += 1
            first = len(self._logged) < _MAX_LOGGED and (instance, reason) not in self._logged
            if first:
                self._logged.add((instance, reason))
        if first:
            logger.warning(
                "ignoring membership record claiming instance %(instance)r: %(reason)s"
                + (" (%(detail)s)" if detail else "")
                + " (logged once)",
                {"instance": instance[:100], "reason": reason, "detail": detail},
            )

    @property
    def membership_rejections(self) -> Mapping[str, int]:
        """Ignored membership records so far, per reason."""
        with self._lock:
            return dict(self._rejections)


_METRICS: weakref.WeakKeyDictionary[RuntimeMetrics, SecurityMetrics] = weakref.WeakKeyDictionary()
_METRICS_LOCK = threading.Lock()


def security_metrics(metrics: RuntimeMetrics) -> SecurityMetrics:
    """The one :class:`SecurityMetrics` of an app's registry (the server and the replicator
    both count into it)."""
    with _METRICS_LOCK:
        found = _METRICS.get(metrics)
        if found is None:
            found = _METRICS[metrics] = SecurityMetrics(metrics)
        return found


class GlobalStoreMetrics:
    """The global tables' metrics (Kafka Streams' global thread's), registered in an app's
    registry by the first global thread (or test driver) that asks."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        r = metrics.registry
        self.records_applied = Counter(
            "streams_global_records_applied",
            "Records of a global table's topic written to its store on this instance (updates"
            " and deletes; not skipped control records nor bad ones), per store.",
            ["store"],
            registry=r,
        ).labels
        self.lag = Gauge(
            "streams_global_lag_records",
            "Records of a global table's topic partition not in this instance's store yet (end"
            " offset minus the next offset to apply, from cached watermarks, at most once a"
            " second), per store and partition.",
            ["store", "partition"],
            registry=r,
        ).labels


_GLOBAL_METRICS: weakref.WeakKeyDictionary[RuntimeMetrics, GlobalStoreMetrics] = (
    weakref.WeakKeyDictionary()
)


def global_store_metrics(metrics: RuntimeMetrics) -> GlobalStoreMetrics:
    """The one :class:`GlobalStoreMetrics` of an app's registry."""
    with _METRICS_LOCK:
        found = _GLOBAL_METRICS.get(metrics)
        if found is None:
            found = _GLOBAL_METRICS[metrics] = GlobalStoreMetrics(metrics)
        return found

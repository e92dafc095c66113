"""Counters the host application can read, and a Prometheus collector over them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["MetricsSnapshot", "ProgressControlMetrics", "PrometheusCollector"]


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """A consistent copy of the counters."""

    ticks_sent: int
    """Control records acknowledged by the broker."""
    ticks_failed: int
    """Control records the broker or client rejected (logged, never raised)."""
    ticks_skipped: int
    """Control records not sent: the tick producer's local queue was full."""
    reports_sent: int
    partitions_idle: int
    last_tick_ms: dict[tuple[str, int], int] = field(default_factory=dict)
    """Timestamp of the last acknowledged tick per partition."""
    ack_recording: str = "python"
    """How a producer's acks are recorded: ``native`` (a librdkafka interceptor) or ``python``."""


class ProgressControlMetrics:
    """Thread-safe counters updated by the scheduler and the tick producer's callbacks."""

    def __init__(
        self, idle_partitions: Callable[[], int], *, ack_recording: str = "python"
    ) -> None:
        self._lock = threading.Lock()
        self._ack_recording = ack_recording
        self._idle_partitions = idle_partitions
        self._sent = self._failed = self._skipped = self._reports = 0
        self._last_tick: dict[tuple[str, int], int] = {}

    def tick_acked(self, topic: str, partition: int, timestamp_ms: int) -> None:
        with self._lock:
            self._sent += 1
            self._last_tick[(topic, partition)] = timestamp_ms

    def tick_failed(self) -> None:
        with self._lock:
            self._failed += 1

    def tick_skipped(self) -> None:
        with self._lock:
            self._skipped += 1

    def report_sent(self) -> None:
        with self._lock:
            self._reports += 1

    def snapshot(self) -> MetricsSnapshot:
        idle = self._idle_partitions()
        with self._lock:
            return MetricsSnapshot(
                self._sent,
                self._failed,
                self._skipped,
                self._reports,
                idle,
                dict(self._last_tick),
                self._ack_recording,
            )


class PrometheusCollector(Collector):
    """A producer's progress-control metrics for ``REGISTRY.register(collector)``, labelled
    ``source``. The last-tick timestamp is one series per topic (its latest partition's), or
    per partition with ``per_partition``: a writer to ten thousand partitions would otherwise
    keep ten thousand series."""

    def __init__(
        self, metrics: ProgressControlMetrics, source: str, *, per_partition: bool = False
    ) -> None:
        self._metrics = metrics
        self._source = source
        self._per_partition = per_partition

    def collect(self) -> Iterator[Metric]:
        snap = self._metrics.snapshot()
        labels = ["source"]
        for name, doc, value in (
            ("progress_control_ticks_sent", "Control records acknowledged.", snap.ticks_sent),
            ("progress_control_ticks_failed", "Control records that failed.", snap.ticks_failed),
            ("progress_control_ticks_skipped", "Ticks skipped, queue full.", snap.ticks_skipped),
            ("progress_control_reports_sent", "Activity reports sent.", snap.reports_sent),
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric([self._source], value)
            yield counter
        idle = GaugeMetricFamily(
            "progress_control_partitions_idle", "Partitions ticked since data.", labels=labels
        )
        idle.add_metric([self._source], snap.partitions_idle)
        yield idle
        doc = "Timestamp of the last acknowledged control record"
        if self._per_partition:
            last = GaugeMetricFamily(
                "progress_control_last_tick_timestamp_seconds",
                f"{doc}, per partition.",
                labels=[*labels, "topic", "partition"],
            )
            for (topic, partition), ms in sorted(snap.last_tick_ms.items()):
                last.add_metric([self._source, topic, str(partition)], ms / 1000)
            yield last
            return
        latest: dict[str, int] = {}
        for (topic, _partition), ms in snap.last_tick_ms.items():
            latest[topic] = max(ms, latest.get(topic, ms))
        last = GaugeMetricFamily(
            "progress_control_last_tick_timestamp_seconds",
            f"{doc}, per topic (its latest partition's).",
            labels=[*labels, "topic"],
        )
        for topic, ms in sorted(latest.items()):
            last.add_metric([self._source, topic], ms / 1000)
        yield last

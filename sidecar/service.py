"""The sidecar process: activity from the broker and from interceptor reports, verified ticks.

Sources of activity, usable together:

* **broker watch**: every ``watch.interval.ms`` one ``list_offsets`` call for the log end offsets of
  all watched partitions; a partition whose end offset moved beyond what we ourselves appended had
  activity, and its max timestamp (KIP-734) becomes the last data timestamp. This serves producers
  in any language, with no interceptor at all.
* **reports** from in-pod interceptors in report mode (:mod:`sidecar.reports`).

The schedule and the ticks are the interceptor's own (:class:`PartitionActivity`,
:class:`IdlePartitionScheduler`, :class:`TickSender`). Before sending, due ticks are **verified**
against the broker in one batched call: a partition whose end offset moved since we last looked was
advanced by someone else (data, or another sidecar replica's tick), so the tick is skipped. A
random per-replica ``jitter.ms`` added to ``start.ms`` makes one replica consistently first, so
N replicas send about as many ticks as one.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from interceptor.activity import DueTick, PartitionActivity, TopicPartition
from interceptor.metrics import ProgressControlMetrics, PrometheusCollector
from interceptor.scheduler import IdlePartitionScheduler
from interceptor.sender import TickSender
from interceptor.settings import TopicFilter
from sidecar.http import HealthServer
from sidecar.reports import ReportListener
from sidecar.settings import SidecarSettings
from sidecar.watch import BrokerWatch

__all__ = ["ProgressControlSidecar"]

logger = logging.getLogger(__name__)

_TICK_REPORT_POLL_S = 1.0
_MAX_RETRY_S = 30.0
_PEEK_LIMIT = 64  # more new records than this on a partition: data, no need to read them


class ProgressControlSidecar:
    """One sidecar: start it, then :meth:`stop` it (or use it as a context manager)."""

    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        client_log = logging.getLogger("sidecar.librdkafka")
        include_topic = TopicFilter(settings.topics_include, settings.topics_exclude)
        jitter_ms = random.randint(0, settings.jitter_ms)  # noqa: S311 - spreading, not secrecy
        schedule = dataclasses.replace(
            settings.tick_schedule(), start_ms=settings.start_ms + jitter_ms
        )
        self.activity = PartitionActivity(schedule, include_topic=include_topic)
        self.registry = CollectorRegistry()
        self._tick_metrics = ProgressControlMetrics(self.activity.idle_partitions)
        self.registry.register(PrometheusCollector(self._tick_metrics, settings.source_id))
        self._superseded = Counter(
            "progress_control_ticks_superseded",
            "Ticks skipped because the broker showed the partition already advanced.",
            registry=self.registry,
        )
        self._reports = Counter(
            "progress_control_reports_received",
            "Interceptor reports received.",
            registry=self.registry,
        )
        self._malformed = Counter(
            "progress_control_reports_malformed",
            "Malformed reports dropped.",
            registry=self.registry,
        )
        self._watch_errors = Counter(
            "progress_control_broker_errors",
            "Failed broker requests (watch, verification).",
            registry=self.registry,
        )
        self._watched = Gauge(
            "progress_control_partitions_watched",
            "Partitions under broker watch.",
            registry=self.registry,
        )
        self._ready_gauge = Gauge(
            "progress_control_ready", "1 when connected to the cluster.", registry=self.registry
        )
        client_config: dict[str, Any] = {**settings.kafka, "logger": client_log}
        self._watch = BrokerWatch(
            client_config,
            include_topic,
            timeout_s=settings.admin_timeout_s,
            metadata_refresh_s=settings.metadata_refresh_ms / 1000,
        )
        self._lock = threading.Lock()
        self._seen_end: dict[TopicPartition, int] = {}
        """End offset up to which the watch has looked for data."""
        self._data_end: dict[TopicPartition, tuple[float, int]] = {}
        """Per partition: (ack time of the idle period, end offset when its data was seen).
        Records beyond that offset are ticks of this idle period, ours or another replica's."""
        self._sender = TickSender(settings, settings.kafka, self._tick_metrics, eager=True)
        self._scheduler = IdlePartitionScheduler(self.activity, self._send_verified)
        self._scheduler.add_interval_job(self._sender.poll, _TICK_REPORT_POLL_S)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._watch_thread = threading.Thread(target=self._watch_loop, name="broker-watch")
        self._listener = (
            ReportListener(settings.report_listen, self._on_report_ack, self._malformed.inc)
            if settings.report_listen
            else None
        )
        self.http = HealthServer(
            settings.http_host, settings.http_port, self.registry, self.is_ready, self.is_healthy
        )
        logger.info(
            "sidecar configured: jitter %d ms, broker watch %s, reports on %s",
            jitter_ms,
            "on" if settings.watch_enabled else "off",
            settings.report_listen or "off",
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ProgressControlSidecar:
        self._scheduler.start()
        if self._listener is not None:
            self._listener.start()
        self._watch_thread.start()
        self.http.start()
        return self

    def stop(self) -> None:
        """Stop scheduling and watching, flush in-flight ticks, within ``shutdown_timeout_s``."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        self._stop.set()
        self._scheduler.shutdown()
        if self._listener is not None:
            self._listener.stop()
        self._watch_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._watch.close()
        remaining = self._sender.flush(max(0.0, deadline - time.monotonic()))
        if remaining:
            logger.warning("%d ticks were not delivered before shutdown", remaining)
        self.http.stop()

    def __enter__(self) -> ProgressControlSidecar:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def is_ready(self) -> bool:
        return self._ready.is_set()

    def is_healthy(self) -> bool:
        listener_ok = self._listener is None or self._listener.is_alive()
        return self._stop.is_set() or (self._watch_thread.is_alive() and listener_ok)

    @property
    def report_address(self) -> tuple[str, int] | None:
        return self._listener.address if self._listener is not None else None

    # -- activity -------------------------------------------------------------------------------

    def _record_activity(self, topic: str, partition: int, timestamp_ms: int, ack: float) -> None:
        deadline = self.activity.record_data_ack(topic, partition, timestamp_ms, ack)
        if deadline is not None:
            self._scheduler.arm(deadline)

    def _on_report_ack(self, topic: str, partition: int, timestamp_ms: int, ack: float) -> None:
        self._reports.inc()
        self._record_activity(topic, partition, timestamp_ms, ack)

    def _watch_loop(self) -> None:
        retry_s = 1.0
        while not self._stop.is_set():
            try:
                self._watch_once()
            except Exception as exc:
                self._watch_errors.inc()
                self._set_ready(False)
                logger.warning("broker unreachable (retrying in %.0fs): %s", retry_s, exc)
                self._stop.wait(retry_s)
                retry_s = min(retry_s * 2, _MAX_RETRY_S)
                continue
            retry_s = 1.0
            self._set_ready(True)
            self._stop.wait(self.settings.watch_interval_ms / 1000)

    def _watch_once(self) -> None:
        partitions = self._watch.partitions()  # also the readiness check: metadata was served
        self._watched.set(len(partitions))
        if not self.settings.watch_enabled:
            return
        observed_at = time.monotonic()
        ends = self._watch.end_offsets(partitions)
        quiet: dict[TopicPartition, tuple[int, int]] = {}
        busy: list[TopicPartition] = []
        with self._lock:
            for key, end in ends.items():
                seen = self._seen_end.get(key)
                self._seen_end[key] = end
                if seen is None:  # first sight: count as activity now (if it ever had data)
                    if end > 0:
                        busy.append(key)
                elif end - seen > _PEEK_LIMIT:
                    busy.append(key)
                elif end > seen:
                    quiet[key] = (seen, end)
        # A few new records on a quiet partition may be only ticks (another replica's, or ours):
        # read them; ticks are not activity.
        for key, timestamp_ms in self._watch.data_timestamps(quiet).items():
            if timestamp_ms is not None and timestamp_ms >= 0:
                self._record_data(key, ends[key], timestamp_ms, observed_at)
            elif timestamp_ms is not None:
                busy.append(key)
        if busy:
            for key, timestamp_ms in self._watch.max_timestamps(busy).items():
                if timestamp_ms >= 0:
                    self._record_data(key, ends[key], timestamp_ms, observed_at)

    def _record_data(self, key: TopicPartition, end: int, timestamp_ms: int, ack: float) -> None:
        with self._lock:
            self._data_end[key] = (ack, end)
        self._record_activity(key[0], key[1], timestamp_ms, ack)

    def _set_ready(self, ready: bool) -> None:
        if ready != self._ready.is_set():
            logger.info("ready" if ready else "not ready")
        (self._ready.set if ready else self._ready.clear)()
        self._ready_gauge.set(1 if ready else 0)

    # -- ticks ----------------------------------------------------------------------------------

    def _send_verified(self, due: list[DueTick]) -> None:
        """Called by the scheduler thread: tick ``n`` of an idle period is sent only if fewer
        than ``n + 1`` records were appended since the period's data, by anyone. So a replica
        whose ticks come later skips those the first replica already sent, and takes over if
        the first one stops."""
        keys = [(tick.topic, tick.partition) for tick in due]
        try:
            ends = self._watch.end_offsets(keys)
        except Exception as exc:
            self._watch_errors.inc()
            logger.warning("could not verify %d due ticks, skipping them: %s", len(due), exc)
            return
        verified = []
        with self._lock:
            for tick, key in zip(due, keys, strict=True):
                end = ends.get(key, 0)
                period_ack, data_end = self._data_end.get(key, (None, end))
                if period_ack != tick.last_ack_monotonic:
                    # An idle period the watch did not see start (a report): count from now.
                    data_end = end
                    self._data_end[key] = (tick.last_ack_monotonic, end)
                if end - data_end > tick.tick:
                    self._superseded.inc()
                else:
                    verified.append(tick)
        if verified:
            self._sender.send(verified)

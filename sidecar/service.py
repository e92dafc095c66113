"""The sidecar process: activity from the broker and from interceptor reports, verified ticks.

Sources of activity, usable together:

* **broker watch**: every ``watch.interval.ms`` one ``list_offsets`` call for the log end offsets of
  all watched partitions; a partition whose end offset moved beyond what we ourselves appended had
  activity, and its max timestamp (KIP-734) becomes the last data timestamp. This serves producers
  in any language, with no interceptor at all.
* **reports** from in-pod interceptors in report mode (:mod:`sidecar.reports`), checked before
  they are trusted (:mod:`sidecar.admission`): timestamps in range, topics and partitions that
  exist and pass the filter, at most ``max.tracked.partitions`` partitions.

**Restarts and rollouts.** A partition the watch sees for the first time resumes its schedule
where it is instead of starting over: its idle period is dated by the timestamp of its last data
record, and the ticks already after that record (ours, or a previous replica's) count as sent;
of the ticks due while no sidecar ran only the latest is sent, and only while the schedule has
ticks to come. So a partition idle past its schedule gets no tick after a restart, and one idle
for a little while continues where its schedule is.

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
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from progress_control.ticks.activity import DueTick, PartitionActivity, TopicPartition
from progress_control.ticks.idle_scheduler import IdlePartitionScheduler
from progress_control.ticks.metrics import ProgressControlMetrics, PrometheusCollector
from progress_control.ticks.sender import TickSender
from sidecar.admission import ActivityAdmission, ReportedAck
from sidecar.http import HealthServer
from sidecar.reports import ReportListener
from sidecar.settings import SidecarSettings
from sidecar.watch import BrokerWatch, PartitionTail, WatchStoppedError

__all__ = ["ProgressControlSidecar"]

logger = logging.getLogger(__name__)

_TICK_REPORT_POLL_S = 1.0
_MAX_RETRY_S = 30.0
_PEEK_LIMIT = 64  # more new records than this on a partition: data, no need to read them
_Ranges = dict[TopicPartition, tuple[int, int]]
_LAST_RECORDS = 2  # a restart reads this many first: the last record, or a transaction marker
_STOP_SHARE = 0.8  # of shutdown_timeout_s for stop(); the rest is margin for the process's exit


class ProgressControlSidecar:
    """One sidecar: start it, then :meth:`stop` it (or use it as a context manager)."""

    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        client_log = logging.getLogger("sidecar.librdkafka")
        include_topic = settings.topic_filter()
        jitter_ms = random.randint(0, settings.jitter_ms)  # noqa: S311 - spreading, not secrecy
        schedule = dataclasses.replace(
            settings.tick_schedule(), start_ms=settings.start_ms + jitter_ms
        )
        self.activity = PartitionActivity(schedule, include_topic=include_topic)
        self.registry = CollectorRegistry()
        self._tick_metrics = ProgressControlMetrics(self._partitions_idle)
        self.registry.register(
            PrometheusCollector(
                self._tick_metrics,
                settings.metrics_source,
                per_partition=settings.metrics_per_partition,
            )
        )
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
        self._dropped = Counter(
            "progress_control_activity_dropped",
            "Reported or watched activity dropped (origin: report or watch), by reason.",
            ["origin", "reason"],
            registry=self.registry,
        )
        self._resumed = Counter(
            "progress_control_partitions_resumed",
            "Partitions whose schedule was resumed from the broker at first sight.",
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
        self._connected_gauge = Gauge(
            "progress_control_broker_connected",
            "1 while the broker answers the watch's metadata requests, else 0.",
            registry=self.registry,
        )
        client_config: dict[str, Any] = {**settings.kafka, "logger": client_log}
        self._watch = BrokerWatch(
            client_config,
            include_topic,
            timeout_s=settings.admin_timeout_s,
            metadata_refresh_s=settings.metadata_refresh_ms / 1000,
            max_partitions=settings.max_tracked_partitions,
        )
        self._admission = ActivityAdmission(
            include_topic=include_topic,
            partition_count=self._watch.partition_count,
            tracked=self.activity.latest.__contains__,
            tracked_count=self.activity.latest.__len__,
            max_skew_ms=settings.max_skew_ms,
            max_tracked_partitions=settings.max_tracked_partitions,
            dropped=self._dropped,
        )
        self._lock = threading.Lock()
        self._seen_end: dict[TopicPartition, int] = {}
        """End offset up to which the watch has looked for data."""
        self._parked_since: float | None = None
        """When the reports parked now were first seen parked (report thread only)."""
        self._data_end: dict[TopicPartition, tuple[float, int]] = {}
        """Per partition: (ack time of the idle period, end offset when its data was seen).
        Records beyond that offset are ticks of this idle period, ours or another replica's."""
        self._ticked: dict[TopicPartition, float] = {}
        """Per partition: the ack time of the idle period this sidecar sent a tick in (or found
        ticked when it started)."""
        self._sender = TickSender(settings, settings.kafka, self._tick_metrics, eager=True)
        self._scheduler = IdlePartitionScheduler(self.activity, self._send_verified)
        self._scheduler.add_interval_job(self._sender.poll, _TICK_REPORT_POLL_S)
        self._started = threading.Event()
        self._stop = threading.Event()
        self._connected = threading.Event()
        # Daemon threads: one blocked in a broker call must not hold up the process's exit.
        self._watch_thread = threading.Thread(
            target=self._watch_loop, name="broker-watch", daemon=True
        )
        self._listener = (
            ReportListener(
                settings.report_listen,
                self._on_report_ack,
                self._malformed.inc,
                self._retry_parked_reports,
                socket_mode=settings.report_socket_mode,
                allowed_uids=settings.report_allowed_uids,
                on_refused_sender=self._admission.refuse_sender,
            )
            if settings.report_listen
            else None
        )
        if settings.report_listen_allow_network and self._listener is not None:
            logger.warning(
                "activity reports accepted from the network on %(report_listen)s "
                "(report_listen_allow_network): anyone who can reach it can forge activity",
                {"report_listen": settings.report_listen},
            )
        self.http = HealthServer(
            settings.http_host,
            settings.http_port,
            self.registry,
            self.is_ready,
            self.is_healthy,
            max_connections=settings.http_max_connections,
            request_timeout_s=settings.http_request_timeout_ms / 1000,
        )
        logger.info(
            "sidecar configured: jitter %(jitter_ms)d ms, broker watch %(watch)s, "
            "reports on %(report_listen)s",
            {
                "jitter_ms": jitter_ms,
                "watch": "on" if settings.watch_enabled else "off",
                "report_listen": settings.report_listen or "off",
            },
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ProgressControlSidecar:
        """Start the threads and the HTTP server."""
        self._scheduler.start()
        if self._listener is not None:
            self._listener.start()
        self._watch_thread.start()
        self.http.start()
        self._started.set()
        return self

    def stop(self) -> None:
        """Stop scheduling, watching and listening, and give in-flight ticks what time is left,
        within ``shutdown_timeout_s`` (less a margin for the process's exit) whatever the
        broker's state: broker requests in progress are abandoned, not waited for."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s * _STOP_SHARE

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        self._stop.set()
        self._watch.stop()  # requests in progress raise within half a second
        if self._listener is not None:
            self._listener.stop(remaining())
        # The scheduler's shutdown waits for a wake-up in progress (a verification request):
        # waited for in a daemon thread, up to the deadline.
        _run_with_timeout(self._scheduler.shutdown, "scheduler-shutdown", remaining())
        self._watch_thread.join(remaining())
        undelivered = self._sender.flush(remaining())
        if undelivered:
            logger.warning(
                "%(undelivered)d ticks were not delivered before shutdown",
                {"undelivered": undelivered},
            )
        if not self._watch_thread.is_alive():  # its consumer must not close under it
            self._watch.close()
        self.http.stop()
        if time.monotonic() > deadline:
            logger.warning(
                "stop took longer than %(share).0f%% of shutdown_timeout_s",
                {"share": _STOP_SHARE * 100},
            )

    def __enter__(self) -> ProgressControlSidecar:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def is_ready(self) -> bool:
        """``/readyz``: the sidecar process only (started, its threads alive, not stopping).
        The broker's state is not part of it: readiness of the sidecar container gates the
        app's pod, which a broker outage or bad credentials must not take out of its Service
        (they show in ``progress_control_broker_connected`` and the logs)."""
        return self._started.is_set() and not self._stop.is_set() and self._threads_alive()

    def is_healthy(self) -> bool:
        """``/healthz``: the threads are alive (or the sidecar is stopping)."""
        return self._stop.is_set() or self._threads_alive()

    def is_connected(self) -> bool:
        """Whether the broker answered the watch's last metadata request."""
        return self._connected.is_set()

    def _threads_alive(self) -> bool:
        listener_ok = self._listener is None or self._listener.is_alive()
        return self._watch_thread.is_alive() and listener_ok

    @property
    def report_address(self) -> tuple[str, int] | None:
        """The UDP ``(host, port)`` reports arrive on; ``None`` with a Unix socket or none."""
        return self._listener.address if self._listener is not None else None

    # -- activity -------------------------------------------------------------------------------

    def _record_activity(self, topic: str, partition: int, timestamp_ms: int, ack: float) -> None:
        deadline = self.activity.record_data_ack(topic, partition, timestamp_ms, ack)
        if deadline is not None:
            self._scheduler.arm(deadline)

    def _on_report_ack(
        self, source: str, topic: str, partition: int, timestamp_ms: int, ack: float
    ) -> None:
        self._reports.inc()
        reported = ReportedAck(source, topic, partition, timestamp_ms, ack)
        if self._admission.admit_report(reported):
            self._record_activity(topic, partition, timestamp_ms, ack)

    def _retry_parked_reports(self) -> None:
        """Report thread, between datagrams: reports for topics our metadata did not know are
        retried against metadata requested after they were parked. The refresh asked for here
        runs in the background (at most one a second), so a broker outage never stalls the
        reports."""
        if not self._admission.parked:
            return
        if self._parked_since is None:
            self._parked_since = time.monotonic()  # right after the datagram that parked them
        as_of = self._watch.metadata_as_of
        if as_of is None or as_of <= self._parked_since:
            self._watch.refresh_soon()
            return
        self._parked_since = None
        for reported in self._admission.retry_parked():
            self._record_activity(
                reported.topic, reported.partition, reported.timestamp_ms, reported.ack_monotonic
            )

    def _watch_loop(self) -> None:
        retry_s = 1.0
        while not self._stop.is_set():
            try:
                self._watch_once()
            except WatchStoppedError:
                return
            except Exception as exc:
                self._watch_errors.inc()
                self._set_connected(False)
                logger.warning(
                    "broker unreachable (retrying in %(retry_s).0fs): %(error)s",
                    {"retry_s": retry_s, "error": str(exc)},
                )
                self._stop.wait(retry_s)
                retry_s = min(retry_s * 2, _MAX_RETRY_S)
                continue
            retry_s = 1.0
            self._set_connected(True)
            self._stop.wait(self.settings.watch_interval_ms / 1000)

    def _watch_once(self) -> None:
        partitions = self._watch.partitions()  # also the connection check: metadata was served
        self._watched.set(len(partitions))
        if not self.settings.watch_enabled:
            return
        observed_at = time.monotonic()
        ends = self._watch.end_offsets(partitions)
        quiet, busy, first = self._classify(ends)
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
        if first:
            self._resume(first, observed_at)

    def _classify(
        self, ends: dict[TopicPartition, int]
    ) -> tuple[
        dict[TopicPartition, tuple[int, int]], list[TopicPartition], dict[TopicPartition, int]
    ]:
        """Split partitions by what moved since the last look: (quiet: a few new records, to
        read; busy: many, data for sure; first: seen for the first time, to resume)."""
        quiet: dict[TopicPartition, tuple[int, int]] = {}
        busy: list[TopicPartition] = []
        first: dict[TopicPartition, int] = {}
        with self._lock:
            for key, end in ends.items():
                seen = self._seen_end.get(key)
                self._seen_end[key] = end
                if seen is None:
                    if end > 0:  # empty partitions wait for their first data
                        first[key] = end
                elif end - seen > _PEEK_LIMIT:
                    busy.append(key)
                elif end > seen:
                    quiet[key] = (seen, end)
        return quiet, busy, first

    def _record_data(self, key: TopicPartition, end: int, timestamp_ms: int, ack: float) -> None:
        if not self._admission.admit_watched(key):
            return
        with self._lock:
            self._data_end[key] = (ack, end)
        self._record_activity(key[0], key[1], timestamp_ms, ack)

    def _resume(self, ends: dict[TopicPartition, int], observed_at: float) -> None:
        """Partitions seen for the first time (all of them after a restart): date their idle
        period by their last data record and count the ticks already after it."""
        # Most partitions end with data: read only their last record(s) first; read further
        # back only where the tail is ticks, which are small.
        tails = self._watch.tails(ends, _LAST_RECORDS)
        again = {
            k: end for k, end in ends.items() if k not in tails or tails[k].data_offset is None
        }
        tails |= self._watch.tails(again, _PEEK_LIMIT)
        unread = [key for key in ends if key not in tails]
        max_timestamps = self._watch.max_timestamps(unread) if unread else {}
        wall_ms = time.time() * 1000
        for key, end in ends.items():
            tail = tails.get(key)
            if tail is not None:
                timestamp_ms, ticks_seen, data_end = _idle_period(tail)
            else:  # nothing readable: date it by the partition's max timestamp (KIP-734)
                timestamp_ms, ticks_seen, data_end = max_timestamps.get(key, -1), 0, end
            if timestamp_ms < 0 or not self._admission.admit_watched(key):
                continue
            # The record's timestamp stands for its append time (exact with LogAppendTime;
            # a producer whose event time lags the clock makes its partition look idler).
            ack = observed_at - max(0.0, wall_ms - timestamp_ms) / 1000
            with self._lock:
                self._data_end[key] = (ack, data_end)
            deadline = self.activity.resume(key[0], key[1], timestamp_ms, ack, ticks_seen)
            if deadline is not None:
                self._resumed.inc()
                if ticks_seen:
                    with self._lock:
                        self._ticked[key] = self.activity.latest[key][1]
                self._scheduler.arm(deadline)

    def _partitions_idle(self) -> int:
        """Partitions ticked since their last data, as far as this sidecar knows: a due tick
        the end-offset check found superseded is no tick (with ``watch_interval_ms`` above
        ``start_ms`` a busy partition's tick falls due before the watch sees its new data)."""
        latest = self.activity.latest
        with self._lock:
            for key, period in list(self._ticked.items()):
                entry = latest.get(key)
                if entry is None or entry[1] != period:
                    del self._ticked[key]  # data since: a new idle period
            return len(self._ticked)

    def _set_connected(self, connected: bool) -> None:
        if connected != self._connected.is_set():
            logger.info("connected to the cluster" if connected else "broker unreachable")
        (self._connected.set if connected else self._connected.clear)()
        self._connected_gauge.set(1 if connected else 0)

    # -- ticks ----------------------------------------------------------------------------------

    def _send_verified(self, due: list[DueTick]) -> None:
        """Called by the scheduler thread: tick ``n`` of an idle period is sent only if fewer
        than ``n + 1`` records were appended since the period's data, by anyone. So a replica
        whose ticks come later skips those the first replica already sent, and takes over if
        the first one stops."""
        keys = [(tick.topic, tick.partition) for tick in due]
        try:
            ends = self._watch.end_offsets(keys)
        except WatchStoppedError:
            return
        except Exception as exc:
            self._watch_errors.inc()
            logger.warning(
                "could not verify %(skipped)d due ticks, skipping them: %(error)s",
                {"skipped": len(due), "error": str(exc)},
            )
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
                    self._ticked[key] = tick.last_ack_monotonic
        if verified:
            self._sender.send(verified)


def _idle_period(tail: PartitionTail) -> tuple[int, int, int]:
    """(data timestamp, ticks already sent, end offset of the data) of a partition's current
    idle period, from its last records. Only ticks read: the data is further back, so the
    period is at least as old as the first of them, with at least that many ticks sent."""
    if tail.data_offset is not None and tail.data_timestamp_ms is not None:
        return tail.data_timestamp_ms, tail.controls_after, tail.data_offset + 1
    timestamp_ms = tail.first_control_timestamp_ms
    return (-1 if timestamp_ms is None else timestamp_ms), tail.controls_after, tail.first_offset


def _run_with_timeout(func: Callable[[], None], name: str, timeout_s: float) -> None:
    """Run ``func`` in a daemon thread and wait for it up to ``timeout_s``."""
    thread = threading.Thread(target=func, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        logger.warning("%(step)s did not finish in time; not waiting for it", {"step": name})

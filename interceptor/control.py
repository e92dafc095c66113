"""One producer's progress control: ack recording, scheduling, and ticks or reports."""

from __future__ import annotations

import logging
import threading
import types
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

from interceptor.native import AckTableLike
from interceptor.report import ReportSender
from interceptor.settings import InterceptorSettings, Mode
from progress_control.ticks.activity import PartitionActivity, TopicPartition
from progress_control.ticks.idle_scheduler import IdlePartitionScheduler
from progress_control.ticks.in_flight import RecordsInFlight
from progress_control.ticks.metrics import (
    MetricsSnapshot,
    ProgressControlMetrics,
    PrometheusCollector,
)
from progress_control.ticks.sender import TickSender

__all__ = ["DeliveryCallback", "ProgressControl"]

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]

_LOG_APPEND = TIMESTAMP_LOG_APPEND_TIME
_TICK_REPORT_POLL_S = 1.0  # serve tick delivery reports even when no tick is due
# The native recorder's table is drained right before every tick decision; between those, this
# often (at most), so that a new partition is tracked well before its first deadline.
_DRAIN_MAX_S = 0.25


def _drain_period_s(start_ms: int) -> float:
    return max(0.01, min(_DRAIN_MAX_S, start_ms / 4000))


def _direct(callback: DeliveryCallback) -> DeliveryCallback:
    """``callback`` itself, or for an instance of a Python class with ``__call__``, that bound
    method: calling it from our wrapper then skips the ``__call__`` lookup (a slot call) per ack.
    """
    call = getattr(type(callback), "__call__", None)  # noqa: B004 - the class's, not callable()
    if isinstance(call, types.FunctionType):
        bound: DeliveryCallback = call.__get__(callback)
        return bound
    return callback


class ProgressControl:
    """Records a producer's data acks and keeps its idle partitions' stream time moving.

    Acks arrive one of two ways: with ``ack_table``, the native recorder (a librdkafka
    interceptor, :mod:`interceptor.native`) stores them in C and :meth:`drain_acks` reads them
    from the scheduler thread; without, the producer wraps its delivery callbacks with
    :meth:`delivery_callback` and calls :meth:`commit_acks` after serving them, and tells
    :attr:`in_flight` of every record it sends (the native recorder sees sends itself).
    """

    def __init__(
        self,
        settings: InterceptorSettings,
        host_config: Mapping[str, Any],
        ack_table: AckTableLike | None = None,
    ) -> None:
        self.settings = settings
        self.ack_table = ack_table
        self.ack_recording = "python" if ack_table is None else "native"
        """Which path records this producer's acks: ``native`` or ``python``."""
        self._drain_lock = threading.Lock()
        include_topic = settings.topic_filter()
        self._activity = PartitionActivity(settings.tick_schedule(), include_topic=include_topic)
        self.pending_acks: dict[Any, Any] = self._activity.pending
        """Acks recorded and not yet committed; the producer tests it before :meth:`commit_acks`."""
        self.in_flight: RecordsInFlight | None = None
        """The Python path's records sent and not yet settled, when it sends ticks (the
        native recorder sees sends itself; a sidecar's ticks do not use them)."""
        self._metrics = ProgressControlMetrics(
            self._activity.idle_partitions, ack_recording=self.ack_recording
        )
        self._errors_logged = 0
        self._closed = False
        self._sender: TickSender | None = None
        self._reporter: ReportSender | None = None
        if settings.mode is Mode.REPORT:
            self._reporter = ReportSender(
                self._activity,
                settings.report_address,
                settings.source_id,
                self._metrics,
                include_topic=include_topic,
            )
            # Only the scheduler's thread is used: reports go out periodically, no ticks are due.
            self._scheduler = IdlePartitionScheduler(self._activity, lambda _: None)
            self._scheduler.add_interval_job(self._report, settings.report_interval_ms / 1000)
        else:
            if ack_table is None:
                self.in_flight = RecordsInFlight()
                in_flight = self.in_flight.oldest
            else:
                in_flight = ack_table.in_flight
            self._sender = TickSender(settings, host_config, self._metrics, in_flight=in_flight)
            self._scheduler = IdlePartitionScheduler(
                self._activity, self._sender.send, before_wake=self.drain_acks
            )
            self._scheduler.add_interval_job(self._sender.poll, _TICK_REPORT_POLL_S)
            self._scheduler.add_interval_job(
                self.drain_acks if self.in_flight is None else self.in_flight.fold,
                _drain_period_s(settings.start_ms),
            )
        self._scheduler.start()

    def drain_acks(self) -> None:
        """Move the acks the native recorder stored since the last call into the activity map
        (their exact ack times), and track new partitions. Without it, nothing to do."""
        table = self.ack_table
        if table is None:
            return
        activity = self._activity
        with self._drain_lock:  # two drains must not apply their entries out of order
            drained = table.drain()
            if not drained:
                return
            acks = [
                (
                    (topic, partition),
                    timestamp_ms
                    if timestamp_type != TIMESTAMP_NOT_AVAILABLE and timestamp_ms >= 0
                    else activity.wall_clock_at(ack),
                    ack,
                )
                for topic, partition, timestamp_type, timestamp_ms, ack, _count in drained
            ]
            new = activity.record_acks(acks)
        for key in new:
            self._new_partition(key)

    def _report(self) -> None:
        assert self._reporter is not None
        self.drain_acks()
        self._reporter.send()

    def delivery_callback(self, user_callback: DeliveryCallback | None) -> DeliveryCallback:
        """A delivery callback that records the ack, then calls ``user_callback`` (if any) with
        the same arguments. Recording never raises into the host; the ack reaches the activity
        map at the next :meth:`commit_acks`."""
        # The host's hot path, once per record: one dict store and the record settled, no clock
        # reading (commit_acks takes one per poll). A reported message always has a topic.
        pending: dict[Any, Any] = self._activity.pending
        # Settles go to the in-flight log (RecordsInFlight.settled, inlined: one append).
        settles: deque[Any] | None = None if self.in_flight is None else self.in_flight.settles

        def record(error: KafkaError | None, msg: Message) -> None:
            if settles is not None:
                kind, timestamp_ms = msg.timestamp()
                settles.append((msg.topic(), timestamp_ms, error is None and kind == _LOG_APPEND))
            if error is None:
                pending[msg.topic(), msg.partition()] = msg

        if user_callback is None:
            return record
        call = _direct(user_callback)

        # The same lines as record(), inlined: calling record() here would add a Python call
        # per ack.
        def record_then_call(error: KafkaError | None, msg: Message) -> None:
            if settles is not None:
                kind, timestamp_ms = msg.timestamp()
                settles.append((msg.topic(), timestamp_ms, error is None and kind == _LOG_APPEND))
            if error is None:
                pending[msg.topic(), msg.partition()] = msg
            call(error, msg)

        return record_then_call

    def commit_acks(self) -> None:
        """Stamp the acks recorded since the last call with the time now and hand them to the
        scheduler. The producer calls it when a call that serves delivery reports returns."""
        for key in self._activity.commit_pending():
            self._new_partition(key)

    def _new_partition(self, key: TopicPartition) -> None:
        if self._sender is None:
            return  # report mode: the sidecar schedules ticks, nothing to track here
        try:
            deadline = self._activity.track(key)
            if deadline is not None:
                self._scheduler.arm(deadline)
        except Exception:
            # Never break the host's delivery callbacks; log a bounded amount.
            if self._errors_logged < 10:
                self._errors_logged += 1
                logger.exception(
                    "progress control could not track %(topic)s[%(partition)d]",
                    {"topic": key[0], "partition": key[1]},
                )

    def metrics(self) -> MetricsSnapshot:
        return self._metrics.snapshot()

    def collector(self) -> PrometheusCollector:
        return PrometheusCollector(
            self._metrics,
            self.settings.source_id,
            per_partition=self.settings.metrics_per_partition,
        )

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding ticks; scheduling goes on (apps flush in loops)."""
        return self._sender.flush(timeout_s) if self._sender else 0

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the scheduler thread and flush outstanding ticks. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.shutdown()
        self.drain_acks()  # report mode's last report includes them
        if self._sender is not None:
            remaining = self._sender.flush(timeout_s)
            if remaining:
                logger.warning(
                    "%(undelivered)d progress-control ticks were not delivered at close",
                    {"undelivered": remaining},
                )
        if self._reporter is not None:
            self._report()
            self._reporter.close()

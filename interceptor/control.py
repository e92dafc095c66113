"""One producer's progress control: ack recording, scheduling, and ticks or reports."""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message

from interceptor.report import ReportSender
from interceptor.settings import InterceptorSettings, Mode
from progress_control.ticks.activity import PartitionActivity, TopicPartition
from progress_control.ticks.idle_scheduler import IdlePartitionScheduler
from progress_control.ticks.metrics import (
    MetricsSnapshot,
    ProgressControlMetrics,
    PrometheusCollector,
)
from progress_control.ticks.sender import TickSender

__all__ = ["DeliveryCallback", "ProgressControl"]

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]

_TICK_REPORT_POLL_S = 1.0  # serve tick delivery reports even when no tick is due


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
    """Records a producer's data acks and keeps its idle partitions' stream time moving."""

    def __init__(self, settings: InterceptorSettings, host_config: Mapping[str, Any]) -> None:
        self.settings = settings
        include_topic = settings.topic_filter()
        self._activity = PartitionActivity(settings.tick_schedule(), include_topic=include_topic)
        self.pending_acks: dict[Any, Any] = self._activity.pending
        """Acks recorded and not yet committed; the producer tests it before :meth:`commit_acks`."""
        self._metrics = ProgressControlMetrics(self._activity.idle_partitions)
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
            self._scheduler.add_interval_job(
                self._reporter.send, settings.report_interval_ms / 1000
            )
        else:
            self._sender = TickSender(settings, host_config, self._metrics)
            self._scheduler = IdlePartitionScheduler(self._activity, self._sender.send)
            self._scheduler.add_interval_job(self._sender.poll, _TICK_REPORT_POLL_S)
        self._scheduler.start()

    def delivery_callback(self, user_callback: DeliveryCallback | None) -> DeliveryCallback:
        """A delivery callback that records the ack, then calls ``user_callback`` (if any) with
        the same arguments. Recording never raises into the host; the ack reaches the activity
        map at the next :meth:`commit_acks`."""
        # The host's hot path, once per record: one dict store, no clock reading (commit_acks
        # takes one per poll), no lock. A delivered message always has a topic and partition.
        pending: dict[Any, Any] = self._activity.pending

        def record(error: KafkaError | None, msg: Message) -> None:
            if error is None:
                pending[msg.topic(), msg.partition()] = msg

        if user_callback is None:
            return record
        call = _direct(user_callback)

        # The same line as record(), inlined: calling record() here would add a Python call
        # per ack.
        def record_then_call(error: KafkaError | None, msg: Message) -> None:
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
        return PrometheusCollector(self._metrics, self.settings.source_id)

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding ticks; scheduling goes on (apps flush in loops)."""
        return self._sender.flush(timeout_s) if self._sender else 0

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the scheduler thread and flush outstanding ticks. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.shutdown()
        if self._sender is not None:
            remaining = self._sender.flush(timeout_s)
            if remaining:
                logger.warning(
                    "%(undelivered)d progress-control ticks were not delivered at close",
                    {"undelivered": remaining},
                )
        if self._reporter is not None:
            self._reporter.send()
            self._reporter.close()

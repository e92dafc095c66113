"""Drop-in producer classes with progress control attached by configuration.

    from interceptor import Producer

    producer = Producer({
        "bootstrap.servers": "localhost:9092",
        "progress.control.start.ms": 5000,   # every progress.control.* key is ours; stripped
    })

Acks are recorded one of two ways (``progress.control.ack.recording``, :mod:`interceptor.native`):

- natively, by default when the plugin loads: a librdkafka interceptor records each ack in C with
  its exact time. The application's callbacks are handed to librdkafka untouched, and
  ``produce()``, ``poll()`` and ``produce_batch()`` are librdkafka's own methods: nothing runs in
  Python per record. ``producer.progress_control.ack_recording`` (and the metrics) say ``native``.
- in Python, the fallback: a config-level ``on_delivery`` and per-call callbacks are wrapped, so
  every ack is recorded and the application's callback still runs with the same arguments, in the
  same thread; a producer without a callback of its own gets one that only records. The acks a
  call serves (``poll()``, ``flush()``, committing or aborting a transaction) are stamped with one
  clock reading when that call returns; ``flush()`` returns to stamp them every ``_ACK_COMMIT_S``
  while it waits. ``produce()`` and ``produce_batch()`` register each record as in flight until
  its delivery report (:mod:`progress_control.ticks.in_flight`); a record without a timestamp of
  its own at a clock reading taken before the send, at or below the one librdkafka dates it with.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.cimpl import Producer as KafkaProducer
from confluent_kafka.serializing_producer import SerializingProducer as KafkaSerializingProducer

from interceptor.control import DeliveryCallback, ProgressControl
from interceptor.native import native_acks
from interceptor.settings import InterceptorSettings, split_config
from progress_control.ticks.in_flight import RecordsInFlight
from progress_control.ticks.metrics import MetricsSnapshot, PrometheusCollector

__all__ = ["Producer", "SerializingProducer"]

_TICK_FLUSH_S = 10.0  # bound on waiting for ticks in flush() without a timeout
_CLOSE_AT_EXIT_S = 2.0  # bound on flushing ticks when the process exits (the broker may be gone)
# flush() waits in chunks this long so that the acks it serves are stamped (and idle partitions
# noticed) no later than this after their delivery report, however long the whole flush takes.
_ACK_COMMIT_S = 0.05

Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None


class _ProgressControlled:
    """Mixin placed before a confluent-kafka producer class in the MRO."""

    # A class-level default for instances whose __init__ never ran: OpenTelemetry's
    # ProxiedProducer subclasses the bound Producer (ours, under the autoload) but only wraps
    # another producer, and its close() must still work as on confluent-kafka's. (Only this
    # attribute: it is never read per record.)
    _progress: ProgressControl | None = None
    _pending: dict[Any, Any] | None
    """The acks recorded since the last commit (empty or ``None`` means nothing to do)."""
    _wrap: Callable[[DeliveryCallback | None], DeliveryCallback] | None
    """Wraps a callback to record acks in Python; ``None`` when acks are recorded natively."""
    _in_flight: RecordsInFlight | None
    """Where the Python path registers sends; ``None`` when acks are recorded natively."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        ours, theirs = split_config({**(config or {}), **kwargs})
        settings = InterceptorSettings.from_config(ours)  # fails fast, naming the setting
        self._progress = None
        self._pending = None
        self._wrap = None
        self._in_flight = None
        if settings.enabled:
            native = native_acks(settings.ack_recording)
            table = None if native is None else native.new_table()
            progress = ProgressControl(settings, theirs, table)
            if native is not None and table is not None:
                theirs = native.producer_config(theirs, table)
            else:
                theirs["on_delivery"] = progress.delivery_callback(theirs.get("on_delivery"))
                self._pending = progress.pending_acks
                self._wrap = progress.delivery_callback
                self._in_flight = progress.in_flight
            self._progress = progress
        try:
            super().__init__(theirs)  # type: ignore[call-arg]
        except BaseException:
            if self._progress is not None:
                self._progress.close(timeout_s=0)
            raise
        native_class = _NATIVE_CLASSES.get(type(self))
        if self._progress is not None and self._wrap is None and native_class is not None:
            # librdkafka's own produce()/poll(): nothing in Python per record. Only for our
            # classes themselves: an application's subclass keeps its overrides.
            self.__class__ = native_class
        if self._progress is not None:
            # Stop the scheduler thread when the producer is collected or the process exits.
            weakref.finalize(self, self._progress.close, _CLOSE_AT_EXIT_S)

    def poll(self, timeout: float = -1) -> int:
        try:
            served: int = _kafka_poll(self, timeout)
        finally:  # also when the application's callback raised: its ack was recorded
            if self._pending:
                self._commit()
        return served

    def flush(self, timeout: float = -1) -> int:
        if self._progress is None:
            flushed: int = _kafka_flush(self, timeout)
            return flushed
        if self._pending is None:  # native: acks are stamped where they happen
            remaining: int = _kafka_flush(self, timeout)
        else:
            remaining = self._flush_in_chunks(timeout)
        # Ticks wait no longer than the caller agreed to (nor than a bound when it did not):
        # an app flushing with a short timeout during an outage must not block on our ticks.
        bound = _TICK_FLUSH_S if timeout < 0 else min(timeout, _TICK_FLUSH_S)
        self._progress.flush(bound)
        return remaining

    def _flush_in_chunks(self, timeout: float) -> int:
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while True:
            chunk = _ACK_COMMIT_S
            if deadline is not None:
                chunk = min(chunk, max(0.0, deadline - time.monotonic()))
            try:
                remaining: int = _kafka_flush(self, chunk)
            finally:
                if self._pending:
                    self._commit()
            if remaining == 0 or (deadline is not None and time.monotonic() >= deadline):
                return remaining

    def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().commit_transaction(*args, **kwargs)  # type: ignore[misc]
        finally:  # committing flushes: it serves delivery reports
            if self._pending:
                self._commit()

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().abort_transaction(*args, **kwargs)  # type: ignore[misc]
        finally:
            if self._pending:
                self._commit()

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> int:
        """``produce_batch`` with every ack recorded: a batch-level callback and the messages'
        own ``callback`` entries would bypass the recording one, so they are wrapped for the
        call (and the entries restored after it: the messages are the caller's dicts)."""
        wrap = self._wrap
        user_callback = on_delivery or callback
        if wrap is None:
            if user_callback is None:
                queued: int = _kafka_produce_batch(self, topic, messages, partition)
            else:
                queued = _kafka_produce_batch(
                    self, topic, messages, partition, on_delivery=user_callback
                )
            return queued
        own = [(m, m["callback"]) for m in messages if isinstance(m, dict) and m.get("callback")]
        for message, message_callback in own:
            message["callback"] = wrap(message_callback)
        # librdkafka dates a batch's records itself, at or after this reading (produce_batch
        # takes no timestamps): in flight from here, settled below when not queued.
        in_flight = self._in_flight
        sent_at = int(_time() * 1000)
        if in_flight is not None:
            in_flight.sends.extend([(topic, sent_at)] * len(messages))  # sent(), once for all
        queued = 0
        try:
            if user_callback is None:
                queued = _kafka_produce_batch(self, topic, messages, partition)
            else:
                queued = _kafka_produce_batch(
                    self,
                    topic,
                    messages,
                    partition,
                    on_delivery=wrap(user_callback),
                )
        finally:
            for message, message_callback in own:
                message["callback"] = message_callback
            if in_flight is not None:  # those not queued never were in flight
                for _ in range(len(messages) - queued):
                    in_flight.settled(topic, sent_at)
        return queued

    def _commit(self) -> None:
        if self._progress is not None:
            self._progress.commit_acks()

    def close(self, *args: Any, **kwargs: Any) -> Any:
        if self._progress is not None:
            self._progress.commit_acks()  # report mode's last report includes them
            self._progress.close()
        # confluent-kafka's own close() came in 2.13.0; before it, the close is ours alone.
        kafka_close = getattr(super(), "close", None)
        return None if kafka_close is None else kafka_close(*args, **kwargs)

    @property
    def progress_control(self) -> ProgressControl | None:
        """This producer's progress control, ``None`` when disabled."""
        return self._progress

    def progress_metrics(self) -> MetricsSnapshot | None:
        """Ticks sent, skipped, failed, partitions idle, last tick per partition."""
        return self._progress.metrics() if self._progress else None

    def progress_collector(self) -> PrometheusCollector | None:
        """A Prometheus collector for ``prometheus_client.REGISTRY.register(...)``."""
        return self._progress.collector() if self._progress else None


# produce() runs once per record, so each class spells out its parameters and calls its base
# directly: no *args/**kwargs packing, no super() lookup, and no wrapper unless the call carries a
# callback. This keeps the override as fast as the C method itself.
_kafka_produce = KafkaProducer.produce
_serializing_produce = KafkaSerializingProducer.produce
# Called on the mixin's instances, which are always also KafkaProducer instances.
_kafka_poll: Callable[..., int] = KafkaProducer.poll
_kafka_flush: Callable[..., int] = KafkaProducer.flush
_kafka_produce_batch: Callable[..., int] = KafkaProducer.produce_batch


_time = time.time


class Producer(_ProgressControlled, KafkaProducer):
    """``confluent_kafka.Producer`` with progress control."""

    def produce(  # noqa: PLR0917 - the same parameters, in the same order, as the C method
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers = None,
    ) -> None:
        user_callback = on_delivery or callback
        in_flight = self._in_flight
        sent = 0
        if in_flight is not None:
            sent = timestamp or int(_time() * 1000)
            in_flight.sends.append((topic, sent))  # RecordsInFlight.sent, inlined
        try:
            if user_callback is None and timestamp == 0 and headers is None:
                # Only the arguments given: the C method parses each one it is passed.
                if key is None and partition == -1:
                    _kafka_produce(self, topic, value)
                else:
                    _kafka_produce(self, topic, value, key, partition)
                return
            if user_callback is not None and self._wrap is not None:
                user_callback = self._wrap(user_callback)
            _kafka_produce(
                self,
                topic,
                value,
                key,
                partition,
                on_delivery=user_callback,
                timestamp=timestamp,
                headers=headers,
            )
        except BaseException:
            if in_flight is not None:  # not queued: never in flight
                in_flight.settled(topic, sent)
            raise


class SerializingProducer(_ProgressControlled, KafkaSerializingProducer):
    """``confluent_kafka.SerializingProducer`` with progress control."""

    def produce(  # type: ignore[override]  # noqa: PLR0917 - SerializingProducer's own signature
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers = None,
    ) -> None:
        in_flight = self._in_flight
        if in_flight is None:
            _serializing_produce(
                self, topic, key, value, partition, on_delivery, timestamp, headers
            )
            return
        sent = timestamp or int(_time() * 1000)
        in_flight.sends.append((topic, sent))  # RecordsInFlight.sent, inlined
        if on_delivery is not None and self._wrap is not None:
            on_delivery = self._wrap(on_delivery)
        try:
            _serializing_produce(
                self, topic, key, value, partition, on_delivery, timestamp, headers
            )
        except BaseException:
            in_flight.settled(topic, sent)  # not queued (or not serialised): never in flight
            raise


class _NativeAcksProducer(Producer):
    """A :class:`Producer` whose acks the native recorder stores: librdkafka's methods as they
    are (the instance's class is switched to this one when the plugin is bound)."""

    produce = KafkaProducer.produce
    poll = KafkaProducer.poll
    produce_batch = KafkaProducer.produce_batch


class _NativeAcksSerializingProducer(SerializingProducer):
    """A :class:`SerializingProducer` whose acks the native recorder stores."""

    produce = KafkaSerializingProducer.produce
    poll = KafkaProducer.poll
    produce_batch = KafkaProducer.produce_batch


_NATIVE_CLASSES: dict[type, type] = {
    Producer: _NativeAcksProducer,
    SerializingProducer: _NativeAcksSerializingProducer,
}

"""Sends control records through a producer of its own, never the host's.

Given a signing key (``signing.key.id`` and its secret), every control record carries a signed
(protocol v2) marker, which readers configured with the key verify; without one, v1 markers.
Records are built by a :class:`~progress_control.trust.ControlRecordSource`, as every writer's.

The tick producer is idempotent and non-transactional, built from the host's connection and
security settings with everything that could change the host's behaviour removed (transactional
id, callbacks, delivery tuning). It never raises into the host: a full local queue skips the tick,
errors are logged and counted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message
from confluent_kafka.cimpl import Producer as KafkaProducer  # the C type, never a rebound name

from progress_control.logging import RateLimitedKeys, client_logger
from progress_control.protocol import ControlRecord, TimestampMode, extrapolated_timestamp_ms
from progress_control.ticks.activity import DueTick
from progress_control.ticks.metrics import ProgressControlMetrics
from progress_control.ticks.settings import TickSettings

__all__ = ["TickSender", "tick_producer_config"]

logger = logging.getLogger(__name__)

# Host settings that would make the tick producer transactional, slow, or call into host code.
_HOST_ONLY = frozenset(
    {
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "enable.gapless.guarantee",
        "acks",
        "request.required.acks",
        "retries",
        "message.send.max.retries",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "queue.buffering.max.messages",
        "linger.ms",
        "queue.buffering.max.ms",
        "partitioner",
        "on_delivery",
        "delivery.report.only.error",
        "error_cb",
        "stats_cb",
        "throttle_cb",
        "logger",
        "key.serializer",
        "value.serializer",
    }
)


def tick_producer_config(host_config: Mapping[str, Any], settings: TickSettings) -> dict[str, Any]:
    """The tick producer's config: the host's connection and security settings, our delivery."""
    config = {k: v for k, v in host_config.items() if k not in _HOST_ONLY}
    client_id = str(host_config.get("client.id", "rdkafka"))
    config.update(
        {
            "client.id": f"{client_id}-progress-control",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,  # ticks are rare; a shorter window for replicas to race
            # A tick that cannot be delivered within this time is stale anyway.
            "message.timeout.ms": 30_000,
            "queue.buffering.max.messages": settings.queue_max_messages,
            "error_cb": _log_client_error,
            # Its log lines, minus those repeating an error _log_client_error reports.
            "logger": client_logger("interceptor.librdkafka"),
        }
    )
    return config


_CLIENT_ERROR_INTERVAL_S = 30.0
_client_errors = RateLimitedKeys(_CLIENT_ERROR_INTERVAL_S)
"""While the broker is down librdkafka reports each failed connection attempt, every backoff:
each kind of error (its code and message, numbers aside) is logged once per 30 s."""


def _log_client_error(error: KafkaError) -> None:
    fields = {"error": error.str(), "code": error.name(), "fatal": error.fatal()}
    if error.fatal():
        logger.error("progress-control producer: %(error)s", fields)
        return
    held = _client_errors.admit((error.code(), re.sub(r"\d+", "#", error.str())))
    if held is None:
        return
    if not held:
        logger.warning("progress-control producer: %(error)s", fields)
        return
    logger.warning(
        "progress-control producer: %(error)s (and %(repeated)d more like it since)",
        {**fields, "repeated": held},
    )


class TickSender:
    """Turns due ticks into control records on the tick producer."""

    def __init__(
        self,
        settings: TickSettings,
        host_config: Mapping[str, Any],
        metrics: ProgressControlMetrics,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        eager: bool = False,
        in_flight: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._host_config = dict(host_config)
        # The host's records in flight, oldest per topic: they may land after a tick sent now
        # (progress_control.ticks.in_flight), so no tick is dated above them.
        self._in_flight = in_flight
        # Created on the first tick unless eager: a host producer that never goes idle opens no
        # extra connections. A long-running sidecar creates it at once, so the first tick does not
        # wait for the idempotent producer id (a window in which replicas would both tick).
        self._producer: KafkaProducer | None = (
            KafkaProducer(tick_producer_config(host_config, settings)) if eager else None
        )
        # Source id, sequence and signing: the one builder of control records every writer
        # shares; a tick the local queue refused uses no sequence number.
        self._source = settings.control_record_source()

    def send(self, ticks: list[DueTick]) -> None:
        """Produce one control record per due tick (called from the scheduler thread)."""
        if self._producer is None:
            self._producer = KafkaProducer(tick_producer_config(self._host_config, self._settings))
        producer = self._producer

        def produce(record: ControlRecord) -> None:
            producer.produce(
                record.topic,
                None,
                record.key,
                partition=record.partition,
                timestamp=record.timestamp_ms,
                headers=record.headers,
                on_delivery=self._on_delivery,
            )

        held = self._in_flight() if self._in_flight is not None and ticks else {}
        for due in ticks:
            try:
                timestamp_ms = self._timestamp_ms(due)
                if due.topic in held:
                    timestamp_ms = min(timestamp_ms, held[due.topic])
                self._source.emit(due.topic, due.partition, timestamp_ms, produce)
            except BufferError:
                self._metrics.tick_skipped()
                logger.warning(
                    "tick queue full; skipped tick for %(topic)s[%(partition)d]",
                    {"topic": due.topic, "partition": due.partition},
                )
            except Exception:
                self._metrics.tick_failed()
                logger.exception(
                    "could not send tick to %(topic)s[%(partition)d]",
                    {"topic": due.topic, "partition": due.partition},
                )
        self._producer.poll(0)

    def poll(self) -> None:
        """Serve delivery reports of earlier ticks."""
        if self._producer is not None:
            self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for outstanding ticks; return how many are still queued."""
        return int(self._producer.flush(timeout_s)) if self._producer is not None else 0

    def _timestamp_ms(self, due: DueTick) -> int:
        wall_ms = int(self._wall_clock() * 1000)
        if self._settings.timestamp_mode is TimestampMode.WALL_CLOCK:
            return wall_ms
        return extrapolated_timestamp_ms(
            due.last_data_timestamp_ms, due.last_ack_monotonic, self._monotonic(), wall_ms
        )

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            self._metrics.tick_failed()
            logger.warning(
                "tick to %(topic)s[%(partition)s] failed: %(error)s",
                {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "error": error.str(),
                    "code": error.name(),
                },
            )
        else:
            self._metrics.tick_acked(msg.topic() or "", msg.partition() or 0, msg.timestamp()[1])

"""Fetched records to their tasks (Kafka Streams' ``StreamThread.addRecordsToTasks``): each
consumer batch split per input partition, control records checked against the trust policy,
partition-EOF events and fetch positions noted for KIP-695's lag."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, Message

from progress_control.protocol import HeaderList, has_control_header
from progress_control.trust import ControlRecordValidator, Verdict
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.input_partitions import InputPartitions
from streams_runtime.processing.task import StreamTask
from streams_runtime.record import SourceRecord, TopicPartitionId
from streams_runtime.settings import RuntimeSettings

__all__ = ["RecordRouter"]

logger = logging.getLogger(__name__)


class RecordRouter:
    """Hands one thread's fetched records to the tasks that own their partitions."""

    def __init__(
        self,
        settings: RuntimeSettings,
        internal_topics: frozenset[str],
        metrics: RuntimeMetrics,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        """``clock_ms``: the wall clock ticks' skew is checked against (default the system's)."""
        self._trust = ControlRecordValidator(settings.trust_policy(), clock_ms=clock_ms)
        # The runtime's own topics carry its own ticks: they verify with its own key.
        self._internal_trust = ControlRecordValidator(
            settings.internal_trust_policy(), clock_ms=clock_ms
        )
        self._internal_topics = internal_topics
        self._metrics = metrics

    def accepts_control(
        self, topic: str, partition: int, timestamp: int, headers: HeaderList
    ) -> bool:
        """Whether a record with the control header moves time (else it is counted rejected).
        A record with our header is never data; a forged or broken one is not time either:
        skipped and counted, never fatal, never the bad-record policy."""
        trust = self._internal_trust if topic in self._internal_topics else self._trust
        verdict = trust.check(topic, partition, timestamp, headers)
        if verdict is Verdict.ACCEPTED:
            return True
        self._metrics.control_records_rejected(verdict.value).inc()
        return False

    def route(
        self,
        messages: Sequence[Message],
        partitions: InputPartitions,
        task_of: Callable[[TopicPartitionId], StreamTask | None],
    ) -> KafkaError | None:
        """Buffer ``messages`` in their tasks; a fatal consumer error ends the batch unrouted
        and is returned (the thread decides whether joining again answers it)."""
        # Keyed by plain (topic, partition) tuples: no TopicPartitionId per record.
        batches: dict[tuple[str, int], list[SourceRecord]] = defaultdict(list)
        for msg in messages:
            error = msg.error()
            topic, partition = msg.topic() or "", msg.partition() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    partitions.reached_end(TopicPartitionId(topic, partition), msg.offset() or 0)
                    continue
                if error.code() == KafkaError._FATAL or error.fatal():
                    return error
                logger.warning(
                    "consumer error: %(error)s",
                    {"topic": topic, "partition": partition, "error": str(error)},
                )
                continue
            offset = msg.offset() or 0
            headers = msg.headers()
            timestamp = msg.timestamp()[1]
            control = rejected = False
            if headers and has_control_header(headers):
                control = self.accepts_control(topic, partition, timestamp, headers)
                rejected = not control
            batches[topic, partition].append(
                SourceRecord(
                    topic,
                    partition,
                    offset,
                    timestamp,
                    msg.key(),
                    msg.value(),
                    headers,  # type: ignore[arg-type]
                    control,
                    rejected,
                )
            )
        for (topic, partition), fetched in batches.items():
            tp = TopicPartitionId(topic, partition)
            new_from = partitions.fetched(tp, fetched[0].offset, fetched[-1].offset + 1)
            records = fetched
            if new_from != fetched[0].offset:  # behind a seek of ours (librdkafka's lost seek)
                records = [record for record in fetched if record.offset >= new_from]
                if not records:
                    continue
            task = task_of(tp)
            if task is None:
                # Assigned without the rest of its task's inputs; never skip its records.
                partitions.hold(tp, records[0].offset)
                continue
            task.add_records(tp, records)
        return None

"""Bad input: records that cannot be deserialized, carry a negative timestamp, or make user code
raise. One policy for all (``bad_record_policy``): fail, log and skip, or dead-letter."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.record import Headers, SourceRecord
from streams_runtime.settings import BadRecordPolicy

__all__ = [
    "DLQ_HEADERS",
    "BadRecordError",
    "BadRecordHandler",
    "CacheFlushError",
    "PunctuationError",
    "StreamsError",
    "TaskMigratedError",
    "as_exception",
]

logger = logging.getLogger(__name__)

DLQ_HEADERS = (
    "pc-dlq-reason",
    "pc-dlq-error",
    "pc-dlq-topic",
    "pc-dlq-partition",
    "pc-dlq-offset",
    "pc-dlq-timestamp",
)

Send = Callable[[str, bytes | None, bytes | None, int, Headers | None], None]


class StreamsError(RuntimeError):
    """The runtime stopped; the cause is chained."""


class TaskMigratedError(StreamsError):
    """The thread's producer was fenced (Kafka Streams' ``TaskMigratedException``): a newer
    producer took its transactional id, or its transaction outlived ``transaction.timeout.ms``
    (a pause, a long GC). Its tasks may belong to another instance by now: the thread closes
    every task without a commit, starts a new producer and rejoins the group."""


def as_exception(raised: object) -> BaseException:
    """What was raised, as a real exception. confluent-kafka can raise a bare ``KafkaError``
    (from some calls, and from a rebalance callback's failure re-raised by ``consume`` or
    ``close``): its type carries CPython's exception flag without deriving from
    ``BaseException``, so it escapes ``except Exception`` and ``except BaseException`` alike and
    only a bare ``except:`` sees it. Such an error becomes the :class:`KafkaException` the
    library raises elsewhere; anything else is returned as it is."""
    if isinstance(raised, BaseException):
        return raised
    if isinstance(raised, KafkaError):
        return KafkaException(raised)
    return StreamsError(f"unexpected raised object: {raised!r}")


class BadRecordError(StreamsError):
    """A bad record under the ``fail`` policy. Offsets of the records before it are committed;
    the record itself is not, so nothing is lost."""

    def __init__(self, record: SourceRecord, reason: str) -> None:
        super().__init__(
            f"{reason} at {record.topic}[{record.partition}]@{record.offset} "
            f"(bad_record_policy=fail)"
        )
        self.record = record
        self.reason = reason


class PunctuationError(StreamsError):
    """A punctuator raised under the ``fail`` policy (Kafka Streams' ``StreamsException``
    "Exception caught while punctuating processor")."""


class CacheFlushError(StreamsError):
    """User code below a cached store raised on an entry the record cache flushed at a commit,
    under the ``fail`` policy. The commit does not happen: the input is processed again."""


class BadRecordHandler:
    """Applies the bad-record policy to one record."""

    def __init__(
        self,
        policy: BadRecordPolicy,
        dead_letter_topic: str,
        send: Send,
        metrics: RuntimeMetrics,
    ) -> None:
        self.policy = policy
        self.dead_letter_topic = dead_letter_topic
        self._send = send
        self._metrics = metrics

    def handle_punctuation(self, task: str, error: BaseException) -> None:
        """A punctuator raised: :class:`PunctuationError` under ``fail``; otherwise logged and
        counted (reason ``punctuation``), the punctuation dropped (no record to dead-letter), as
        Kafka Streams' processing exception handler continues."""
        self._without_record(task, "punctuation", "a punctuator raised", PunctuationError, error)

    def handle_flush(self, task: str, error: BaseException) -> None:
        """User code below a cached store raised on an entry the cache flushed at a commit:
        :class:`CacheFlushError` under ``fail``; otherwise logged and counted (reason
        ``processing``) and the flush goes on (the input that wrote the entry is committed
        already, so there is no record to dead-letter)."""
        what = "user code raised on a record flushed from the record cache"
        self._without_record(task, "processing", what, CacheFlushError, error)

    def _without_record(
        self,
        task: str,
        reason: str,
        what: str,
        failure: type[StreamsError],
        error: BaseException,
    ) -> None:
        if self.policy is BadRecordPolicy.FAIL:
            self._metrics.bad_records(reason, "failed").inc()
            raise failure(f"task {task}: {what}: {error!r}") from error
        logger.warning(
            "task %(task)s: %(what)s, skipped: %(error_type)s: %(error)s",
            {"task": task, "what": what, "error": str(error), "error_type": type(error).__name__},
        )
        self._metrics.bad_records(reason, "skipped").inc()

    def handle(self, record: SourceRecord, reason: str, error: BaseException) -> None:
        """Skip, dead-letter, or raise :class:`BadRecordError` (chained to ``error``)."""
        fields = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "reason": reason,
            "error": str(error),
            "error_type": type(error).__name__,
        }
        if self.policy is BadRecordPolicy.FAIL:
            self._metrics.bad_records(reason, "failed").inc()
            raise BadRecordError(record, reason) from error
        if self.policy is BadRecordPolicy.LOG_AND_SKIP:
            logger.warning(
                "skipping bad record %(topic)s[%(partition)d]@%(offset)d: %(reason)s: %(error)s",
                fields,
            )
            self._metrics.bad_records(reason, "skipped").inc()
            return
        detail = "".join(traceback.format_exception_only(error)).strip()
        headers: Headers = [
            *(record.headers or []),
            ("pc-dlq-reason", reason.encode()),
            ("pc-dlq-error", detail.encode()[:4096]),
            ("pc-dlq-topic", record.topic.encode()),
            ("pc-dlq-partition", str(record.partition).encode()),
            ("pc-dlq-offset", str(record.offset).encode()),
            ("pc-dlq-timestamp", str(record.timestamp).encode()),
        ]
        # A negative timestamp cannot be produced: 0 lets the producer stamp it; the original is
        # kept in a header.
        self._send(
            self.dead_letter_topic, record.key, record.value, max(record.timestamp, 0), headers
        )
        logger.warning(
            "dead-lettered bad record %(topic)s[%(partition)d]@%(offset)d to %(dead_letter_topic)s:"
            " %(reason)s: %(error)s",
            {**fields, "dead_letter_topic": self.dead_letter_topic},
        )
        self._metrics.bad_records(reason, "dead-lettered").inc()

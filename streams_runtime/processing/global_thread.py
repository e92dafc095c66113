"""The global stream thread (Kafka Streams' ``GlobalStreamThread``, with its
``GlobalStateUpdateTask`` and the bootstrap of ``GlobalStateManagerImpl``): keeps every global
table's store (:mod:`streams_runtime.state.global_store`) up to date with every partition of its
topic, on every instance.

- :meth:`GlobalStreamThread.start` bootstraps: it assigns every partition of every global topic
  (no consumer group, nothing committed: the progress is the stores' checkpoint), from the
  checkpoint or the beginning, and reads to the end each partition had when it started (the
  last stable offset under exactly-once), before the app creates its stream thread; then it
  keeps reading on a thread of its own until :meth:`GlobalStreamThread.stop`.
- :class:`GlobalStateUpdateTask` applies one record: deserialized by the table's serdes (a
  record they refuse meets the bad-record policy, as a task's does), a null key dropped and
  counted, a null value a delete, control records (ticks) skipped. The test driver applies
  records with it too.
- Every ``commit_interval_ms`` (and at a clean stop) the stores are committed and checkpointed.

An error on the thread (a bad record under ``bad_record_policy=fail``, a fatal consumer error)
stops it and is handed to ``on_error``: the app stops and raises it, as Kafka Streams' client
shuts down when its global thread dies.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from progress_control.protocol import has_control_header
from streams_runtime.errors import BadRecordHandler, StreamsError, as_exception
from streams_runtime.metrics import GlobalStoreMetrics, RuntimeMetrics, global_store_metrics
from streams_runtime.processing.commit_strategy import commit_strategy_for
from streams_runtime.record import Headers, SourceRecord, TopicPartitionId
from streams_runtime.serde_context import SerdeContext, deserialize_in
from streams_runtime.serdes import SerializationError, ValueAndTimestamp
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state.global_store import GlobalStateManager
from streams_runtime.topology import GlobalStore, Topology, TopologyError

__all__ = ["GlobalStateUpdateTask", "GlobalStreamThread", "open_global_tables"]

logger = logging.getLogger(__name__)

_BATCH = 500
_POLL_S = 0.1
_LAG_INTERVAL_S = 1.0
_METADATA_RETRY_S = 0.2
_INPUT_WAIT_S = 10.0  # for a topic created a moment ago (the other inputs' wait)


class GlobalStateUpdateTask:
    """Applies global topics' records to their stores (Kafka Streams' ``GlobalStateUpdateTask``
    with a global table's source processor); the stores' positions are kept by ``manager``."""

    def __init__(
        self,
        stores: Iterable[GlobalStore],
        manager: GlobalStateManager,
        *,
        bad_records: BadRecordHandler,
        metrics: RuntimeMetrics,
    ) -> None:
        self._specs = {spec.topic: spec for spec in stores}
        self.state = manager
        """The stores and their positions."""
        self._bad_records = bad_records
        self._metrics = metrics
        self._global_metrics: GlobalStoreMetrics = global_store_metrics(metrics)

    @property
    def topics(self) -> list[str]:
        return sorted(self._specs)

    def update(self, record: SourceRecord) -> None:
        """Apply ``record`` (of a global topic) to its store, or skip it; either way the store's
        position moves past it. Raises :class:`~streams_runtime.errors.BadRecordError` for a
        bad record under ``bad_record_policy=fail`` (the position stays before it)."""
        spec = self._specs[record.topic]
        if not (record.headers and has_control_header(record.headers)):
            self._apply(spec, record)
        self.state.applied(record.tp, record.offset + 1)

    def _apply(self, spec: GlobalStore, record: SourceRecord) -> None:
        headers = record.headers
        try:
            key = deserialize_in(
                spec.key_serde, record.key, SerdeContext(spec.topic, "key", headers)
            )
            value = deserialize_in(
                spec.value_serde, record.value, SerdeContext(spec.topic, "value", headers)
            )
            # Stored as the serdes write them (Kafka Streams' global store serializes again).
            raw_key = None if key is None else spec.key_serde.serialize(key) or b""
            raw_value = None if value is None else spec.value_serde.serialize(value)
        except SerializationError as exc:
            self._bad_records.handle(record, "deserialization", exc)
            return
        except StreamsError:
            raise
        except Exception as exc:  # a serde's own bug: as a task treats what user code raises
            self._bad_records.handle(record, "processing", exc)
            return
        if raw_key is None:
            self._metrics.dropped_records(spec.name, "null-key").inc()
            return
        stored = None if raw_value is None else ValueAndTimestamp(raw_value, record.timestamp)
        self.state.stores[spec.name].put(
            raw_key, None if stored is None else stored.to_bytes(), record.timestamp
        )
        self._global_metrics.records_applied(spec.name).inc()


def open_global_tables(
    topology: Topology,
    settings: RuntimeSettings,
    *,
    bad_records: BadRecordHandler,
    metrics: RuntimeMetrics,
) -> GlobalStateUpdateTask | None:
    """Open the global stores of ``topology`` in ``settings.state_dir`` and what applies their
    topics' records to them; ``None`` when it has no global table."""
    specs = list(topology.global_stores.values())
    if not specs:
        return None
    manager = GlobalStateManager(
        application_id=settings.application_id,
        stores={spec.name: spec.topic for spec in specs},
        engine=settings.state_engine.value,
        state_dir=settings.state_dir,
    )
    return GlobalStateUpdateTask(specs, manager, bad_records=bad_records, metrics=metrics)


class GlobalStreamThread:
    """Runs the global tables of ``topology`` on one instance (see the module docstring). A
    topology without global tables runs none: :meth:`start`, :meth:`stop` and
    :meth:`raise_error` then do nothing."""

    def __init__(
        self,
        topology: Topology,
        settings: RuntimeSettings,
        *,
        metrics: RuntimeMetrics,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._topology = topology
        self._settings = settings
        self._metrics = metrics
        self._on_error = on_error
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._dead_letters: Producer | None = None
        self._ends: dict[TopicPartitionId, int] = {}
        self._eof: set[TopicPartitionId] = set()
        self._state: GlobalStateManager | None = None
        self._task: GlobalStateUpdateTask | None = None
        self.error: BaseException | None = None
        """What stopped the thread, if anything."""

    @property
    def state(self) -> GlobalStateManager:
        """The stores and their positions (once started)."""
        assert self._state is not None, "the global thread was not started"
        return self._state

    @property
    def task(self) -> GlobalStateUpdateTask:
        assert self._task is not None, "the global thread was not started"
        return self._task

    # -- lifecycle --------------------------------------------------------------------------

    def start(
        self,
        *,
        cancelled: threading.Event | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        """Open the global stores, bootstrap each to the end of its topic (blocking;
        ``heartbeat`` is called as it reads, and it gives up quietly once ``cancelled`` is
        set), make them the topology's, then keep them updated on a thread of its own. Raises
        what stopped the bootstrap: a bad record under ``fail``, a missing topic,
        ``restore_timeout_s`` passed."""
        settings = self._settings
        bad_records = BadRecordHandler(
            settings.bad_record_policy,
            settings.dead_letter_topic or f"{settings.application_id}-dlq",
            self._send_dead_letter,
            self._metrics,
        )
        task = open_global_tables(
            self._topology, settings, bad_records=bad_records, metrics=self._metrics
        )
        if task is None:
            return
        self._task, self._state = task, task.state
        self._global_metrics = global_store_metrics(self._metrics)
        self._consumer = self._new_consumer()
        if not self._bootstrap(cancelled or threading.Event(), heartbeat or (lambda: None)):
            return
        for store in self._state.stores.values():
            self._topology.global_state.register(store)
        self._thread = threading.Thread(target=self._run, name="streams-global", daemon=True)
        self._thread.start()

    def raise_error(self) -> None:
        """Raise what stopped the thread, if anything did."""
        if self.error is not None:
            raise self.error

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop reading, commit and checkpoint the stores, release everything; never raises
        (what fails is logged: the next start reads from the last checkpoint). Idempotent."""
        self._stopping.set()
        state = self._state
        if state is None:
            return
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._topology.global_state.clear()
        try:
            if thread is None or not thread.is_alive():
                self._commit()
        except Exception as exc:
            logger.warning("global stores: last commit failed: %(error)s", {"error": str(exc)})
        finally:
            if self._consumer is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    self._consumer.close()
                self._consumer = None
            if self._dead_letters is not None:
                self._dead_letters.flush(10)
                self._dead_letters = None
            state.close()

    def _new_consumer(self) -> Consumer:
        config: dict[str, str | int | bool] = dict(self._settings.consumer_config())
        config.pop("group.instance.id", None)  # a static member id belongs to the app's group
        config.update(
            {
                # Assigned partitions only: the group is never joined nor committed to.
                "group.id": f"{self._settings.application_id}-global-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": commit_strategy_for(self._settings).isolation_level,
                "fetch.wait.max.ms": 100,  # an end-of-partition event comes this soon
            }
        )
        return Consumer(config)

    # -- bootstrap --------------------------------------------------------------------------

    def _bootstrap(self, cancelled: threading.Event, heartbeat: Callable[[], None]) -> bool:
        """Read every partition to its end at start; False when cancelled first."""
        consumer = self._consumer
        assert consumer is not None
        started = time.monotonic()
        deadline = started + self._settings.restore_timeout_s
        watermarks = self._watermarks(consumer, self._partitions(consumer, deadline), deadline)
        starts = self.state.resume(watermarks)
        self._ends = {tp: high for tp, (_low, high) in watermarks.items()}
        consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, offset if offset > 0 else OFFSET_BEGINNING)
                for tp, offset in sorted(starts.items())
            ]
        )
        remaining = {tp for tp, start in starts.items() if start < self._ends[tp]}
        behind = sum(self._ends[tp] - starts[tp] for tp in remaining)
        while remaining:
            if cancelled.is_set() or self._stopping.is_set():
                return False
            if time.monotonic() > deadline:
                raise StreamsError(
                    f"global stores did not reach the end of {sorted(remaining)} within "
                    f"restore_timeout_s={self._settings.restore_timeout_s}"
                )
            self._handle(consumer.consume(num_messages=_BATCH, timeout=_POLL_S))
            heartbeat()
            offsets = self.state.offsets
            remaining = {
                tp for tp in remaining if tp not in self._eof and offsets[tp] < self._ends[tp]
            }
        self._commit()
        self._publish_lags()
        logger.info(
            "global stores %(stores)s bootstrapped: %(records)d records to read from "
            "%(partitions)d partitions, in %(duration_s).2fs",
            {
                "stores": sorted(self.state.stores),
                "records": behind,
                "partitions": len(starts),
                "duration_s": time.monotonic() - started,
            },
        )
        return True

    def _partitions(self, consumer: Consumer, deadline: float) -> list[TopicPartitionId]:
        """Every partition of every global topic (waiting a little for one created a moment
        ago, as for the other inputs; :class:`TopologyError` for one that is missing)."""
        found: list[TopicPartitionId] = []
        deadline = min(deadline, time.monotonic() + _INPUT_WAIT_S)
        for topic in self.task.topics:
            while True:
                try:
                    meta = consumer.list_topics(topic, timeout=max(deadline - time.monotonic(), 1))
                except KafkaException as exc:
                    raise StreamsError(f"cannot read the metadata of {topic}: {exc}") from exc
                found_topic = meta.topics.get(topic)
                if found_topic is not None and found_topic.error is None and found_topic.partitions:
                    found += [TopicPartitionId(topic, p) for p in sorted(found_topic.partitions)]
                    break
                if time.monotonic() > deadline:
                    raise TopologyError(
                        f"the global table's topic {topic!r} not found on "
                        f"{self._settings.bootstrap_servers} after {_INPUT_WAIT_S:.0f}s: create "
                        "input topics before starting the application (as Kafka Streams)"
                    )
                time.sleep(_METADATA_RETRY_S)
        return found

    def _watermarks(
        self, consumer: Consumer, partitions: list[TopicPartitionId], deadline: float
    ) -> dict[TopicPartitionId, tuple[int, int]]:
        """Low and high watermark of each partition (under read_committed the high one is the
        last stable offset: what can be read now)."""
        marks: dict[TopicPartitionId, tuple[int, int]] = {}
        for tp in partitions:
            while True:
                try:
                    marks[tp] = consumer.get_watermark_offsets(
                        TopicPartition(tp.topic, tp.partition),
                        timeout=max(deadline - time.monotonic(), 0.1),
                        cached=False,
                    )
                    break
                except KafkaException as exc:
                    if time.monotonic() > deadline:
                        raise StreamsError(
                            f"cannot read the offsets of {tp.topic}[{tp.partition}]: {exc}"
                        ) from exc
                    time.sleep(_METADATA_RETRY_S)  # a new topic's leader may not serve yet
        return marks

    # -- running ----------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        interval = self._settings.commit_interval_s
        next_commit = time.monotonic() + interval
        next_lags = time.monotonic() + _LAG_INTERVAL_S
        try:
            while not self._stopping.is_set():
                self._handle(consumer.consume(num_messages=_BATCH, timeout=_POLL_S))
                now = time.monotonic()
                if now >= next_commit:
                    self._commit()
                    next_commit = now + interval
                if now >= next_lags:
                    self._publish_lags()
                    next_lags = now + _LAG_INTERVAL_S
        except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
            self.error = error = as_exception(sys.exc_info()[1])
            logger.error("the global stream thread stopped: %(error)r", {"error": error})
            if self._on_error is not None:
                self._on_error(error)

    def _handle(self, messages: list[Message]) -> None:
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is None or partition is None or offset is None:
                continue
            tp = TopicPartitionId(topic, partition)
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # The end of what can be read now: everything before it was handed out
                    # (transaction markers included), so it is the position to checkpoint.
                    self._eof.add(tp)
                    self.state.applied(tp, offset)
                    continue
                if error.fatal() or error.code() == KafkaError._FATAL:
                    raise StreamsError(f"global consumer: fatal error: {error}")
                logger.warning("global consumer error: %(error)s", {"error": str(error)})
                continue
            headers: Headers | None = msg.headers()  # type: ignore[assignment]
            self.task.update(
                SourceRecord(
                    topic, partition, offset, msg.timestamp()[1], msg.key(), msg.value(), headers
                )
            )

    def _commit(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.flush(10)
        self.state.commit()

    def _publish_lags(self) -> None:
        """Lag per partition, from the consumer's cached watermarks (no broker round trip)."""
        consumer = self._consumer
        if consumer is None:
            return
        for store, topic in self.state.topics.items():
            for tp, offset in self.state.offsets.items():
                if tp.topic != topic:
                    continue
                with contextlib.suppress(KafkaException):
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(tp.topic, tp.partition), cached=True
                    )
                    high = max(high, self._ends.get(tp, 0))
                    self._global_metrics.lag(store, str(tp.partition)).set(max(high - offset, 0))

    def _send_dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        """A bad record to the dead-letter topic, through a producer of the thread's own (the
        stream thread's may be in a transaction)."""
        if self._dead_letters is None:
            config = dict(self._settings.producer_config())
            config.pop("transactional.id", None)
            self._dead_letters = Producer(config)
        self._dead_letters.produce(
            topic, value, key, timestamp=timestamp, headers=list(headers or ())
        )
        self._dead_letters.poll(0)

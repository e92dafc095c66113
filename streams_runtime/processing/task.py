"""``StreamTask``: one partition of a sub-topology's co-partitioned inputs, its processors and
its state. Records are taken across inputs in timestamp order (``PartitionGroup``), with
KIP-695 lag-gated idling deciding when an empty input may be passed over."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from streams_runtime.errors import BadRecordHandler, StreamsError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import ChangelogSink, TaskOutput
from streams_runtime.processing.partition_group import Clock, LagProvider, PartitionGroup
from streams_runtime.processing.task_punctuators import TaskPunctuators
from streams_runtime.processor.api import RecordMetadata
from streams_runtime.processor.punctuation import Cancellable, PunctuationType
from streams_runtime.processors import (
    BatchSourceProcessor,
    Processor,
    SinkProcessor,
    SourceProcessor,
)
from streams_runtime.progress import TaskBounds, TaskCommitMetadata
from streams_runtime.record import Headers, Record, SourceRecord, TaskId, TopicPartitionId
from streams_runtime.serdes import SerializationError
from streams_runtime.settings import BadRecordPolicy, RuntimeSettings
from streams_runtime.state import (
    KeyValueStore,
    SessionStore,
    SourcePosition,
    TaskCaches,
    TaskStateManager,
    ThreadCache,
    WarmStore,
    WindowStore,
)
from streams_runtime.state.changelog_readers import ChangelogReaders
from streams_runtime.topology import Subtopology

__all__ = ["StreamTask", "WarmStores"]


logger = logging.getLogger(__name__)


WarmStores = Callable[[TaskId, Mapping[TopicPartitionId, int]], Mapping[str, WarmStore]]
"""Where a task becoming active gets local copies of its stores' committed state, given its
committed input offsets (the replicator's standbys)."""


class StreamTask:
    """Processes one task's records; the stream thread feeds, commits and closes it."""

    def __init__(
        self,
        task_id: TaskId,
        subtopology: Subtopology,
        *,
        settings: RuntimeSettings,
        collector: TaskOutput,
        metrics: RuntimeMetrics,
        bad_records: BadRecordHandler,
        lag: LagProvider,
        cache: ThreadCache | None = None,
        clock: Clock | None = None,
        wall_clock: Clock | None = None,
    ) -> None:
        """``clock``: the monotonic milliseconds idling deadlines are measured on (the test
        driver's wall clock; default the process's); ``wall_clock``: the milliseconds since the
        epoch wall-clock punctuators follow (the test driver's; default the system's)."""
        self.id = task_id
        self.subtopology = subtopology
        self.inputs = tuple(
            TopicPartitionId(t, task_id.partition) for t in subtopology.source_topics
        )
        self._settings = settings
        self._collector = collector
        self._metrics = metrics
        self._bad_records = bad_records
        self.group = PartitionGroup(
            self.inputs, max_task_idle_ms=settings.max_task_idle_ms, lag=lag, clock=clock
        )
        self.position = SourcePosition()
        self.state = TaskStateManager(
            application_id=settings.application_id,
            task_id=str(task_id),
            partition=task_id.partition,
            specs=subtopology.stores,
            engine=settings.state_engine.value,
            state_dir=settings.state_dir,
            sink=ChangelogSink(collector),
            position=self.position,
            consumer_config=settings.consumer_config(),
        )
        # The record cache: the stream thread's (``cache``), or the task's own.
        if cache is None:
            cache = ThreadCache(settings.statestore_cache_max_bytes)
        self.caches = TaskCaches(cache, str(task_id), self.position)
        self._cached_stores = frozenset(s.name for s in subtopology.stores if s.cached)
        self._sources: dict[str, SourceProcessor] = {}
        self._routes: dict[str, tuple[TopicPartitionId, SourceProcessor]] = {}
        self._processors: list[Processor] = []
        self._batch_source: BatchSourceProcessor | None = None
        """The task's source that takes batches (a fused operator), if any."""
        self._batch_input: TopicPartitionId | None = None
        self.committed: dict[TopicPartitionId, int] = {}
        self._consumed: dict[TopicPartitionId, int] = {}
        self._skipped_to: dict[TopicPartitionId, int] = {}
        self._taken_to: dict[TopicPartitionId, int] = {}  # after the last record taken
        self._poisoned: dict[TopicPartitionId, SourceRecord] = {}
        self._mark_processing = True
        self.bounds = TaskBounds()
        """Its bounds per output topic (:mod:`streams_runtime.progress`)."""
        self._warm: Mapping[str, WarmStore] | None = None
        self.last_data_at = time.monotonic()
        self.took_control = False
        """Whether the task took a control record since the stream thread last cleared this."""
        label = str(task_id)
        self._processed_metric = metrics.records_processed(label)
        self._control_metric = metrics.control_records(label)
        self._stream_time_metric = metrics.stream_time(label)
        self._process_latency = metrics.process_latency(label)
        self._e2e_latency = metrics.e2e_latency(label)
        self._enforced_metric = metrics.enforced_processing(label)
        self._enforced_seen = 0
        self.punctuators = TaskPunctuators(label, bad_records, metrics, wall_clock)
        self._took_any = False
        self.commit_requested = False
        """A user processor asked for a commit (``context.commit()``); the thread clears it."""

    # -- ProcessorContext -------------------------------------------------------------------

    @property
    def application_id(self) -> str:
        return self._settings.application_id

    @property
    def stream_time(self) -> int:
        return self.group.stream_time

    @property
    def batch_input(self) -> TopicPartitionId:
        """The input whose records go to the task's batch source (a fused operator's)."""
        assert self._batch_input is not None
        return self._batch_input

    @property
    def partition(self) -> int:
        return self.id.partition

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition_key: bytes | None = None,
        partition: int = -1,
    ) -> None:
        if partition < 0 and partition_key is not None:
            partition = self._collector.partition_for(topic, partition_key)
        self._collector.send(topic, key, value, timestamp, headers, partition=partition)

    def kv_store(self, name: str) -> KeyValueStore:
        shared = self.subtopology.global_state.get(name)
        if shared is not None:  # a global table's: every task's (Kafka Streams' getStateStore)
            return shared
        store = self.state.kv_store(name)
        return self.caches.kv_store(store) if name in self._cached_stores else store

    def session_store(self, name: str) -> SessionStore:
        store = self.state.session_store(name)
        return self.caches.session_store(store) if name in self._cached_stores else store

    def query_store(self, name: str) -> KeyValueStore | SessionStore:
        """The store ``name`` as interactive queries read it (from their own threads): through
        its cache, as in Kafka Streams, so an answer is never a commit interval behind what was
        processed."""
        if self._batch_source is not None:  # a fused operator keeps its stores' windows itself
            kept = self._batch_source.query_store(name)
            if kept is not None:
                return kept
        cached = self.caches.cached(name)
        return cached if cached is not None else self.state.store(name)

    def window_store(self, name: str) -> WindowStore:
        store = self.state.window_store(name)
        return self.caches.window_store(store) if name in self._cached_stores else store

    def record_dropped(self, processor: str, reason: str) -> None:
        self._metrics.dropped_records(processor, reason).inc()

    def record_idempotent_skip(self, processor: str) -> None:
        self._metrics.idempotent_update_skips(processor).inc()

    def suppress_buffer_size(self, processor: str, size: int) -> None:
        self._metrics.suppress_buffer(processor).set(size)

    # -- what user processors have beyond (processor.node.PunctuatingContext) ---------------

    @property
    def task_name(self) -> str:
        return str(self.id)

    def record_metadata(self) -> RecordMetadata | None:
        position = self.position
        if self.punctuators.punctuating or position.tp is None:
            return None
        return RecordMetadata(position.tp.topic, position.tp.partition, position.offset)

    def wall_clock_ms(self) -> int:
        return self.punctuators.wall_clock()

    def request_commit(self) -> None:
        self.commit_requested = True

    def schedule_punctuation(
        self,
        interval_ms: int,
        punctuation_type: PunctuationType,
        fire: Callable[[int], None],
        start_ms: int | None,
    ) -> Cancellable:
        restored = None if self._took_any else self.group.stream_time
        return self.punctuators.schedule(interval_ms, punctuation_type, fire, start_ms, restored)

    # -- lifecycle --------------------------------------------------------------------------

    def initialize(
        self,
        committed: Mapping[TopicPartitionId, tuple[int, str | None]],
        warm_stores: WarmStores | None = None,
    ) -> None:
        """:meth:`prepare`, :meth:`restore` and :meth:`start_processing` in one go."""
        self.prepare(committed, warm_stores)
        self.restore()
        self.start_processing()

    def prepare(
        self,
        committed: Mapping[TopicPartitionId, tuple[int, str | None]],
        warm_stores: WarmStores | None = None,
    ) -> None:
        """Restore partition times and bounds from commit metadata, and take the local standby
        copies :meth:`restore` starts from (``warm_stores``; on the stream thread)."""
        restored = []
        for tp in self.inputs:
            offset, metadata = committed.get(tp, (-1, None))
            if offset >= 0:
                self.committed[tp] = offset
            restored.append(TaskCommitMetadata.decode(metadata))
            if restored[-1].partition_time >= 0:
                self.group.set_partition_time(tp, restored[-1].partition_time)
        self.bounds.restore(m.bounds for m in restored)
        self._warm = warm_stores(self.id, self.committed) if warm_stores is not None else None

    def restore(
        self, cancelled: threading.Event | None = None, readers: ChangelogReaders | None = None
    ) -> None:
        """Restore the stores from their changelogs, never beyond the committed input position,
        from a local standby's copy and the changelogs' tails where :meth:`prepare` found one.
        May run on another thread than the task's (nothing else touches the task meanwhile),
        reading with that thread's ``readers`` if it has them; gives up with
        :class:`~streams_runtime.state.RestoreCancelledError` once ``cancelled`` is set."""
        remaining = self._metrics.restore_remaining.labels(str(self.id))
        try:
            result = self.state.restore(
                self.committed,
                timeout_s=self._settings.restore_timeout_s,
                warm=self._warm,
                cancelled=cancelled,
                on_remaining=remaining.set,
                readers=readers,
            )
        finally:
            remaining.set(0)
        self._warm = None
        self._metrics.restored_records("changelog").inc(result.records_applied)
        self._metrics.restored_records("standby").inc(result.records_from_standby)

    def start_processing(self) -> None:
        """Create the processors over the restored stores."""
        self._sources, self._processors = self.subtopology.instantiate()
        partition = self.id.partition
        self._routes = {
            topic: (TopicPartitionId(topic, partition), source)
            for topic, source in self._sources.items()
        }
        for tp, source in self._routes.values():
            if isinstance(source, BatchSourceProcessor):  # the planner fuses one per task
                self._batch_source, self._batch_input = source, tp
        for processor in self._processors:
            processor.init(self)
        self.bounds.attach([p for p in self._processors if isinstance(p, SinkProcessor)])

    def _record_metrics(
        self, done: int, controls: int, started: float, record: SourceRecord | None
    ) -> None:
        """Metrics once per batch, not per record: this is the hot path."""
        group = self.group
        if done > controls:
            self.last_data_at = time.monotonic()
        if controls:
            self.took_control = True
        self._processed_metric.inc(done - controls)
        self._control_metric.inc(controls)
        self._stream_time_metric.set(max(group.stream_time, 0) / 1000)
        self._process_latency.observe((time.perf_counter() - started) / done)
        if record is not None and not record.is_control:
            self._e2e_latency.observe(max(0.0, time.time() - record.timestamp / 1000))
        enforced = group.enforced_processing_total
        if enforced != self._enforced_seen:
            self._enforced_metric.inc(enforced - self._enforced_seen)
            self._enforced_seen = enforced

    def add_records(self, tp: TopicPartitionId, records: Iterable[SourceRecord]) -> int:
        """Buffer fetched records; negative timestamps go to the bad-record policy here (under
        ``fail``, once every record before it was processed); rejected control records are
        only moved past. A record at an offset the task took already, or below its committed
        one, is dropped: librdkafka can move a fetch position back under a live task (a stale
        offset lookup resets it to the beginning), and such a record is in the state already."""
        if tp in self._poisoned:
            return self.group.buffered(tp)  # fetched past a failing record: read again later
        good = []
        taken_to = self._taken_to.get(tp, self.committed.get(tp, 0))
        again = 0
        for record in records:
            if record.offset < taken_to:
                again += 1
                continue
            taken_to = record.offset + 1
            if record.rejected:
                self._skipped_to[tp] = record.offset + 1
            elif record.timestamp < 0 and not record.is_control:
                if self._bad_records.policy is BadRecordPolicy.FAIL:
                    self._poisoned[tp] = record
                    break
                self._bad_records.handle(
                    record, "negative-timestamp", ValueError(f"timestamp {record.timestamp}")
                )
                self._skipped_to[tp] = record.offset + 1
            else:
                good.append(record)
        self._taken_to[tp] = taken_to
        if again:
            logger.warning(
                "task %(task)s: %(records)d records of %(topic)s[%(partition)d] taken already "
                "were fetched again (the consumer went back); dropped",
                {"task": str(self.id), "records": again, **tp._asdict()},
            )
        return self.group.add_records(tp, good)

    def process(self, budget: int) -> int:
        """Process up to ``budget`` records while the task is ready; returns how many."""
        group = self.group
        done = 0
        started = time.perf_counter()
        record: SourceRecord | None = None
        for tp, poisoned in self._poisoned.items():
            if group.buffered(tp) == 0:
                self._bad_records.handle(
                    poisoned, "negative-timestamp", ValueError(f"timestamp {poisoned.timestamp}")
                )
        controls = 0
        process_one = self._process_one
        next_record = group.next_record
        batch_source = self._batch_source
        try:
            # One idling decision per batch of records it covers (see ready_batch): the same
            # decisions, counts and order as asking ready_to_process before every record.
            while done < budget:
                ready = group.ready_batch()
                if not ready:
                    break
                if self._mark_processing:
                    self.state.mark_processing()
                    self._mark_processing = False
                    self._took_any = True
                n = min(ready, budget - done)
                if batch_source is not None:
                    batch = group.take(n) if len(self.inputs) == 1 else self._taken(n)
                    record = batch[-1]
                    controls += self._process_runs(batch_source, batch)
                    done += n
                    continue
                punctuations = self.punctuators.stream
                for _ in range(n):
                    record = next_record()
                    assert record is not None  # ready_batch counts buffered records only
                    controls += process_one(record)
                    done += 1
                    if group.stream_time >= punctuations.due:
                        # Once the record is through, as Kafka Streams' driver does; a tick
                        # moves stream time too, and never reaches process().
                        punctuations.punctuate(group.stream_time)
        finally:
            if done:
                self._record_metrics(done, controls, started, record)
        return done

    def _process_one(self, record: SourceRecord) -> bool:
        """Process one record; True when it was a control record."""
        # The task's input partition and source for the record's topic: one lookup, no new
        # TopicPartitionId per record (a task reads one partition of each of its topics).
        tp, source = self._routes[record.topic]
        position = self.position
        position.tp = tp
        position.offset = record.offset
        try:
            if record.is_control:
                # A tick can emit results too (a suppression's): what user code below raises
                # then meets the policy as for data, or a restart would meet it again forever.
                source.advance(record.timestamp)
            else:
                try:
                    data: Record[Any, Any] = source.deserialize(record)
                except SerializationError as exc:
                    self._bad_records.handle(record, "deserialization", exc)
                else:
                    source.forward(data)
        except StreamsError:
            raise  # the runtime's own failure (a fenced producer...), not the record's
        except Exception as exc:
            self._bad_records.handle(record, "processing", exc)
        self._consumed[tp] = record.offset + 1
        return record.is_control

    def _taken(self, n: int) -> list[SourceRecord]:
        """The next ``n`` records across the task's inputs, in the order it takes them."""
        next_record = self.group.next_record
        taken = []
        for _ in range(n):
            record = next_record()
            assert record is not None  # ready_batch counts buffered records only
            taken.append(record)
        return taken

    def _process_runs(self, source: BatchSourceProcessor, records: list[SourceRecord]) -> int:
        """Process records in order: each run of the batch source's input as one batch, the
        other inputs' records one by one (a joined table's); how many were control records."""
        if len(self.inputs) == 1:
            return self._process_batch(source, records)
        topic = self.batch_input.topic
        controls = 0
        start = 0
        for i, record in enumerate(records):
            if record.topic != topic:
                if start < i:
                    controls += self._process_batch(source, records[start:i])
                controls += self._process_one(record)
                start = i + 1
        if start < len(records):
            controls += self._process_batch(source, records[start:])
        return controls

    def _process_batch(self, source: BatchSourceProcessor, batch: list[SourceRecord]) -> int:
        """Process one partition's records through a source that takes batches, data in runs
        between control records; how many were control records. A record the serdes refuse, or
        whose processing raises, meets the bad-record policy in order, everything before it
        processed (under ``fail``, committed up to it); what user code below raises for an
        emitted result (a fused operator's window) meets it blamed on the run's last record (the
        chain would blame the one whose time closed the window), or on the tick that closed
        it."""
        tp, _ = self._routes[batch[0].topic]
        position = self.position
        position.tp = tp
        consumed = self._consumed
        blamed = batch[-1]

        def bad(record: SourceRecord, reason: str, exc: Exception) -> None:
            position.offset = consumed[tp] = record.offset
            self._bad_records.handle(record, reason, exc)

        def failed(exc: Exception) -> None:
            self._bad_records.handle(blamed, "processing", exc)

        def run(records: list[SourceRecord]) -> None:
            nonlocal blamed
            if records:
                blamed = records[-1]
                position.offset = blamed.offset
                source.process_batch(records, bad)

        source.on_error = failed
        controls = 0
        run_from = 0
        for i, record in enumerate(batch):
            if record.is_control:
                run(batch[run_from:i])
                blamed = record
                position.offset = record.offset
                source.advance(record.timestamp)
                controls += 1
                run_from = i + 1
        run(batch[run_from:])
        position.offset = batch[-1].offset
        consumed[tp] = batch[-1].offset + 1
        return controls

    def progress_uncommitted(self, quiet_s: float) -> bool:
        """Whether the task took no data record for ``quiet_s`` while its bounds moved past the
        committed ones: committing now lets ticks move on (they wait for committed bounds)."""
        if time.monotonic() - self.last_data_at < quiet_s:
            return False
        return self.bounds.uncommitted()

    def flush(self) -> None:
        """Before a commit: flush the record cache (writes and forwards what it absorbed), let
        processors do periodic work (retention, gauges), then send the buffered changelog
        writes (Kafka Streams' order: cache, stores, then the commit)."""
        self.caches.flush(self._flush_failed)
        for processor in self._processors:
            processor.flush()
        self.state.flush()

    def _flush_failed(self, error: Exception) -> None:
        if isinstance(error, StreamsError):
            raise error  # the runtime's own failure (a fenced producer...), not user code's
        self._bad_records.handle_flush(str(self.id), error)

    def offsets_to_commit(
        self,
        position: Callable[[TopicPartitionId], int] | None = None,
        end: Callable[[TopicPartitionId], int] | None = None,
    ) -> list[TopicPartition]:
        """Next offsets to commit, for inputs that moved, with the partition time and the task's
        bounds in the metadata (:class:`~streams_runtime.progress.TaskCommitMetadata`).

        An input with nothing buffered commits the consumer's ``position`` when that is further
        (as Kafka Streams does): past the transaction markers that follow a transactional
        writer's last record, so a drained partition's lag reaches 0. Only once the task has
        taken records of it: before, the position can be what the consumer returned before the
        task's start seek (records held while the task restored), and committing it would skip
        records nobody processed. A task that has taken none commits the partition's end once
        the consumer reached it since the start (``end``: -1 while not)."""
        offsets = []
        bounds = self.bounds.current()
        for tp in self.inputs:
            offset = self._consumed.get(tp, -1)
            if self.group.buffered(tp) == 0:
                offset = max(offset, self._skipped_to.get(tp, -1))
                if tp not in self._taken_to:
                    if end is not None:
                        offset = max(offset, end(tp))
                elif position is not None and tp not in self._poisoned:
                    offset = max(offset, position(tp))
            if offset < 0 or offset == self.committed.get(tp):
                continue
            metadata = TaskCommitMetadata(self.group.partition_time(tp), bounds).encode()
            offsets.append(TopicPartition(tp.topic, tp.partition, offset, metadata))
        return offsets

    def committed_offsets(self, offsets: Sequence[TopicPartition]) -> bool:
        """After a successful commit: remember the position and bounds, and checkpoint local
        state; whether the committed bounds moved."""
        for tp in offsets:
            self.committed[TopicPartitionId(tp.topic, tp.partition)] = tp.offset
        moved = self.bounds.commit(TaskCommitMetadata.decode(tp.metadata).bounds for tp in offsets)
        written = self._collector.next_offsets
        self.state.commit(
            self.committed,
            {tp: written[tp] for tp in self.state.changelog_partitions() if tp in written},
        )
        self._mark_processing = True
        return moved

    def close(self) -> None:
        with contextlib.suppress(KeyError):  # never restored here
            self._metrics.restore_remaining.remove(str(self.id))
        self.punctuators.clear()
        for processor in self._processors:
            with contextlib.suppress(Exception):  # a user's close may raise; the task closes
                processor.close()
        self.group.clear()
        self.caches.clear()
        self.state.close()

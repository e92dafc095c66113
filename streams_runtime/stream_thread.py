"""The processing loop: one consumer, the tasks of its assigned partitions, commits, rebalances,
back-pressure and progress propagation (Kafka Streams' ``StreamThread`` and ``TaskManager``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from progress_control.protocol import has_control_header
from progress_control.trust import ControlRecordValidator, Verdict
from streams_runtime.app_state import AppState
from streams_runtime.collector import RecordCollector
from streams_runtime.errors import BadRecordError, BadRecordHandler, StreamsError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.record import SourceRecord, TopicPartitionId
from streams_runtime.repartition_purge import RepartitionPurger
from streams_runtime.settings import RuntimeSettings
from streams_runtime.task import StreamTask, TaskId, WarmStores
from streams_runtime.topology import Topology

__all__ = ["StreamThread"]

logger = logging.getLogger(__name__)

_FETCH_BATCH = 1000
_PROCESS_BUDGET = 1000  # records per task per loop turn, so one busy task cannot starve the rest
_SHORT_POLL_S = 0.005  # while tasks hold records but wait (idling), poll briefly
_WAIT_LOG_S = 10.0  # how often to report tasks that hold records but wait


class StreamThread:
    """Runs the topology until :meth:`stop`; owned by :class:`~streams_runtime.App`."""

    def __init__(
        self,
        topology: Topology,
        settings: RuntimeSettings,
        *,
        instance_id: str,
        metrics: RuntimeMetrics,
        partition_counts: dict[str, int],
        on_state: Callable[[AppState], None],
    ) -> None:
        self._topology = topology
        self._settings = settings
        self._metrics = metrics
        self._partition_counts = partition_counts
        self._on_state = on_state
        self._stopping = threading.Event()
        self._trust = ControlRecordValidator(settings.trust_policy())
        self._purger = RepartitionPurger(
            {**settings.client_config()},
            frozenset(topology.repartition_topics),
            settings.repartition_purge_interval_ms / 1000,
        )
        self.collector = RecordCollector(settings, instance_id, metrics)
        self._bad_records = BadRecordHandler(
            settings.bad_record_policy,
            settings.dead_letter_topic or f"{settings.application_id}-dlq",
            self.collector.send,
            metrics,
        )
        multi_input = any(len(s.source_topics) > 1 for s in topology.subtopologies)
        config: dict[str, object] = {
            # Co-partitioned inputs of one task must land on one instance. librdkafka cannot
            # run Kafka Streams' own assignor; the range assignor gives partition p of every
            # equally partitioned topic to the same member, cooperative-sticky does not.
            "partition.assignment.strategy": "range" if multi_input else "cooperative-sticky",
            "auto.offset.reset": "earliest",
            **settings.consumer_config(),
            "group.id": settings.application_id,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "isolation.level": "read_committed" if settings.exactly_once else "read_uncommitted",
        }
        self._cooperative = config["partition.assignment.strategy"] == "cooperative-sticky"
        self.consumer = Consumer(config)
        self.tasks: dict[TaskId, StreamTask] = {}
        self._task_of: dict[TopicPartitionId, StreamTask] = {}
        self._assigned: set[TopicPartitionId] = set()
        self._paused: set[TopicPartitionId] = set()
        self._fetched: dict[TopicPartitionId, int] = {}
        self._eof: dict[TopicPartitionId, int] = {}
        self._ticked: dict[TopicPartitionId, int] = {}
        # Read by other threads (membership, interactive queries): replaced, never mutated.
        self.active_tasks: frozenset[TaskId] = frozenset()
        """Tasks restored and processing."""
        self.restoring_tasks: frozenset[TaskId] = frozenset()
        """Tasks being created: their stores are restoring from the changelogs."""
        self.restoring_task: StreamTask | None = None
        """The task whose stores are restoring right now (readable, stale, by queries)."""
        self.assignment_listener: Callable[[], None] | None = None
        """Called (on this thread) whenever :attr:`active_tasks` or :attr:`restoring_tasks`
        change; must not block."""
        self.warm_stores: WarmStores | None = None
        """Local standby copies a new task restores from (see :meth:`StreamTask.initialize`)."""

    # -- lag for KIP-695 --------------------------------------------------------------------

    def lag(self, tp: TopicPartitionId) -> int | None:
        """Records on the broker not yet fetched by the task, from cached metadata only;
        ``None`` when unknown. Under read_committed a transaction marker can leave
        ``high - position`` at 1 forever: a partition-EOF event at or past the position means
        caught up."""
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            high = self.consumer.get_watermark_offsets(ktp, cached=True)[1]
        except KafkaException:
            return None
        if high < 0:
            return None
        eof = self._eof.get(tp, -1)
        position = self._fetched.get(tp, -1)
        if position < 0 and eof < 0:
            position = self.consumer.position([ktp])[0].offset
            if position < 0:
                return None
        return max(0, high - max(position, eof))

    # -- the loop ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Consume, process, commit until stopped; commits and closes cleanly on the way out."""
        self.consumer.subscribe(
            list(self._topology.source_topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._on_state(AppState.RUNNING)
        interval = self._settings.commit_interval_s
        progress_every = self._settings.progress_interval_ms / 1000
        next_commit = time.monotonic() + interval
        next_progress = time.monotonic() + progress_every
        next_wait_log = time.monotonic() + _WAIT_LOG_S
        poll_s = self._settings.poll_timeout_ms / 1000
        failure: BaseException | None = None
        try:
            while not self._stopping.is_set():
                waiting = any(task.group.buffered() for task in self.tasks.values())
                messages = self.consumer.consume(_FETCH_BATCH, _SHORT_POLL_S if waiting else poll_s)
                if messages:
                    self._route(messages)
                for task in list(self.tasks.values()):
                    task.process(_PROCESS_BUDGET)
                self._apply_back_pressure()
                self.collector.poll()
                now = time.monotonic()
                if self._settings.progress_propagation and now >= next_progress:
                    self._propagate_progress()
                    next_progress = now + progress_every
                if now >= next_commit:
                    self.commit()
                    next_commit = time.monotonic() + interval
                if now >= next_wait_log:
                    self._log_waiting_tasks()
                    next_wait_log = now + _WAIT_LOG_S
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._shutdown(failure)

    def _log_waiting_tasks(self) -> None:
        for task in self.tasks.values():
            decision = task.group.last_decision
            if task.group.buffered() and not decision.ready:
                tp = decision.partition
                logger.info(
                    "task %(task)s holds %(buffered)d records but waits: %(reason)s on "
                    "%(waits_on)s (lag %(lag)s)",
                    {
                        "task": str(task.id),
                        "buffered": task.group.buffered(),
                        "reason": decision.reason.value,
                        "waits_on": "-" if tp is None else f"{tp.topic}[{tp.partition}]",
                        "topic": None if tp is None else tp.topic,
                        "partition": None if tp is None else tp.partition,
                        "lag": decision.lag,
                    },
                )

    def _shutdown(self, failure: BaseException | None) -> None:
        self._on_state(AppState.PENDING_SHUTDOWN)
        try:
            if failure is None or isinstance(failure, BadRecordError):
                # A bad record under "fail": commit everything before it, then stop. Under
                # exactly-once its transaction holds partial output of the bad record: abort
                # instead, the records since the last commit are processed again on restart.
                if failure is not None and self._settings.exactly_once:
                    self.collector.abort()
                else:
                    self.commit()
            elif self._settings.exactly_once:
                self.collector.abort()
        except Exception:
            logger.exception("final commit failed; uncommitted input will be processed again")
        finally:
            for task in self.tasks.values():
                task.close()
            self.tasks.clear()
            self._task_of.clear()
            self._publish_tasks(restoring=set())
            try:
                self.consumer.close()
            finally:
                self.collector.close()

    def _route(self, messages: Sequence[Message]) -> None:
        batches: dict[TopicPartitionId, list[SourceRecord]] = defaultdict(list)
        for msg in messages:
            error = msg.error()
            topic, partition = msg.topic() or "", msg.partition() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._eof[TopicPartitionId(topic, partition)] = msg.offset() or 0
                    continue
                if error.fatal():
                    raise StreamsError(f"consumer failed: {error}")
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
                # A record with our header is never data; a forged or broken one is not time
                # either: skipped and counted, never fatal, never the bad-record policy.
                verdict = self._trust.check(topic, partition, timestamp, headers)
                control = verdict is Verdict.ACCEPTED
                rejected = not control
                if rejected:
                    self._metrics.control_records_rejected(verdict.value).inc()
            batches[TopicPartitionId(topic, partition)].append(
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
        for tp, records in batches.items():
            self._fetched[tp] = records[-1].offset + 1
            task = self._task_of.get(tp)
            if task is None:
                # Assigned without the rest of its task's inputs; never skip its records.
                self._rewind(tp, records[0].offset)
                continue
            task.add_records(tp, records)

    def _rewind(self, tp: TopicPartitionId, offset: int) -> None:
        logger.warning(
            "no task owns %(topic)s[%(partition)d] yet; pausing it",
            {"topic": tp.topic, "partition": tp.partition, "offset": offset},
        )
        ktp = TopicPartition(tp.topic, tp.partition, offset)
        self.consumer.seek(ktp)
        self.consumer.pause([ktp])
        self._paused.add(tp)
        self._fetched.pop(tp, None)

    def _apply_back_pressure(self) -> None:
        limit = self._settings.buffered_records_per_partition
        pause, resume = [], []
        for tp, task in self._task_of.items():
            buffered = task.group.buffered(tp)
            if tp in self._paused:
                if buffered <= limit // 2:
                    resume.append(tp)
            elif buffered > limit:
                pause.append(tp)
        if pause:
            self.consumer.pause([TopicPartition(t.topic, t.partition) for t in pause])
            self._paused.update(pause)
        if resume:
            self.consumer.resume([TopicPartition(t.topic, t.partition) for t in resume])
            self._paused.difference_update(resume)

    def _propagate_progress(self) -> None:
        """Tick output and repartition partitions up to the progress their sinks promise (the
        least over the tasks here writing them, so a tick never passes what any of them still
        sends; see :mod:`streams_runtime.processors`). Tasks that took no record yet promise
        nothing and are left out."""
        horizon: dict[str, int] = {}
        for task in self.tasks.values():
            if task.group.stream_time < 0:
                continue
            for topic, bound in task.sink_progress().items():
                horizon[topic] = min(horizon.get(topic, bound), bound)
        written = self.collector.written
        for topic, bound in horizon.items():
            # Just below the bound: a reader closes a window when its close time is <= its
            # stream time, so a tick *at* a record still to come could close a window that
            # record would have joined.
            at = bound - 1
            if at < 0:
                continue
            for partition in range(self._partitions_of(topic)):
                tp = TopicPartitionId(topic, partition)
                if written.get(tp, -1) < at and self._ticked.get(tp, -1) < at:
                    self.collector.tick(topic, partition, at)
                    self._ticked[tp] = at

    def _partitions_of(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self.consumer.list_topics(topic, timeout=10)
            found = metadata.topics.get(topic)
            count = len(found.partitions) if found is not None and found.error is None else 0
            if count:
                self._partition_counts[topic] = count
        return count

    # -- commits ----------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit every task: flush (or commit the transaction with) outputs and changelogs,
        then input offsets with partition times, then checkpoint local state."""
        started = time.monotonic()
        for task in self.tasks.values():
            task.flush()
        per_task = [(task, task.offsets_to_commit()) for task in self.tasks.values()]
        offsets = [tp for _, task_offsets in per_task for tp in task_offsets]
        if self._settings.exactly_once:
            if not self._commit_transaction(offsets):
                return
        else:
            self.collector.flush()
            if offsets:
                try:
                    self.consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if isinstance(error, KafkaError) and error.fatal():
                        raise
                    # The group is rebalancing (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS...):
                    # whoever owns these partitions next starts from the last commit
                    # (at-least-once), so local state must not checkpoint this position.
                    logger.warning(
                        "offset commit failed (%(error)s); input will be processed again",
                        {"error": str(exc)},
                    )
                    return
        for task, task_offsets in per_task:
            task.committed_offsets(task_offsets)
        self._purger.committed(offsets)
        self._metrics.commit_latency.observe(time.monotonic() - started)

    def _commit_transaction(self, offsets: list[TopicPartition]) -> bool:
        """Commit the transaction with ``offsets``; False when it had to be aborted (the tasks
        then start again from the last commit)."""
        try:
            self.collector.commit(offsets, self.consumer.consumer_group_metadata())
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.txn_requires_abort():
                logger.warning(
                    "transaction aborted (%(error)s); processing again from the last commit",
                    {"error": str(error)},
                )
                self.collector.abort()
                self._rewind_all()
                return False
            raise StreamsError(f"transaction commit failed: {exc}") from exc
        return True

    def _rewind_all(self) -> None:
        """Exactly-once after an abort: drop every task and restart it from the committed
        offsets and changelogs."""
        tps = [tp for task in self.tasks.values() for tp in task.inputs]
        self._close_tasks(list(self.tasks.values()))
        self._create_tasks(tps, seek=True)

    # -- rebalances -------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances("assigned").inc(len(partitions))
        new = [TopicPartitionId(p.topic, p.partition) for p in partitions]
        self._assigned.update(new)
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self._create_tasks(new, seek=False)
        logger.info(
            "assigned %(partitions)d partitions; %(tasks)d tasks",
            {"partitions": len(partitions), "tasks": len(self.tasks)},
        )

    def _create_tasks(self, partitions: Sequence[TopicPartitionId], *, seek: bool) -> None:
        wanted: set[TaskId] = set()
        for tp in partitions:
            sub = self._topology.subtopology_of(tp.topic)
            wanted.add(TaskId(sub.id, tp.partition))
        ready = []
        for task_id in sorted(wanted):
            if task_id in self.tasks:
                continue
            sub = self._topology.subtopologies[task_id.subtopology]
            inputs = [TopicPartitionId(t, task_id.partition) for t in sub.source_topics]
            if not all(tp in self._assigned for tp in inputs):
                continue
            ready.append((task_id, sub, inputs))
        if not ready:
            return
        self._publish_tasks(restoring={task_id for task_id, _, _ in ready})
        all_inputs = [
            TopicPartition(tp.topic, tp.partition) for _, _, inputs in ready for tp in inputs
        ]
        committed = {
            TopicPartitionId(tp.topic, tp.partition): (tp.offset, tp.metadata)
            for tp in self.consumer.committed(all_inputs, timeout=30)
        }
        for task_id, sub, inputs in ready:
            task = StreamTask(
                task_id,
                sub,
                settings=self._settings,
                collector=self.collector,
                metrics=self._metrics,
                bad_records=self._bad_records,
                lag=self.lag,
            )
            self.restoring_task = task
            try:
                task.initialize(committed, self.warm_stores)
            except BaseException:
                self._publish_tasks(restoring=set())
                raise
            finally:
                self.restoring_task = None
            self.tasks[task_id] = task
            for tp in inputs:
                self._task_of[tp] = task
                self._fetched.pop(tp, None)
                self._eof.pop(tp, None)
                if seek or tp in self._paused:
                    offset = committed[tp][0]
                    ktp = TopicPartition(
                        tp.topic, tp.partition, offset if offset >= 0 else OFFSET_BEGINNING
                    )
                    self.consumer.seek(ktp)
                    if tp in self._paused:
                        self.consumer.resume([ktp])
                        self._paused.discard(tp)
            self._publish_tasks(restoring=set(self.restoring_tasks) - {task_id})
        self._metrics.tasks.set(len(self.tasks))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances("revoked").inc(len(partitions))
        revoked = {TopicPartitionId(p.topic, p.partition) for p in partitions}
        affected = [t for t in self.tasks.values() if revoked.intersection(t.inputs)]
        if affected:
            try:
                self.commit()
            except (KafkaException, StreamsError) as exc:
                logger.warning(
                    "commit on revocation failed (%(error)s); input will be processed again",
                    {"error": str(exc)},
                )
                if self._settings.exactly_once:
                    self.collector.abort()
        self._close_tasks(affected)
        self._forget(revoked)
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member may own these already: no commit, and under exactly-once the open
        # transaction would be fenced anyway.
        logger.warning("lost %(partitions)d partitions", {"partitions": len(partitions)})
        lost = {TopicPartitionId(p.topic, p.partition) for p in partitions}
        if self._settings.exactly_once:
            self.collector.abort()
            self._close_tasks(list(self.tasks.values()))
        else:
            self._close_tasks([t for t in self.tasks.values() if lost.intersection(t.inputs)])
        self._forget(lost)
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        if self._settings.exactly_once:
            self._create_tasks(sorted(self._assigned), seek=True)

    def _close_tasks(self, tasks: list[StreamTask]) -> None:
        for task in tasks:
            task.close()
            self.tasks.pop(task.id, None)
            for tp in task.inputs:
                self._task_of.pop(tp, None)
        self._metrics.tasks.set(len(self.tasks))
        self._publish_tasks()

    def _publish_tasks(self, restoring: set[TaskId] | None = None) -> None:
        if restoring is not None:
            self.restoring_tasks = frozenset(restoring)
        self.active_tasks = frozenset(self.tasks)
        if self.assignment_listener is not None:
            self.assignment_listener()

    def _forget(self, partitions: set[TopicPartitionId]) -> None:
        self._assigned.difference_update(partitions)
        self._paused.difference_update(partitions)
        for tp in partitions:
            self._fetched.pop(tp, None)
            self._eof.pop(tp, None)

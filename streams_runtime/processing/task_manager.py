"""``TaskManager``: the tasks of one stream thread (Kafka Streams' ``TaskManager``) — created
when all of a task's inputs are assigned, closed on revocation or loss, restarted from the last
commit after an abort — and their commits, under the thread's :class:`CommitStrategy`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams_runtime.errors import BadRecordHandler, StreamsError, TaskMigratedError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.commit_strategy import CommitResult, CommitStrategy
from streams_runtime.processing.input_partitions import InputPartitions
from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.processing.repartition_purge import RepartitionPurger
from streams_runtime.processing.state_updater import StateUpdater
from streams_runtime.processing.task import StreamTask, WarmStores
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import ThreadCache
from streams_runtime.state.changelog_readers import ChangelogReaders
from streams_runtime.topology import Topology

__all__ = ["TaskManager"]

logger = logging.getLogger(__name__)

_RESTORE_ATTEMPTS = 3  # a task's restore fails the thread after this many retries


class TaskManager:
    """Owns the tasks of the partitions assigned to one consumer; runs on that consumer's thread
    (the rebalance callbacks are called from its ``consume``)."""

    def __init__(  # noqa: PLR0917 - the thread's parts, wired once
        self,
        topology: Topology,
        settings: RuntimeSettings,
        consumer: ConsumerLanes,
        collector: RecordCollector,
        strategy: CommitStrategy,
        partitions: InputPartitions,
        *,
        metrics: RuntimeMetrics,
        bad_records: BadRecordHandler,
        cooperative: bool,
    ) -> None:
        self._topology = topology
        self._settings = settings
        self._consumer = consumer
        self._collector = collector
        self._strategy = strategy
        self._partitions = partitions
        self._metrics = metrics
        self._bad_records = bad_records
        self._cooperative = cooperative
        self._purger = RepartitionPurger(
            {**settings.client_config()},
            frozenset(topology.repartition_topics),
            settings.repartition_purge_interval_ms / 1000,
        )
        self.tasks: dict[TaskId, StreamTask] = {}
        # The record cache: one budget for all of this thread's tasks.
        self._cache = ThreadCache(settings.statestore_cache_max_bytes)
        metrics.record_caches.add(self._cache)
        self._task_of: dict[TopicPartitionId, StreamTask] = {}
        # Tasks whose stores restore on the updater's thread, with their inputs' committed
        # offsets (where processing starts once restored); their inputs stay paused.
        self._restoring: dict[TaskId, dict[TopicPartitionId, int]] = {}
        consumer_config = settings.consumer_config()
        self._updater = StateUpdater(
            "streams-restore",
            lambda worker: ChangelogReaders(consumer_config, settings.application_id, worker),
        )
        # Read by other threads (membership, interactive queries): replaced, never mutated.
        self.active_tasks: frozenset[TaskId] = frozenset()
        self.restoring_tasks: frozenset[TaskId] = frozenset()
        self.assignment_listener: Callable[[], None] | None = None
        self.warm_stores: WarmStores | None = None
        self._lag_published_at = float("-inf")
        self._creation_pending = False
        self._restore_failures: dict[TaskId, int] = {}

    def reconnect(
        self,
        consumer: ConsumerLanes,
        strategy: CommitStrategy,
        partitions: InputPartitions,
        cooperative: bool,
    ) -> None:
        """Read through a new consumer (its group join failed before any assignment, so no
        task exists yet)."""
        if self.tasks or self._restoring:
            raise StreamsError("cannot change the consumer of a thread that has tasks")
        self._consumer = consumer
        self._strategy = strategy
        self._partitions = partitions
        self._cooperative = cooperative

    def restoring(self, task_id: TaskId) -> StreamTask | None:
        """``task_id`` while its stores restore right now (readable, stale, by queries)."""
        return self._updater.restoring(task_id)

    def task_of(self, tp: TopicPartitionId) -> StreamTask | None:
        """The task reading ``tp``; None when not all of its task's inputs are assigned yet."""
        return self._task_of.get(tp)

    def owned_partitions(self) -> dict[TopicPartitionId, StreamTask]:
        return self._task_of

    # -- commits ----------------------------------------------------------------------------

    def commit(self) -> bool:
        """Commit every task: flush (or commit the transaction with) outputs and changelogs,
        then input offsets with partition times and bounds, then checkpoint local state; whether
        a task's committed bounds moved."""
        started = time.monotonic()
        for task in self.tasks.values():
            task.flush()
        per_task = [
            (task, task.offsets_to_commit(self._position, self._partitions.end_reached))
            for task in self.tasks.values()
        ]
        offsets = [tp for _, task_offsets in per_task for tp in task_offsets]
        result = self._strategy.commit(offsets)
        if result is CommitResult.ABORTED:
            self._rewind_all()
        if result is not CommitResult.COMMITTED:
            return False
        moved = False
        for task, task_offsets in per_task:
            moved |= task.committed_offsets(task_offsets)
        self._purger.committed(offsets)
        self._metrics.commit_latency.observe(time.monotonic() - started)
        return moved

    def _position(self, tp: TopicPartitionId) -> int:
        """The consumer's next fetch offset of ``tp`` (-1 when it has none)."""
        try:
            [found] = self._consumer.position([TopicPartition(tp.topic, tp.partition)])
        except KafkaException:
            return -1
        return found.offset if found.offset >= 0 else -1

    def shutdown(self, failure: BaseException | None) -> None:
        """Commit (or abort, as the strategy decides after ``failure``) and close every task."""
        try:
            if self._strategy.commits_on_stop(failure):
                self.commit()
            else:
                self._strategy.abort()
        except Exception:
            logger.exception("final commit failed; uncommitted input will be processed again")
        finally:
            for task in self.tasks.values():
                task.close()
            self.tasks.clear()
            self._task_of.clear()
            self._restoring.clear()
            for task in self._updater.stop():
                task.close()
            self._publish_tasks()

    def handle_lost_all(self) -> None:
        """After :class:`TaskMigratedError`: close every task without a commit (another member
        may own it already) and start a new producer; the thread then rejoins the group."""
        self._close_tasks(list(self.tasks.values()), list(self._restoring))
        self._collector.reset_producer()

    def _rewind_all(self) -> None:
        """After an abort: drop every task and restart it from the committed offsets and
        changelogs."""
        tps = [tp for task in self.tasks.values() for tp in task.inputs]
        self._close_tasks(list(self.tasks.values()))
        self._create_tasks(tps)

    def finish_restores(self) -> bool:
        """Start processing the tasks whose stores finished restoring (the stream thread
        calls this every loop turn); raises the first restore that failed. Whether a task
        started."""
        done = self._updater.drain()
        failure: BaseException | None = None
        for task, error in done:
            offsets = self._restoring.pop(task.id)
            if error is not None:
                task.close()
                failures = self._restore_failures.get(task.id, 0) + 1
                self._restore_failures[task.id] = failures
                if failures > _RESTORE_ATTEMPTS:
                    failure = failure or error
                else:
                    # A broker hiccup or a changelog moving under a rebalance: try again, from
                    # scratch, while the task's inputs are still assigned here.
                    logger.warning(
                        "restore of task %(task)s failed (%(error)s); attempt %(attempt)d of "
                        "%(attempts)d next",
                        {
                            "task": str(task.id),
                            "error": str(error),
                            "attempt": failures + 1,
                            "attempts": _RESTORE_ATTEMPTS + 1,
                        },
                    )
                    self._creation_pending = True
                continue
            self._restore_failures.pop(task.id, None)
            task.start_processing()
            self.tasks[task.id] = task
            for tp, offset in offsets.items():
                self._task_of[tp] = task
                self._partitions.start(tp, offset, seek=True)
        if done:
            self._metrics.tasks.set(len(self.tasks))
            self._publish_tasks()
        if failure is not None:
            raise StreamsError(f"restore failed: {failure}") from failure
        return bool(done)

    @property
    def settling(self) -> bool:
        """Whether tasks are restoring or waiting to be created (the thread is not RUNNING)."""
        return bool(self._restoring) or self._creation_pending

    def create_pending_tasks(self) -> None:
        """Create the tasks whose creation failed before (the stream thread calls this every
        loop turn)."""
        if self._creation_pending:
            self._creation_pending = False
            self._create_tasks(sorted(self._partitions.assigned))

    def publish_lag(self, now: float) -> None:
        """Set the consumer lag gauge of every assigned input partition from cached watermarks
        (the stream thread calls this every loop turn, ``now`` its monotonic clock): at most
        once a second."""
        if now - self._lag_published_at < 1.0:
            return
        self._lag_published_at = now
        for tp in self._partitions.assigned:
            lag = self._partitions.lag(tp)
            if lag is not None:
                self._metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(lag)

    def _forget(self, partitions: set[TopicPartitionId]) -> None:
        """Revoked or lost: no more fetch positions nor lag for ``partitions``."""
        self._partitions.forget(partitions)
        for tp in partitions:
            with contextlib.suppress(KeyError):  # no lag published yet
                self._metrics.consumer_lag.remove(tp.topic, str(tp.partition))

    # -- rebalances -------------------------------------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances("assigned").inc(len(partitions))
        new = [TopicPartitionId(p.topic, p.partition) for p in partitions]
        self._partitions.assigned.update(new)
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self._create_tasks(new)
        logger.info(
            "assigned %(partitions)d partitions; %(tasks)d tasks",
            {"partitions": len(partitions), "tasks": len(self.tasks)},
        )

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances("revoked").inc(len(partitions))
        revoked = {TopicPartitionId(p.topic, p.partition) for p in partitions}
        rewind = False
        if any(revoked.intersection(t.inputs) for t in self.tasks.values()):
            try:
                self.commit()
            except (KafkaException, StreamsError) as exc:
                logger.warning(
                    "commit on revocation failed (%(error)s); input will be processed again",
                    {"error": str(exc)},
                )
                # Output since the last commit may be lost, every task's and not only the
                # revoked ones' (an aborted transaction, a failed delivery): all of them start
                # again from the last commit, duplicates rather than loss.
                if isinstance(exc, TaskMigratedError):
                    self._collector.reset_producer()
                else:
                    self._strategy.abort()
                rewind = True
        # Looked up again: an aborted commit has already recreated every task.
        affected = [t for t in self.tasks.values() if revoked.intersection(t.inputs)]
        self._close_tasks(
            list(self.tasks.values()) if rewind else affected, self._restoring_of(revoked)
        )
        self._forget(revoked)
        self._unassign(consumer, partitions)
        if rewind:
            self._create_tasks(sorted(self._partitions.assigned))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member may own these already: no commit, and an open transaction would be
        # fenced anyway.
        logger.warning("lost %(partitions)d partitions", {"partitions": len(partitions)})
        lost = {TopicPartitionId(p.topic, p.partition) for p in partitions}
        discarded_all = self._strategy.abort()
        affected = [t for t in self.tasks.values() if discarded_all or lost.intersection(t.inputs)]
        self._close_tasks(affected, self._restoring_of(lost))
        self._forget(lost)
        self._unassign(consumer, partitions)
        if discarded_all:
            self._create_tasks(sorted(self._partitions.assigned))

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    # -- task lifecycle ---------------------------------------------------------------------

    def _create_tasks(self, partitions: Sequence[TopicPartitionId]) -> None:
        """Create the tasks all of whose inputs are assigned now; their stores restore on the
        updater's thread while their inputs stay paused (:meth:`finish_restores` starts them at
        their committed offsets)."""
        wanted: set[TaskId] = set()
        for tp in partitions:
            sub = self._topology.subtopology_of(tp.topic)
            wanted.add(TaskId(sub.id, tp.partition))
        ready = []
        for task_id in sorted(wanted):
            if task_id in self.tasks or task_id in self._restoring:
                continue
            sub = self._topology.subtopologies[task_id.subtopology]
            inputs = [TopicPartitionId(t, task_id.partition) for t in sub.source_topics]
            if not all(tp in self._partitions.assigned for tp in inputs):
                continue
            ready.append((task_id, sub, inputs))
        if not ready:
            return
        all_inputs = [
            TopicPartition(tp.topic, tp.partition) for _, _, inputs in ready for tp in inputs
        ]
        try:
            committed = {
                TopicPartitionId(tp.topic, tp.partition): (tp.offset, tp.metadata)
                for tp in self._consumer.committed(all_inputs, timeout=30)
            }
        except KafkaException as exc:
            # The group moved on meanwhile (a stale member epoch, a coordinator change) or the
            # broker did not answer: the tasks are created on a later loop turn, if their
            # inputs are still assigned then (:meth:`create_pending_tasks`).
            logger.warning(
                "committed offsets not read (%(error)s); creating the tasks later",
                {"error": str(exc)},
            )
            self._creation_pending = True
            return
        for task_id, sub, inputs in ready:
            task = StreamTask(
                task_id,
                sub,
                settings=self._settings,
                collector=self._collector,
                metrics=self._metrics,
                bad_records=self._bad_records,
                lag=self._partitions.lag,
                cache=self._cache,
            )
            task.prepare(committed, self.warm_stores)
            self._partitions.pause(inputs)
            self._restoring[task_id] = {tp: committed[tp][0] for tp in inputs}
            self._updater.add(task)
        self._publish_tasks()

    def _restoring_of(self, partitions: set[TopicPartitionId]) -> list[TaskId]:
        return [i for i, inputs in self._restoring.items() if partitions.intersection(inputs)]

    def _close_tasks(self, tasks: list[StreamTask], restoring: Sequence[TaskId] = ()) -> None:
        """Close ``tasks`` and stop the restores of ``restoring`` (given up, waited for)."""
        for task in tasks:
            task.close()
            self.tasks.pop(task.id, None)
            for tp in task.inputs:
                self._task_of.pop(tp, None)
        for task_id in restoring:
            del self._restoring[task_id]
            stopped = self._updater.remove(task_id)
            if stopped is not None:
                stopped.close()
        self._metrics.tasks.set(len(self.tasks))
        self._publish_tasks()

    def _publish_tasks(self) -> None:
        self.restoring_tasks = frozenset(self._restoring)
        self.active_tasks = frozenset(self.tasks)
        if self.assignment_listener is not None:
            self.assignment_listener()

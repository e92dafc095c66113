"""The processing loop (Kafka Streams' ``StreamThread``): one consumer, records routed
(:mod:`~streams_runtime.processing.record_router`) to the tasks of its
:class:`~streams_runtime.processing.task_manager.TaskManager`, back-pressure, when to tick
(:mod:`streams_runtime.progress`), and when to commit (the task manager commits, under the
thread's one :class:`~streams_runtime.processing.commit_strategy.CommitStrategy`)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams_runtime.app_state import AppState
from streams_runtime.errors import BadRecordHandler, StreamsError, TaskMigratedError, as_exception
from streams_runtime.health import Heartbeat
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.commit_schedule import CommitSchedule, input_drained
from streams_runtime.processing.commit_strategy import (
    CommitStrategy,
    OffsetCommitHook,
    commit_strategy_for,
)
from streams_runtime.processing.group_protocol import (
    JoinFailure,
    classify_join_error,
    consumer_group_config,
    set_group_timeouts,
)
from streams_runtime.processing.input_partitions import InputPartitions
from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.processing.milestones import Milestones
from streams_runtime.processing.record_router import RecordRouter
from streams_runtime.processing.task import StreamTask, WarmStores
from streams_runtime.processing.task_manager import TaskManager
from streams_runtime.progress import Progress
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.settings import GroupProtocol, RuntimeSettings
from streams_runtime.topology import Topology

__all__ = ["StreamThread"]

logger = logging.getLogger(__name__)

_FETCH_BATCH = 1000
_PROCESS_BUDGET = 1000  # records per task per loop turn, so one busy task cannot starve the rest
_SHORT_POLL_S = 0.005  # while tasks hold records but wait (idling), poll briefly
_WAIT_LOG_S = 10.0  # how often to report tasks that hold records but wait
_JOIN_GATE_POLL_S = 0.2
_REJOIN_BACKOFF_S = 1.0

RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]


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
        before_offset_commit: OffsetCommitHook | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self._topology = topology
        self._settings = settings
        self._metrics = metrics
        self._partition_counts = partition_counts
        self._on_state = on_state
        self._state: AppState | None = None
        self._stopping = threading.Event()
        # Set once shutdown starts: the rebalance callbacks ``close()`` calls must not restore
        # or commit against a handle being destroyed (librdkafka applies the change itself).
        self._closing = False
        # A rebalance callback's failure, raised by the loop once ``consume`` returns: raised
        # inside the callback it would come back through the C layer (possibly as a bare
        # ``KafkaError``, see :func:`~streams_runtime.errors.as_exception`).
        self._callback_error: BaseException | None = None
        self.heartbeat = heartbeat or Heartbeat()
        """Beaten every loop turn (``/health/live``)."""
        self._router = RecordRouter(settings, frozenset(topology.repartition_topics), metrics)
        self._schedule = CommitSchedule(settings.commit_interval_s, time.monotonic())
        self._next_wait_log = 0.0
        self._milestones = Milestones()
        # At-least-once or exactly-once: decided here, once, for the consumer, the producer and
        # every commit.
        self._strategy_for = commit_strategy_for(settings)
        self.collector = RecordCollector(
            settings, instance_id, metrics, transactional=self._strategy_for.transactional
        )
        self._instance_id = instance_id
        self._before_offset_commit = before_offset_commit
        self._bad_records = BadRecordHandler(
            settings.bad_record_policy,
            settings.dead_letter_topic or f"{settings.application_id}-dlq",
            self.collector.send,
            metrics,
        )
        self._protocol = (
            GroupProtocol.CONSUMER
            if settings.group_protocol is GroupProtocol.AUTO
            else settings.group_protocol
        )
        self._joined = False  # an assignment came (a join failure is then a real failure)
        self._group_instance_id = settings.group_instance_id or (
            instance_id if settings.static_membership else None
        )
        self.join_gate: Callable[[], bool] | None = None
        """Called before the consumer joins the group, until it returns True (warm-ups)."""
        if self._protocol is GroupProtocol.CONSUMER:
            set_group_timeouts(settings)
        strategy, cooperative = self._connect()
        self.task_manager = TaskManager(
            topology,
            settings,
            self.consumer,
            self.collector,
            strategy,
            self._partitions,
            metrics=metrics,
            bad_records=self._bad_records,
            cooperative=cooperative,
        )
        # Ticks follow the committed bounds of every task writing a topic, read back by a thread
        # of their own (:mod:`streams_runtime.progress`).
        self._progress: Progress | None = None
        if settings.progress_propagation:
            self._progress = Progress(
                topology,
                settings,
                partition_counts,
                send=lambda topic, partition, key, timestamp, headers: self.collector.send(
                    topic, key, None, timestamp, headers, partition=partition
                ),
                partitions_of=self._partitions_of,
                metrics=metrics,
            )

    def _connect(self) -> tuple[CommitStrategy, bool]:
        """A consumer for :attr:`_protocol`, and what reads through it: its commit strategy, and
        whether its rebalances are incremental."""
        settings = self._settings
        config: dict[str, object] = {
            "auto.offset.reset": "earliest",
            **consumer_group_config(settings, self._protocol, self._instance_id),
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "isolation.level": self._strategy_for.isolation_level,
        }
        topology = self._topology
        subtopologies = [sub for sub in topology.subtopologies if sub.source_topics]
        self.consumer = ConsumerLanes(
            config,
            lanes=self._protocol is GroupProtocol.CONSUMER and len(subtopologies) > 1,
            instance_id=self._instance_id,
            subtopology_topics={sub.id: sub.source_topics for sub in subtopologies},
            partitions={
                sub.id: self._partition_counts[sub.source_topics[0]] for sub in subtopologies
            },
            placeholder=settings.lanes_topic,
            admin_config=settings.client_config(),
        )
        # Known at once under KIP-848 (the client makes it), on joining under classic. Kept
        # here: asking librdkafka is a round trip through its main thread.
        self._member_id: str | None = self.consumer.memberid()
        self._partitions = InputPartitions(self.consumer)
        strategy = self._strategy_for(
            self.collector, self.consumer, before_offset_commit=self._before_offset_commit
        )
        # KIP-848 is incremental; librdkafka's classic range assignor is eager.
        return strategy, self._protocol is GroupProtocol.CONSUMER

    # -- what other threads read (membership, interactive queries) --------------------------

    @property
    def tasks(self) -> dict[TaskId, StreamTask]:
        """The tasks of this thread, by id (this thread's only)."""
        return self.task_manager.tasks

    @property
    def active_tasks(self) -> frozenset[TaskId]:
        """Tasks restored and processing (replaced, never mutated)."""
        return self.task_manager.active_tasks

    @property
    def restoring_tasks(self) -> frozenset[TaskId]:
        """Tasks being created: their stores are restoring from the changelogs."""
        return self.task_manager.restoring_tasks

    def restoring(self, task_id: TaskId) -> StreamTask | None:
        """``task_id`` while its stores restore right now (readable, stale, by queries)."""
        return self.task_manager.restoring(task_id)

    @property
    def assignment_listener(self) -> Callable[[], None] | None:
        """Called (on this thread) whenever :attr:`active_tasks` or :attr:`restoring_tasks`
        change; must not block."""
        return self.task_manager.assignment_listener

    @assignment_listener.setter
    def assignment_listener(self, listener: Callable[[], None] | None) -> None:
        self.task_manager.assignment_listener = listener

    @property
    def warm_stores(self) -> WarmStores | None:
        """Local standby copies a new task restores from (see :meth:`StreamTask.initialize`)."""
        return self.task_manager.warm_stores

    @warm_stores.setter
    def warm_stores(self, warm_stores: WarmStores | None) -> None:
        self.task_manager.warm_stores = warm_stores

    def group_member(self) -> tuple[str | None, str | None, bool]:
        """The consumer's (back lane's) member id and ``group.instance.id`` (how the range
        assignor orders this instance; :mod:`streams_runtime.cluster.assignment`), and whether
        it joins with lanes (:mod:`.lanes`). Any thread."""
        return self._member_id, self._group_instance_id, self.consumer.lanes

    def lag(self, tp: TopicPartitionId) -> int | None:
        """KIP-695's lag of ``tp`` (see :meth:`InputPartitions.lag`)."""
        return self._partitions.lag(tp)

    # -- the loop ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Consume, process, commit until stopped; commits and closes cleanly on the way out.

        States (Kafka Streams' ``StreamThread.State`` as the app sees them): ``REBALANCING``
        from subscribing until an assignment's tasks are all restored, ``RUNNING`` then, back to
        ``REBALANCING`` on every revocation, loss or rejoin, ``PENDING_SHUTDOWN`` once
        stopping."""
        self._subscribe()
        if self._progress is not None:
            self._progress.start()
        self._schedule = CommitSchedule(self._settings.commit_interval_s, time.monotonic())
        self._next_wait_log = time.monotonic() + _WAIT_LOG_S
        poll_s = self._settings.poll_timeout_ms / 1000
        failure: BaseException | None = None
        try:
            while not self._stopping.is_set():
                self.heartbeat.beat()
                try:
                    self._turn(poll_s)
                except TaskMigratedError as exc:
                    self._rejoin(exc)
        except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
            failure = as_exception(sys.exc_info()[1])
        finally:
            self._shutdown(failure)
        if failure is not None:
            raise failure

    def _turn(self, poll_s: float) -> None:
        """One turn of the loop: fetch, process, tick, and commit when due or drained."""
        waiting = any(task.group.buffered() for task in self.tasks.values())
        messages = self.consumer.consume(_FETCH_BATCH, _SHORT_POLL_S if waiting else poll_s)
        self._after_consume()
        self.consumer.refresh()
        if messages:
            fatal = self._router.route(messages, self._partitions, self.task_manager.task_of)
            if fatal is not None and not self._join_failed(fatal):
                raise StreamsError(f"consumer failed: {fatal}")
        processed = 0
        commit_requested = False
        for task in list(self.tasks.values()):
            processed += task.process(_PROCESS_BUDGET)
            task.punctuators.punctuate_wall_clock()  # also without input, as Kafka Streams
            if task.commit_requested:
                task.commit_requested, commit_requested = False, True
        self._apply_back_pressure()
        self.collector.poll()
        now = time.monotonic()
        self._milestones.processed(processed, now)
        schedule = self._schedule
        schedule.processed(processed)
        if commit_requested:  # a user processor's context.commit()
            schedule.commit_now(now)
        self.task_manager.publish_lag(now)
        if self._progress is not None and (self._progress.due(now) or self._took_control()):
            if (
                schedule.seconds_left(now) > self._progress.interval_s
                and self._progress_waits_for_commit()
            ):
                schedule.commit_now(now)
            self._progress.tick(self.task_manager.active_tasks, self.collector.written)
        if schedule.due(now):
            self.commit()
            schedule.committed(time.monotonic())
        owned = self.task_manager.owned_partitions()
        if (
            self._milestones.undrained
            and not self.task_manager.settling
            and input_drained(owned, lambda tp: owned[tp].group.buffered(tp), self._partitions.lag)
        ):
            early = schedule.drained_commit_due(now)
            if early:
                self.commit()
                schedule.committed(time.monotonic(), drained=True)
            self._milestones.drained(time.monotonic(), committed=early)
        if now >= self._next_wait_log:
            self._log_waiting_tasks()
            self._next_wait_log = now + _WAIT_LOG_S

    def _set_state(self, state: AppState) -> None:
        if state != self._state:
            self._state = state
            self._on_state(state)

    def _subscribe(self) -> None:
        self._set_state(AppState.REBALANCING)
        if self.join_gate is not None:
            while not self._stopping.is_set() and not self.join_gate():
                self.heartbeat.beat()
                self._stopping.wait(_JOIN_GATE_POLL_S)
        self.consumer.subscribe(self._on_assign, self._on_revoke, self._on_lost)

    def _join_failed(self, error: KafkaError) -> bool:
        """A fatal ``error`` before the first assignment: join again when it says how (KIP-848
        missing: the classic protocol; this instance's killed predecessor still a member: the
        same, a moment later). Whether it was handled."""
        if self._joined:
            return False
        failure = classify_join_error(error)
        if failure == JoinFailure.UNSUPPORTED and (
            self._settings.group_protocol is GroupProtocol.AUTO
            and self._protocol is GroupProtocol.CONSUMER
        ):
            logger.warning(
                "the broker does not support KIP-848 consumer groups (%(error)s); joining with "
                "the classic protocol, whose rebalances stop every task",
                {"error": str(error)},
            )
            self._protocol = GroupProtocol.CLASSIC
        elif failure == JoinFailure.INSTANCE_ID_IN_USE:
            logger.warning(
                "instance %(instance)s is still a member of the group (a previous process of "
                "this instance that did not leave, until its session times out); joining again "
                "in %(retry)s s",
                {"instance": self._group_instance_id, "retry": _REJOIN_BACKOFF_S},
            )
            self._stopping.wait(_REJOIN_BACKOFF_S)
        else:
            return False
        self.consumer.close(release=False)
        strategy, cooperative = self._connect()
        self.task_manager.reconnect(self.consumer, strategy, self._partitions, cooperative)
        self._subscribe()
        return True

    # -- rebalance callbacks (called from consume, and from close) ---------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._closing or self._stopping.is_set():
            # Stopping: no task to restore for an assignment about to be given up.
            return
        self._set_state(AppState.REBALANCING)
        self._joined = True
        self._member_id = self.consumer.memberid()
        self._guarded(self.task_manager.on_assign, consumer, partitions)
        if self._callback_error is None and not self.task_manager.settling:
            self._set_state(AppState.RUNNING)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._closing:
            return  # every task was committed and closed already
        self._set_state(AppState.REBALANCING)
        self._guarded(self.task_manager.on_revoke, consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._closing:
            return  # every task was closed already
        self._set_state(AppState.REBALANCING)
        self._guarded(self.task_manager.on_lost, consumer, partitions)

    def _guarded(
        self, callback: RebalanceCallback, consumer: Consumer, partitions: list[TopicPartition]
    ) -> None:
        if self._callback_error is not None:
            return  # already failing: the loop raises the first error
        try:
            callback(consumer, partitions)
        except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
            self._callback_error = as_exception(sys.exc_info()[1])

    def _after_consume(self) -> None:
        """A rebalance callback's failure is raised here; tasks whose stores finished
        restoring start processing (RUNNING once none is left restoring)."""
        self._raise_callback_error()
        self.task_manager.create_pending_tasks()
        if self.task_manager.finish_restores() and not self.task_manager.settling:
            self._set_state(AppState.RUNNING)
        self._partitions.retry_seeks()

    def _raise_callback_error(self) -> None:
        error, self._callback_error = self._callback_error, None
        if error is not None:
            raise error

    def _rejoin(self, migrated: TaskMigratedError) -> None:
        """Kafka Streams' answer to a fenced producer: every task closed without a commit, a
        new producer, and a new membership (its tasks may belong to others by now)."""
        logger.warning(
            "%(error)s; closing every task without a commit and rejoining the group",
            {"error": str(migrated)},
        )
        self._metrics.producer_fenced.inc()
        self._set_state(AppState.REBALANCING)
        self.task_manager.handle_lost_all()
        self.consumer.unsubscribe()
        self._raise_callback_error()
        self._subscribe()

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
        """Commit (or abort) and close every task, then the clients, whatever phase the
        thread is in; raises only what went wrong here, and only when nothing failed before."""
        self._closing = True
        self._set_state(AppState.PENDING_SHUTDOWN)
        errors: list[BaseException] = []
        for step in (
            lambda: self.task_manager.shutdown(failure),
            lambda: self.consumer.close(release=failure is None),
            self.collector.close,
            self._progress.stop if self._progress is not None else None,
        ):
            if step is None:
                continue
            try:
                step()
            except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
                errors.append(as_exception(sys.exc_info()[1]))
                logger.warning("shutdown: %(error)s", {"error": str(errors[-1])})
        if failure is None and errors:
            raise StreamsError(f"shutdown failed: {errors[0]}") from errors[0]

    def commit(self) -> None:
        """Commit every task now (the loop calls this every commit interval)."""
        if self.task_manager.commit() and self._progress is not None:
            self._progress.committed()

    def _apply_back_pressure(self) -> None:
        limit = self._settings.buffered_records_per_partition
        pause, resume = [], []
        for tp, task in self.task_manager.owned_partitions().items():
            buffered = task.group.buffered(tp)
            if tp in self._partitions.paused:
                if buffered <= limit // 2:
                    resume.append(tp)
            elif buffered > limit:
                pause.append(tp)
        if pause:
            self._partitions.pause(pause)
        if resume:
            self._partitions.resume(resume)

    def _took_control(self) -> bool:
        """Whether a task took a control record since the last call: its bounds may have
        moved, so a quiet task commits them now and the tick downstream follows at once,
        rather than at the next progress interval (docs/runtime/windows.md)."""
        took = False
        for task in self.tasks.values():
            if task.took_control:
                task.took_control = False
                took = True
        return took

    def _progress_waits_for_commit(self) -> bool:
        """Whether a task went quiet (no data for a progress interval) with bounds past its
        committed ones: ticks follow committed bounds only, so commit now rather than at the
        end of a long (at-least-once) commit interval."""
        quiet_s = self._settings.progress_interval_ms / 1000
        return any(task.progress_uncommitted(quiet_s) for task in self.tasks.values())

    def _partitions_of(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self.consumer.list_topics(topic, timeout=10)
            found = metadata.topics.get(topic)
            count = len(found.partitions) if found is not None and found.error is None else 0
            if count:
                self._partition_counts[topic] = count
        return count

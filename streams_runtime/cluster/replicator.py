"""The replicator: one thread per instance for membership and standbys (KIP-535,
docs/runtime/queries.md).

It

- publishes this instance's :class:`~streams_runtime.cluster.membership.MemberInfo` every
  ``membership_interval_ms`` and on every assignment change; a clean shutdown publishes a
  tombstone;
- reads the membership topic from the beginning with an assign-only consumer into a
  :class:`~streams_runtime.cluster.membership.MembershipView`, believing only records that verify
  (:mod:`streams_runtime.cluster.membership_auth`);
- places standbys (:mod:`streams_runtime.cluster.placement`) and keeps its
  :class:`~streams_runtime.cluster.standby.StandbyReplica` copies warm with one read_committed
  consumer of their changelog partitions;
- hands a task becoming active the committed state of its standbys (:meth:`Replicator.warm_stores`);
- with a persistent engine (SQLite, RocksDB), keeps the standbys on disk and checkpoints them
  every membership interval and on close, so a restart resumes each from its checkpoint
  (:mod:`.standby`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from streams_runtime.cluster.assignment import task_owners
from streams_runtime.cluster.changelog_lags import GroupOffsets, local_lags
from streams_runtime.cluster.membership import (
    LagInfo,
    MemberInfo,
    MembershipView,
    StorePartition,
    epoch_ms,
    partitions_by_store,
    store_partitions,
)
from streams_runtime.cluster.membership_auth import MembershipAuthenticator, membership_key
from streams_runtime.cluster.placement import standby_placement
from streams_runtime.cluster.standby import StandbyReplica, standby_directory
from streams_runtime.cluster.standby_files import checkpoint_standbys, open_standby
from streams_runtime.metrics import RuntimeMetrics, security_metrics
from streams_runtime.queries.security import is_loopback_host
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings, StateEngine
from streams_runtime.state import (
    StoreSpec,
    WarmStore,
    changelog_topic,
)
from streams_runtime.topology import Topology

__all__ = ["Replicator"]

logger = logging.getLogger(__name__)

_BATCH = 1000
_DEFAULT_SESSION_TIMEOUT_MS = 45_000  # librdkafka's, and KIP-848 brokers' group default


def unauthenticated_membership_level(application_server: str | None) -> int:
    """How loudly to say membership records are not authenticated: a warning where queries are
    served off loopback; on a developer's machine (loopback, or no query server) only info."""
    if application_server is None or is_loopback_host(application_server.rpartition(":")[0]):
        return logging.INFO
    return logging.WARNING


class Replicator:
    """The membership and standby thread of one instance (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        settings: RuntimeSettings,
        *,
        instance_id: str,
        partition_counts: Mapping[str, int],
        metrics: RuntimeMetrics,
        active_tasks: Callable[[], frozenset[TaskId]],
        restoring_tasks: Callable[[], frozenset[TaskId]],
        group_member: Callable[[], tuple[str | None, str | None]] = lambda: (None, None),
    ) -> None:
        self.topology = topology
        self.settings = settings
        self.instance_id = instance_id
        self.endpoint: str | None = None
        """The advertised query endpoint; set by the app once the server is bound."""
        self.metrics = metrics
        self.view = MembershipView()
        self._security = security_metrics(metrics)
        key = membership_key(settings)
        self._auth = (
            None if key is None else MembershipAuthenticator(key, settings.membership_topic)
        )
        if self._auth is None:
            logger.log(
                unauthenticated_membership_level(settings.application_server),
                "membership records are not authenticated (no membership_secret and no "
                "query_token): anyone who can write %(topic)s can redirect forwarded queries",
                {"topic": settings.membership_topic},
            )
        self._active_tasks = active_tasks
        self._restoring_tasks = restoring_tasks
        self._group_member = group_member
        # Tasks per sub-topology: the partition count of its (co-partitioned) source topics.
        self._tasks_per_subtopology = {
            sub.id: partition_counts.get(sub.source_topics[0], 0) for sub in topology.subtopologies
        }
        # Placement counts an instance in the group as long as the broker does (until its session
        # times out), not only while its heartbeats are fresh: a late heartbeat on a busy
        # machine must not move every standby away and back.
        self._group_session_ms = int(
            settings.consumer_config().get("session.timeout.ms", _DEFAULT_SESSION_TIMEOUT_MS)
        )
        self.joining = False
        """Warming up before the stream thread joins the group (:meth:`ready_to_join`)."""
        self._join_deadline: float | None = None
        self._membership_loaded = False
        self._interval_s = settings.membership_interval_ms / 1000
        # Logged stores: spec, sub-topology, changelog topic, partition count.
        self.stores: dict[str, tuple[StoreSpec, int, str, int]] = {}
        for sub in topology.subtopologies:
            for spec in sub.stores:
                if spec.logged:
                    topic = changelog_topic(settings.application_id, spec.name)
                    count = partition_counts.get(topic)
                    if count:
                        self.stores[spec.name] = (spec, sub.id, topic, count)
        self.standbys: dict[StorePartition, StandbyReplica] = {}
        # Persistent engines' standbys live on disk (in SQLite files, whichever the engine).
        self._persistent = settings.state_engine != StateEngine.MEMORY
        self._standby_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        base = settings.consumer_config()
        base.pop("group.instance.id", None)
        suffix = uuid.uuid4().hex[:8]
        common = {
            **base,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": "50",
        }
        self._membership_consumer = Consumer(
            {
                **common,
                "group.id": f"{settings.application_id}-membership-{suffix}",
                "enable.partition.eof": "true",  # the view is complete: joins may be planned
            }
        )
        self._changelog_consumer = Consumer(
            {
                **common,
                "group.id": f"{settings.application_id}-standby-{suffix}",
                "isolation.level": "read_committed",
                "enable.partition.eof": "true",
            }
        )
        self._offsets = GroupOffsets({**common, "group.id": settings.application_id})
        self._producer = Producer(
            {**settings.client_config(), **settings.producer, "linger.ms": "0"}
        )
        self._membership_consumer.assign(
            [TopicPartition(settings.membership_topic, 0, OFFSET_BEGINNING)]
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="streams-replicator", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Publish (and re-place standbys) soon: the assignment changed. Never blocks."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread, publish a tombstone (a clean leave) and close the clients."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            key = self.instance_id.encode()
            headers = None if self._auth is None else self._auth.headers(key, None, epoch_ms())
            self._producer.produce(self.settings.membership_topic, key=key, headers=headers)
            self._producer.flush(5)
        except (KafkaException, BufferError) as exc:
            logger.warning(
                "membership tombstone not sent: %(error)s",
                {"topic": self.settings.membership_topic, "error": str(exc)},
            )
        for consumer in (self._membership_consumer, self._changelog_consumer):
            with contextlib.suppress(RuntimeError):
                consumer.close()
        self._offsets.close()
        with self._standby_lock:
            for replica in self.standbys.values():
                replica.close()
            self.standbys.clear()

    def _run(self) -> None:
        next_publish = 0.0
        while not self._stopping.is_set():
            try:
                self._read_membership()
                if self._wake.is_set() or time.monotonic() >= next_publish:
                    self._wake.clear()
                    self._place_standbys()
                    self._fold_standbys()
                    self._checkpoint_standbys()
                    self.publish()
                    next_publish = time.monotonic() + self._interval_s
                self._read_changelogs()
            except Exception:
                logger.exception("replicator: error (continuing)")
                time.sleep(self._interval_s)

    # -- membership ---------------------------------------------------------------------------

    def _read_membership(self) -> None:
        for msg in self._membership_consumer.consume(_BATCH, 0):
            error = msg.error()
            if error is not None:
                self._membership_error(error)
                continue
            key = msg.key()
            if key is None:
                continue
            instance = key.decode("utf-8", "replace")
            value = msg.value()
            left_ms: int | None = None
            if self._auth is not None:
                # Before parsing: what does not verify is never believed, nor even read.
                verdict = self._auth.verify(key, value, msg.headers())
                if verdict.reason is not None:
                    self._security.reject_membership(instance, verdict.reason)
                    continue
                left_ms = verdict.left_ms
            if instance == self.instance_id:
                # Its own state is known first-hand (publish puts it in the view); the records
                # read back are older than that by the time they arrive.
                continue
            if value is None:
                if not self.view.update(instance, None, left_ms):
                    self._security.reject_membership(instance, "replayed", "an older leave")
                continue
            try:
                info = MemberInfo.from_json(value)
            except ValueError as exc:
                self._security.reject_membership(instance, "malformed", str(exc))
                continue
            if info.instance_id != instance:
                self._security.reject_membership(
                    instance, "key-mismatch", f"the value names {info.instance_id[:100]!r}"
                )
                continue
            if not self.view.update(instance, info):
                self._security.reject_membership(instance, "replayed", "older than the one held")

    def _membership_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            self._membership_loaded = True
            return
        logger.warning(
            "membership consumer: %(error)s",
            {"topic": self.settings.membership_topic, "error": str(error)},
        )

    def _local_partitions(self, tasks: frozenset[TaskId]) -> set[StorePartition]:
        return {
            StorePartition(name, task.partition)
            for name, (_spec, sub, _topic, _count) in self.stores.items()
            for task in tasks
            if task.subtopology == sub
        }

    def member_info(self, *, with_lags: bool = True) -> MemberInfo:
        """This instance's membership record as of now (``with_lags=False``: without lags, so
        without asking the broker for end offsets)."""
        active = self._local_partitions(self._active_tasks())
        restoring = self._local_partitions(self._restoring_tasks()) - active
        with self._standby_lock:
            standby = set(self.standbys) - active
        lags = self.local_lags(active, restoring, standby) if with_lags else {}
        member_id, group_instance_id = self._group_member()
        return MemberInfo(
            instance_id=self.instance_id,
            endpoint=self.endpoint,
            heartbeat_ms=epoch_ms(),
            interval_ms=self.settings.membership_interval_ms,
            active=partitions_by_store(active),
            restoring=partitions_by_store(restoring),
            standby=partitions_by_store(standby),
            lags={
                store: {sp.partition: lag for sp, lag in lags.items() if sp.store == store}
                for store in sorted({sp.store for sp in lags})
            },
            group_member_id=member_id,
            group_instance_id=group_instance_id,
            joining=self.joining,
        )

    def publish(self) -> MemberInfo:
        info = self.member_info()
        self.view.update(self.instance_id, info)
        key, value = self.instance_id.encode(), info.to_json()
        headers = None if self._auth is None else self._auth.headers(key, value)
        self._producer.produce(
            self.settings.membership_topic, key=key, value=value, headers=headers
        )
        self._producer.poll(0)
        for sp, lag in ((sp, info.lag(sp)) for sp in store_partitions(info.standby)):
            if lag is not None:
                self.metrics.standby_lag(sp.store, str(sp.partition)).set(lag.offset_lag)
        return info

    # -- lags ---------------------------------------------------------------------------------

    def end_offset(self, tp: TopicPartitionId) -> int:
        """The changelog partition's high watermark, asked from the broker (-1 when unknown)."""
        return self._offsets.end_offset(tp)

    def changelog_tp(self, sp: StorePartition) -> TopicPartitionId:
        return TopicPartitionId(self.stores[sp.store][2], sp.partition)

    def local_lags(
        self,
        active: Iterable[StorePartition] | None = None,
        restoring: Iterable[StorePartition] | None = None,
        standby: Iterable[StorePartition] | None = None,
    ) -> dict[StorePartition, LagInfo]:
        """Lag of every local copy (:func:`~streams_runtime.cluster.changelog_lags.local_lags`;
        ``None``: this instance's active, restoring or standby copies as of now)."""
        if active is None:
            active = self._local_partitions(self._active_tasks())
        if restoring is None:
            restoring = self._local_partitions(self._restoring_tasks())
        with self._standby_lock:
            replicas = dict(self.standbys)
        return local_lags(
            active,
            restoring,
            replicas,
            None if standby is None else set(standby),
            end_offset=lambda sp: self.end_offset(self.changelog_tp(sp)),
        )

    def standby_lag(self, sp: StorePartition) -> LagInfo | None:
        """The lag of the local standby of ``sp`` (``None``: there is none). Never asks the
        broker: queries must not wait on Kafka clients the replicator thread is using."""
        with self._standby_lock:
            replica = self.standbys.get(sp)
        return None if replica is None else replica.lag(epoch_ms())

    # -- standbys -----------------------------------------------------------------------------

    def _place_standbys(self) -> None:
        count = self.settings.num_standby_replicas
        active = self._local_partitions(self._active_tasks())
        restoring = self._local_partitions(self._restoring_tasks())
        members = self.view.live(at_least_ms=self._group_session_ms)
        # Our own record in the view may be a moment old: use the current assignment.
        members[self.instance_id] = self.member_info(with_lags=False)
        with self._standby_lock:
            current = set(self.standbys)
        wanted: set[StorePartition] = set()
        for name, (_spec, sub, _topic, partitions) in self.stores.items():
            for partition in range(partitions):
                sp = StorePartition(name, partition)
                if sp in active:
                    continue
                if sp in restoring:
                    # Becoming active here: keep serving from the standby until restored.
                    if sp in current:
                        wanted.add(sp)
                    continue
                placement = standby_placement(
                    sp, TaskId(sub, partition), members, count, self._tasks_per_subtopology
                )
                if (placement is None and sp in current) or (
                    placement is not None and self.instance_id in placement
                ):
                    wanted.add(sp)
        if wanted != current:
            self._set_standbys(wanted)

    # -- warm-ups -----------------------------------------------------------------------------

    def ready_to_join(self) -> bool:
        """The stream thread's join gate (KIP-441's warm-ups, docs/runtime/scaling.md): this
        instance announces itself as joining, every instance places a warm-up copy of each
        task it will own on it, and it joins once those copies are within
        ``acceptable_recovery_lag``, or ``warmup_timeout_ms`` has passed, or no running
        instance holds state to warm up from."""
        now = time.monotonic()
        if self._join_deadline is None:
            if self.settings.warmup_timeout_ms <= 0:
                return True
            self._join_deadline = now + self.settings.warmup_timeout_ms / 1000
            self.joining = True
            self.wake()
            return False
        if not self.joining:
            return True
        behind = self._warmups_behind()
        if behind is not None and not behind:
            return self._join("warm-up copies caught up")
        if now >= self._join_deadline:
            return self._join(f"warm-up timeout; still behind: {behind or 'unknown'}")
        return False

    def _warmups_behind(self) -> list[StorePartition] | None:
        """Store partitions of the tasks this instance will own whose local copy is not within
        ``acceptable_recovery_lag``; None while that is not known yet."""
        if not self._membership_loaded:
            return None
        me = self.member_info(with_lags=False).group_member
        if me is None:
            return []  # classic protocol: no member id before joining, nothing to plan with
        members = self.view.live(at_least_ms=self._group_session_ms)
        members.pop(self.instance_id, None)
        if not any(m.group_member is not None and not m.joining for m in members.values()):
            return []  # nobody runs: nothing is warmer than the changelogs
        everyone = [m.group_member for m in members.values() if m.group_member is not None]
        owners = task_owners([*everyone, me], self._tasks_per_subtopology)
        mine = frozenset(task for task, owner in owners.items() if owner == self.instance_id)
        behind = []
        for sp in sorted(self._local_partitions(mine)):
            lag = self.standby_lag(sp)
            if (
                lag is None
                or lag.current_offset < 0
                or not 0 <= lag.offset_lag <= self.settings.acceptable_recovery_lag
            ):
                behind.append(sp)
        return behind

    def _join(self, why: str) -> bool:
        logger.info("joining the group: %(why)s", {"why": why})
        self.joining = False
        self.wake()
        return True

    def _fold_standbys(self) -> None:
        """Give the standbys the application's committed offsets of the inputs behind their
        pending records (see :class:`StandbyReplica`), so those do not pile up."""
        with self._standby_lock:
            sources = set().union(*(r.pending_sources() for r in self.standbys.values()))
        if not sources:
            return
        try:
            committed = self._offsets.committed(sorted(sources))
        except KafkaException as exc:  # the next interval asks again
            logger.debug("committed offsets not read: %(error)s", {"error": str(exc)})
            return
        with self._standby_lock:
            for replica in self.standbys.values():
                replica.fold(committed)

    def warm_stores(
        self, task: TaskId, committed_inputs: Mapping[TopicPartitionId, int]
    ) -> dict[str, WarmStore]:
        """The committed state of ``task``'s stores that have a standby here, as of
        ``committed_inputs`` (the task's committed input offsets): a task becoming active
        restores from these and the changelogs' tails (docs/runtime/state.md)."""
        warm: dict[str, WarmStore] = {}
        with self._standby_lock:
            for name, (_spec, sub, _topic, _count) in self.stores.items():
                replica = self.standbys.get(StorePartition(name, task.partition))
                if sub == task.subtopology and replica is not None and replica.position() >= 0:
                    warm[name] = replica.warm_store(committed_inputs)
        return warm

    def _checkpoint_standbys(self) -> None:
        with self._standby_lock:
            checkpoint_standbys(self.standbys.values())

    def _new_standby(self, sp: StorePartition) -> StandbyReplica:
        spec, _sub, topic, _count = self.stores[sp.store]
        directory = (
            standby_directory(self.settings.state_dir, self.settings.application_id, sp)
            if self._persistent
            else None
        )
        return open_standby(spec, sp, topic, directory, self._offsets.watermarks)

    def _set_standbys(self, wanted: set[StorePartition]) -> None:
        with self._standby_lock:
            current = set(self.standbys)
        # Opened outside the lock: resuming asks the broker, and queries wait on the lock.
        created = {sp: self._new_standby(sp) for sp in sorted(wanted - current)}
        with self._standby_lock:
            for sp in current - wanted:
                logger.info(
                    "standby %(store)s/%(partition)d dropped",
                    {"store": sp.store, "partition": sp.partition},
                )
                self.standbys.pop(sp).close()
                self.metrics.standby_lag(sp.store, str(sp.partition)).set(0)
            for sp, replica in created.items():
                logger.info(
                    "standby %(store)s/%(partition)d created (from offset %(offset)d)",
                    {
                        "store": sp.store,
                        "partition": sp.partition,
                        "offset": max(replica.position(), 0),
                    },
                )
                self.standbys[sp] = replica
            assignment = [
                TopicPartition(
                    r.tp.topic,
                    r.tp.partition,
                    r.next_offset if r.next_offset >= 0 else OFFSET_BEGINNING,
                )
                for r in self.standbys.values()
            ]
        if assignment:
            self._changelog_consumer.assign(assignment)
        else:
            self._changelog_consumer.unassign()

    def _read_changelogs(self) -> None:
        with self._standby_lock:
            idle = not self.standbys
        if idle:
            self._wake.wait(min(self._interval_s, 0.1))
            return
        messages = self._changelog_consumer.consume(_BATCH, 0.05)
        with self._standby_lock:
            by_tp = {r.tp: r for r in self.standbys.values()}
            read: dict[StandbyReplica, int] = {}
            for msg in messages:
                tp = TopicPartitionId(msg.topic() or "", msg.partition() or 0)
                replica = by_tp.get(tp)
                if replica is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        replica.eof_offset = msg.offset() or 0
                    else:
                        logger.warning(
                            "standby consumer: %(error)s",
                            {
                                "topic": msg.topic(),
                                "partition": msg.partition(),
                                "error": str(error),
                            },
                        )
                    continue
                replica.apply(msg)
                read[replica] = read.get(replica, 0) + 1
            for replica, count in read.items():
                self.metrics.standby_restored(replica.sp.store, str(replica.sp.partition)).inc(
                    count
                )
            # Cached by the consumer from its fetch responses: no broker round trip.
            for replica in by_tp.values():
                ktp = TopicPartition(replica.tp.topic, replica.tp.partition)
                high = self._changelog_consumer.get_watermark_offsets(ktp, cached=True)[1]
                if high >= 0 and replica.position() >= 0:
                    replica.end_offset = int(high)

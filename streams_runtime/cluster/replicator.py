"""The replicator: one thread per instance for membership and standbys (KIP-535,
docs/runtime/queries.md).

It

- publishes this instance's :class:`~streams_runtime.cluster.membership.MemberInfo` every
  ``membership_interval_ms`` and on every assignment change; a clean shutdown publishes a
  tombstone;
- reads the membership topic from the beginning with an assign-only consumer into a
  :class:`~streams_runtime.cluster.membership.MembershipView`, believing only records that verify
  (:mod:`streams_runtime.cluster.membership_auth`);
- places standbys (:mod:`streams_runtime.cluster.placement`) and keeps them warm
  (:class:`~streams_runtime.cluster.standby_set.StandbySet`);
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
from streams_runtime.cluster.placement import copy_placement
from streams_runtime.cluster.standby_set import LoggedStore, StandbySet
from streams_runtime.metrics import RuntimeMetrics, security_metrics
from streams_runtime.queries.security import is_loopback_host
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import (
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
        group_member: Callable[[], tuple[str | None, str | None, bool]] = lambda: (
            None,
            None,
            False,
        ),
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
        self.stores: dict[str, LoggedStore] = {}
        for sub in topology.subtopologies:
            for spec in sub.stores:
                if spec.logged:
                    topic = changelog_topic(settings.application_id, spec.name)
                    count = partition_counts.get(topic)
                    if count:
                        self.stores[spec.name] = (spec, sub.id, topic, count)
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
        self._offsets = GroupOffsets({**common, "group.id": settings.application_id})
        self._standbys = StandbySet(
            self.stores,
            settings,
            {**common, "group.id": f"{settings.application_id}-standby-{suffix}"},
            self._offsets,
            metrics,
        )
        self.standbys = self._standbys.replicas
        """The standby copies here, by store partition (a lookup needs no lock)."""
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
        with contextlib.suppress(RuntimeError):
            self._membership_consumer.close()
        self._standbys.close()
        self._offsets.close()

    def _run(self) -> None:
        next_publish = 0.0
        while not self._stopping.is_set():
            try:
                self._read_membership()
                if self._wake.is_set() or time.monotonic() >= next_publish:
                    self._wake.clear()
                    self._place_standbys()
                    self._standbys.fold()
                    self._standbys.checkpoint()
                    self.publish()
                    next_publish = time.monotonic() + self._interval_s
                self._standbys.read(lambda: self._wake.wait(min(self._interval_s, 0.1)))
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
        standby = self._standbys.partitions() - active
        lags = self.local_lags(active, restoring, standby) if with_lags else {}
        member_id, group_instance_id, lanes = self._group_member()
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
            lanes=lanes,
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
        return local_lags(
            active,
            restoring,
            self._standbys.snapshot(),
            None if standby is None else set(standby),
            end_offset=lambda sp: self.end_offset(self.changelog_tp(sp)),
        )

    def standby_lag(self, sp: StorePartition) -> LagInfo | None:
        """The lag of the local standby of ``sp`` (:meth:`StandbySet.lag`)."""
        return self._standbys.lag(sp)

    # -- standbys -----------------------------------------------------------------------------

    def _place_standbys(self) -> None:
        count = self.settings.num_standby_replicas
        active = self._local_partitions(self._active_tasks())
        restoring = self._local_partitions(self._restoring_tasks())
        members = self.view.live(at_least_ms=self._group_session_ms)
        # Our own record in the view may be a moment old: use the current assignment.
        members[self.instance_id] = self.member_info(with_lags=False)
        current = self._standbys.partitions()
        logged: dict[TaskId, list[StorePartition]] = {}
        for name, (_spec, sub, _topic, partitions) in self.stores.items():
            for partition in range(partitions):
                logged.setdefault(TaskId(sub, partition), []).append(
                    StorePartition(name, partition)
                )
        placement = copy_placement(members, count, logged, self._tasks_per_subtopology)
        wanted: set[StorePartition] = set()
        for task, sps in logged.items():
            placed = placement.get(task)
            for sp in sps:
                if sp in active:
                    continue
                if sp in restoring:
                    # Becoming active here: keep serving from the standby until restored.
                    if sp in current:
                        wanted.add(sp)
                    continue
                if (placed is None and sp in current) or (
                    placed is not None and self.instance_id in placed
                ):
                    wanted.add(sp)
        if wanted != current:
            self._standbys.set_wanted(wanted)

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

    def warm_stores(
        self, task: TaskId, committed_inputs: Mapping[TopicPartitionId, int]
    ) -> dict[str, WarmStore]:
        """The committed state of ``task``'s stores that have a standby here, as of
        ``committed_inputs`` (the task's committed input offsets): a task becoming active
        restores from these and the changelogs' tails (docs/runtime/state.md)."""
        return self._standbys.warm_stores(task, committed_inputs)

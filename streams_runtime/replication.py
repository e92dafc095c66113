"""Membership, lag exchange and standby replicas (KIP-535, DESIGN §5).

Every instance runs one :class:`Replicator` thread that

- publishes its :class:`MemberInfo` (query endpoint, active / restoring / standby store
  partitions, per-store-partition lag, heartbeat) as JSON keyed by its instance id to the compacted
  topic ``<application_id>-membership``, every ``membership_interval_ms`` and on every assignment
  change; a clean shutdown publishes a tombstone;
- reads that topic from the beginning with an assign-only consumer into a :class:`MembershipView`
  (an instance is live while its heartbeat is younger than three intervals);
- places standbys: for every logged store partition whose active owner is known, the
  ``num_standby_replicas`` live instances other than the owner with the highest rendezvous hash
  of (store, partition, instance id) keep a copy. Every instance computes the same placement from
  the same view. While no live instance claims a partition (its owner just died, the group has
  not rebalanced yet), existing standbys are kept, never created or dropped: they are what
  serves queries during the failover;
- keeps its standby copies warm with one read_committed consumer of their changelog partitions.

What a standby applies: everything up to the end of the changelog, like Kafka Streams'
standbys. Under exactly-once, read_committed only shows records whose transaction (which also
committed the input offsets that caused them) committed, so a standby is never ahead of the
committed input. Under at-least-once the changelog can hold records caused by input that is not
committed yet (the active crashed before committing its offsets); a standby shows them, just as
the active's own store did before the crash. That is what a query should see (the freshest
state the application computed), and it never reaches a restored *active* store: when a
standby's partition becomes active on the same instance, the task starts from the standby's
*committed* copy (records whose input the application committed, see :class:`StandbyReplica`)
and reads the changelog's tail with the crash-safety rules of ``TaskStateManager``. The standby
keeps serving stale queries until that restore is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from progress_control.protocol import is_control_record
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.query_security import (
    MembershipAuthenticator,
    membership_key,
    security_metrics,
)
from streams_runtime.record import TopicPartitionId
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import (
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueStore,
    SessionStore,
    StoreSpec,
    WarmStore,
    changelog_topic,
    record_source,
)
from streams_runtime.task import TaskId
from streams_runtime.topology import Topology

__all__ = [
    "LagInfo",
    "MemberInfo",
    "MembershipView",
    "Replicator",
    "StandbyReplica",
    "StorePartition",
    "rendezvous_standbys",
]

logger = logging.getLogger(__name__)

MEMBERSHIP_VERSION = 1
LIVENESS_INTERVALS = 3
_BATCH = 1000


@dataclass(frozen=True, order=True)
class StorePartition:
    store: str
    partition: int

    def __str__(self) -> str:
        return f"{self.store}/{self.partition}"


@dataclass(frozen=True)
class LagInfo:
    """How far a local copy of a store partition is behind its changelog.

    ``current_offset``: next changelog offset reflected locally (-1: unknown, e.g. restoring);
    ``end_offset``: the changelog's end (high watermark); ``offset_lag``: records behind;
    ``time_lag_ms``: wall-clock age of the newest applied record while behind, 0 when caught up.
    """

    current_offset: int
    end_offset: int
    offset_lag: int
    time_lag_ms: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "current_offset": self.current_offset,
            "end_offset": self.end_offset,
            "offset_lag": self.offset_lag,
            "time_lag_ms": self.time_lag_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LagInfo:
        return cls(
            int(data["current_offset"]),
            int(data["end_offset"]),
            int(data["offset_lag"]),
            int(data.get("time_lag_ms", 0)),
        )


Partitions = dict[str, tuple[int, ...]]


def _partitions(items: Iterable[StorePartition]) -> Partitions:
    out: dict[str, list[int]] = {}
    for sp in items:
        out.setdefault(sp.store, []).append(sp.partition)
    return {store: tuple(sorted(parts)) for store, parts in sorted(out.items())}


def _store_partitions(partitions: Mapping[str, Iterable[int]]) -> frozenset[StorePartition]:
    return frozenset(StorePartition(s, p) for s, parts in partitions.items() for p in parts)


@dataclass(frozen=True)
class MemberInfo:
    """One instance's membership record (the value in the membership topic, as JSON)::

    {"version": 1, "instance_id": "...", "endpoint": "host:port" | null,
     "heartbeat_ms": <epoch ms>, "interval_ms": 1000,
     "active": {"store": [0, 2]}, "restoring": {...}, "standby": {...},
     "lags": {"store": {"0": {"current_offset": .., "end_offset": .., "offset_lag": ..,
                              "time_lag_ms": ..}}}}
    """

    instance_id: str
    endpoint: str | None
    heartbeat_ms: int
    interval_ms: int
    active: Partitions = field(default_factory=dict)
    restoring: Partitions = field(default_factory=dict)
    standby: Partitions = field(default_factory=dict)
    lags: dict[str, dict[int, LagInfo]] = field(default_factory=dict)

    def live(self, now_ms: int) -> bool:
        """Whether the heartbeat is younger than three publishing intervals."""
        return now_ms - self.heartbeat_ms < LIVENESS_INTERVALS * self.interval_ms

    def role(self, sp: StorePartition) -> str | None:
        """``active``, ``standby``, ``restoring`` or ``None`` for ``sp`` on this instance (a
        standby whose partition is restoring as active here is still reported as a standby:
        it keeps serving until the restore is done)."""
        for role, parts in (
            ("active", self.active),
            ("standby", self.standby),
            ("restoring", self.restoring),
        ):
            if sp.partition in parts.get(sp.store, ()):
                return role
        return None

    def lag(self, sp: StorePartition) -> LagInfo | None:
        return self.lags.get(sp.store, {}).get(sp.partition)

    def owns(self, sp: StorePartition) -> bool:
        """Whether this instance is ``sp``'s active (running or restoring)."""
        return sp.partition in self.active.get(sp.store, ()) or sp.partition in self.restoring.get(
            sp.store, ()
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": MEMBERSHIP_VERSION,
                "instance_id": self.instance_id,
                "endpoint": self.endpoint,
                "heartbeat_ms": self.heartbeat_ms,
                "interval_ms": self.interval_ms,
                "active": {s: list(p) for s, p in self.active.items()},
                "restoring": {s: list(p) for s, p in self.restoring.items()},
                "standby": {s: list(p) for s, p in self.standby.items()},
                "lags": {
                    store: {str(p): lag.to_json() for p, lag in sorted(parts.items())}
                    for store, parts in sorted(self.lags.items())
                },
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> MemberInfo:
        """Parse a membership record; ``ValueError`` when it is not one of this version."""
        try:
            data = json.loads(raw)
            if data["version"] != MEMBERSHIP_VERSION:
                raise ValueError(f"unsupported membership version {data['version']!r}")

            def parts(value: Mapping[str, Iterable[int]]) -> Partitions:
                return {str(s): tuple(sorted(int(p) for p in ps)) for s, ps in value.items()}

            endpoint = data.get("endpoint")
            return cls(
                instance_id=str(data["instance_id"]),
                endpoint=None if endpoint is None else str(endpoint),
                heartbeat_ms=int(data["heartbeat_ms"]),
                interval_ms=int(data["interval_ms"]),
                active=parts(data.get("active", {})),
                restoring=parts(data.get("restoring", {})),
                standby=parts(data.get("standby", {})),
                lags={
                    str(store): {int(p): LagInfo.from_json(lag) for p, lag in lags.items()}
                    for store, lags in data.get("lags", {}).items()
                },
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a membership record: {exc}") from exc


class MembershipView:
    """The latest membership record per instance (thread-safe).

    A record older than the one held for its instance (by heartbeat) is refused: a replayed
    record, even a validly signed one, cannot turn an instance's view back to an earlier
    assignment. (Heartbeats are the publishing instance's wall clock, so only that instance's
    own records are compared with each other.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, MemberInfo] = {}

    def update(self, instance_id: str, info: MemberInfo | None, left_ms: int | None = None) -> bool:
        """Take ``info`` for ``instance_id`` (``None``: it left, at ``left_ms`` when known);
        ``False`` when refused as older than the record held."""
        with self._lock:
            current = self._members.get(instance_id)
            if info is None:
                if current is not None and left_ms is not None and left_ms < current.heartbeat_ms:
                    return False
                self._members.pop(instance_id, None)
                return True
            if current is not None and info.heartbeat_ms < current.heartbeat_ms:
                return False
            self._members[instance_id] = info
            return True

    def members(self) -> dict[str, MemberInfo]:
        with self._lock:
            return dict(self._members)

    def live(self, now_ms: int | None = None) -> dict[str, MemberInfo]:
        """Members whose heartbeat is recent (see :meth:`MemberInfo.live`)."""
        now = _now_ms() if now_ms is None else now_ms
        return {i: m for i, m in self.members().items() if m.live(now)}


def _score(sp: StorePartition, instance_id: str) -> int:
    digest = hashlib.sha256(f"{sp.store}\0{sp.partition}\0{instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def rendezvous_standbys(sp: StorePartition, candidates: Iterable[str], count: int) -> list[str]:
    """The ``count`` instances among ``candidates`` (the live instances minus the active owner)
    that keep a standby of ``sp``: highest rendezvous (highest-random-weight) hash first. Pure
    and deterministic; an instance leaving only moves the partitions it held."""
    if count <= 0:
        return []
    ranked = sorted(set(candidates), key=lambda i: (_score(sp, i), i), reverse=True)
    return ranked[:count]


def standby_placement(
    sp: StorePartition, members: Mapping[str, MemberInfo], count: int
) -> list[str] | None:
    """Instances that should hold a standby of ``sp`` given the live ``members``; ``None``
    while no member claims ``sp`` as active or restoring (keep what is there)."""
    owners = {i for i, m in members.items() if m.owns(sp)}
    if not owners:
        return None
    return rendezvous_standbys(sp, set(members) - owners, count)


@dataclass(frozen=True)
class _PendingRecord:
    source: TopicPartitionId
    source_offset: int
    timestamp: int
    value: bytes | None


class StandbyReplica:
    """A warm in-memory copy of one store partition, fed from its changelog partition.

    ``store`` holds everything read (what stale queries see). For a promotion it also keeps
    what a restore would produce (DESIGN §5): ``committed`` has the latest changelog value per
    key among the records whose input is known to be committed, ``pending`` the newer records
    per key whose input is not (yet). :meth:`fold` moves pending records over as the
    application's committed offsets advance; :meth:`warm_store` hands the result to a task.
    """

    def __init__(self, spec: StoreSpec, sp: StorePartition, topic: str) -> None:
        self.spec = spec
        self.sp = sp
        self.tp = TopicPartitionId(topic, sp.partition)
        self.store: KeyValueStore | SessionStore
        if spec.kind == "key_value":
            self.store = KeyValueStore(spec.name, sp.partition, InMemoryKeyValueEngine(), None)
        else:
            self.store = SessionStore(spec.name, sp.partition, InMemorySessionEngine(), None)
        self.next_offset = -1  # after the last record read (applied or skipped)
        self.eof_offset = -1
        self.end_offset = -1  # the changelog's end as of the last fetch (-1: not known yet)
        self.last_applied_ms = -1
        self.committed: dict[bytes, bytes] = {}
        self.pending: dict[bytes, list[_PendingRecord]] = {}
        self.committed_inputs: dict[TopicPartitionId, int] = {}

    def apply(self, msg: Message) -> None:
        offset = msg.offset() or 0
        self.next_offset = offset + 1
        key = msg.key()
        if key is None or (msg.headers() and is_control_record(msg)):
            return
        value = msg.value()
        try:
            self.store.restore(key, value)
        except ValueError:
            logger.warning(
                "standby %(store)s/%(partition)d: malformed changelog record at %(offset)d",
                {"store": self.sp.store, "partition": self.sp.partition, "offset": offset},
            )
            return
        self.last_applied_ms = msg.timestamp()[1]
        source = record_source(msg)
        if source is None or self._input_committed(*source):
            self._commit(key, value)
            self.pending.pop(key, None)
        else:
            pending = _PendingRecord(source[0], source[1], self.last_applied_ms, value)
            self.pending.setdefault(key, []).append(pending)

    def _input_committed(self, source: TopicPartitionId, offset: int) -> bool:
        committed = self.committed_inputs.get(source)
        return committed is not None and offset < committed

    def _commit(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.committed.pop(key, None)
        else:
            self.committed[key] = value

    def fold(self, committed_inputs: Mapping[TopicPartitionId, int]) -> None:
        """Take in the application's committed input offsets (next offset per partition): a
        key's newest pending record whose input is now committed becomes its committed value,
        and the pending records before it are dropped, as restore would."""
        for tp, offset in committed_inputs.items():
            self.committed_inputs[tp] = max(offset, self.committed_inputs.get(tp, offset))
        for key, records in list(self.pending.items()):
            last = max(
                (
                    i
                    for i, r in enumerate(records)
                    if self._input_committed(r.source, r.source_offset)
                ),
                default=-1,
            )
            if last < 0:
                continue
            self._commit(key, records[last].value)
            if last == len(records) - 1:
                del self.pending[key]
            else:
                self.pending[key] = records[last + 1 :]

    def pending_sources(self) -> set[TopicPartitionId]:
        return {r.source for records in self.pending.values() for r in records}

    def warm_store(self, committed_inputs: Mapping[TopicPartitionId, int]) -> WarmStore:
        """What a restore at ``committed_inputs`` would produce up to :meth:`position`."""
        self.fold(committed_inputs)
        skipped: dict[bytes, dict[TopicPartitionId, int]] = {}
        for key, records in self.pending.items():
            sources = skipped.setdefault(key, {})
            for r in records:
                sources[r.source] = max(sources.get(r.source, 0), r.timestamp)
        return WarmStore(self.position(), dict(self.committed), skipped)

    def position(self) -> int:
        return max(self.next_offset, self.eof_offset)

    def lag(self, now_ms: int) -> LagInfo:
        """The lag as of the replicator's last fetch. Until the replica has read something
        (a record or the end) since it was assigned, it is behind by the whole changelog, or
        by an unknown amount (-1) while the end is not known either: an empty store must
        never look caught up."""
        position, end = self.position(), self.end_offset
        if position < 0:
            return LagInfo(position, end, end if end > 0 else -1, -1)
        if end < 0:
            return LagInfo(position, end, -1, -1)
        offset_lag = max(0, end - position)
        time_lag = 0
        if offset_lag:
            time_lag = max(0, now_ms - self.last_applied_ms) if self.last_applied_ms >= 0 else -1
        return LagInfo(position, end, offset_lag, time_lag)

    def close(self) -> None:
        self.store.engine.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


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
            logger.warning(
                "membership records are not authenticated (no membership_secret and no "
                "query_token): anyone who can write %(topic)s can redirect forwarded queries",
                {"topic": settings.membership_topic},
            )
        self._active_tasks = active_tasks
        self._restoring_tasks = restoring_tasks
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
        self._standby_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._offsets_lock = threading.Lock()
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
            {**common, "group.id": f"{settings.application_id}-membership-{suffix}"}
        )
        self._changelog_consumer = Consumer(
            {
                **common,
                "group.id": f"{settings.application_id}-standby-{suffix}",
                "isolation.level": "read_committed",
                "enable.partition.eof": "true",
            }
        )
        # The application's group id, to read its committed offsets (it never subscribes, so
        # it never joins the group).
        self._offsets_consumer = Consumer({**common, "group.id": settings.application_id})
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
            headers = None if self._auth is None else self._auth.headers(key, None, _now_ms())
            self._producer.produce(self.settings.membership_topic, key=key, headers=headers)
            self._producer.flush(5)
        except (KafkaException, BufferError) as exc:
            logger.warning(
                "membership tombstone not sent: %(error)s",
                {"topic": self.settings.membership_topic, "error": str(exc)},
            )
        for consumer in (
            self._membership_consumer,
            self._changelog_consumer,
            self._offsets_consumer,
        ):
            with contextlib.suppress(RuntimeError):
                consumer.close()
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
                if error.code() != KafkaError._PARTITION_EOF:
                    logger.warning(
                        "membership consumer: %(error)s",
                        {"topic": self.settings.membership_topic, "error": str(error)},
                    )
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
        return MemberInfo(
            instance_id=self.instance_id,
            endpoint=self.endpoint,
            heartbeat_ms=_now_ms(),
            interval_ms=self.settings.membership_interval_ms,
            active=_partitions(active),
            restoring=_partitions(restoring),
            standby=_partitions(standby),
            lags={
                store: {sp.partition: lag for sp, lag in lags.items() if sp.store == store}
                for store in sorted({sp.store for sp in lags})
            },
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
        for sp, lag in ((sp, info.lag(sp)) for sp in _store_partitions(info.standby)):
            if lag is not None:
                self.metrics.standby_lag(sp.store, str(sp.partition)).set(lag.offset_lag)
        return info

    # -- lags ---------------------------------------------------------------------------------

    def end_offset(self, tp: TopicPartitionId) -> int:
        """The changelog partition's high watermark, asked from the broker (-1 when unknown)."""
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            with self._offsets_lock:
                return int(self._offsets_consumer.get_watermark_offsets(ktp, timeout=5)[1])
        except (KafkaException, RuntimeError) as exc:
            logger.debug(
                "no end offset for %(topic)s[%(partition)d]: %(error)s",
                {"topic": tp.topic, "partition": tp.partition, "error": str(exc)},
            )
            return -1

    def changelog_tp(self, sp: StorePartition) -> TopicPartitionId:
        return TopicPartitionId(self.stores[sp.store][2], sp.partition)

    def local_lags(
        self,
        active: Iterable[StorePartition] | None = None,
        restoring: Iterable[StorePartition] | None = None,
        standby: Iterable[StorePartition] | None = None,
    ) -> dict[StorePartition, LagInfo]:
        """Lag of every local copy: a running active is the changelog's writer (lag 0, current =
        end); a restoring one is reported as behind by the whole changelog (its progress is
        internal to the restore); a standby from its read position."""
        if active is None:
            active = self._local_partitions(self._active_tasks())
        if restoring is None:
            restoring = self._local_partitions(self._restoring_tasks())
        now = _now_ms()
        lags: dict[StorePartition, LagInfo] = {}
        active = set(active)
        for sp in active:
            end = self.end_offset(self.changelog_tp(sp))
            lags[sp] = LagInfo(end, end, 0, 0)
        for sp in set(restoring) - active:
            end = self.end_offset(self.changelog_tp(sp))
            lags[sp] = LagInfo(-1, end, max(end, 0), -1)
        with self._standby_lock:
            replicas = dict(self.standbys)
        wanted = None if standby is None else set(standby)
        for sp, replica in replicas.items():
            if sp in active or (wanted is not None and sp not in wanted):
                continue
            lags[sp] = replica.lag(now)
        return lags

    def standby_lag(self, sp: StorePartition) -> LagInfo | None:
        """The lag of the local standby of ``sp`` (``None``: there is none). Never asks the
        broker: queries must not wait on Kafka clients the replicator thread is using."""
        with self._standby_lock:
            replica = self.standbys.get(sp)
        return None if replica is None else replica.lag(_now_ms())

    # -- standbys -----------------------------------------------------------------------------

    def _place_standbys(self) -> None:
        count = self.settings.num_standby_replicas
        if count <= 0:
            return
        active = self._local_partitions(self._active_tasks())
        restoring = self._local_partitions(self._restoring_tasks())
        members = self.view.live()
        # Our own record in the view may be a moment old: use the current assignment.
        members[self.instance_id] = MemberInfo(
            self.instance_id,
            self.endpoint,
            _now_ms(),
            self.settings.membership_interval_ms,
            active=_partitions(active),
            restoring=_partitions(restoring - active),
        )
        with self._standby_lock:
            current = set(self.standbys)
        wanted: set[StorePartition] = set()
        for name, (_spec, _sub, _topic, partitions) in self.stores.items():
            for partition in range(partitions):
                sp = StorePartition(name, partition)
                if sp in active:
                    continue
                if sp in restoring:
                    # Becoming active here: keep serving from the standby until restored.
                    if sp in current:
                        wanted.add(sp)
                    continue
                placement = standby_placement(sp, members, count)
                if (placement is None and sp in current) or (
                    placement is not None and self.instance_id in placement
                ):
                    wanted.add(sp)
        if wanted != current:
            self._set_standbys(wanted)

    def _fold_standbys(self) -> None:
        """Give the standbys the application's committed offsets of the inputs behind their
        pending records (see :class:`StandbyReplica`), so those do not pile up."""
        with self._standby_lock:
            sources = set().union(*(r.pending_sources() for r in self.standbys.values()))
        if not sources:
            return
        try:
            with self._offsets_lock:
                offsets = self._offsets_consumer.committed(
                    [TopicPartition(tp.topic, tp.partition) for tp in sorted(sources)], timeout=5
                )
        except KafkaException as exc:  # the next interval asks again
            logger.debug("committed offsets not read: %(error)s", {"error": str(exc)})
            return
        committed = {
            TopicPartitionId(tp.topic, tp.partition): tp.offset
            for tp in offsets
            if tp.error is None and tp.offset >= 0
        }
        with self._standby_lock:
            for replica in self.standbys.values():
                replica.fold(committed)

    def warm_stores(
        self, task: TaskId, committed_inputs: Mapping[TopicPartitionId, int]
    ) -> dict[str, WarmStore]:
        """The committed state of ``task``'s stores that have a standby here, as of
        ``committed_inputs`` (the task's committed input offsets): a task becoming active
        restores from these and the changelogs' tails (DESIGN §5)."""
        warm: dict[str, WarmStore] = {}
        with self._standby_lock:
            for name, (_spec, sub, _topic, _count) in self.stores.items():
                replica = self.standbys.get(StorePartition(name, task.partition))
                if sub == task.subtopology and replica is not None and replica.position() >= 0:
                    warm[name] = replica.warm_store(committed_inputs)
        return warm

    def _set_standbys(self, wanted: set[StorePartition]) -> None:
        with self._standby_lock:
            for sp in set(self.standbys) - wanted:
                logger.info(
                    "standby %(store)s/%(partition)d dropped",
                    {"store": sp.store, "partition": sp.partition},
                )
                self.standbys.pop(sp).close()
                self.metrics.standby_lag(sp.store, str(sp.partition)).set(0)
            for sp in wanted - set(self.standbys):
                spec, _sub, topic, _count = self.stores[sp.store]
                logger.info(
                    "standby %(store)s/%(partition)d created",
                    {"store": sp.store, "partition": sp.partition},
                )
                self.standbys[sp] = StandbyReplica(spec, sp, topic)
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
            # Cached by the consumer from its fetch responses: no broker round trip.
            for replica in by_tp.values():
                ktp = TopicPartition(replica.tp.topic, replica.tp.partition)
                high = self._changelog_consumer.get_watermark_offsets(ktp, cached=True)[1]
                if high >= 0 and replica.position() >= 0:
                    replica.end_offset = int(high)

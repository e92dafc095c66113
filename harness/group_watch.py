"""One application's consumer group seen from outside, for the scale-out benchmark
(``bench/scale_out.py``): which instance holds which task, where the standbys are, when the
group's committed offsets moved, and whether an instance failed.

Kafka Streams tests read the same from ``KafkaStreams.metadataForLocalThreads()`` inside the
process; here every instance is a process of its own, so the group is read as any operator reads
it: the coordinator's assignment (``describe_consumer_groups``, either group protocol: classic or
KIP-848), the committed offsets (``list_consumer_group_offsets``), the runtime's membership topic
(standbys) and each process's exit code and log.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.session_cluster.app import INPUT_PARTITIONS
from harness.session_cluster.cluster import STABLE_POLLS, GroupView, SessionCluster
from harness.session_cluster.config import ClusterError, TopicPartitionKey
from harness.session_cluster.instance import Instance
from harness.session_cluster.reader import read_topic
from harness.session_cluster.writer import ClickWriter
from streams_runtime.cluster.membership import MemberInfo
from streams_runtime.topology import Topology

__all__ = [
    "Offsets",
    "OffsetsWatch",
    "TaskKey",
    "drain",
    "failure_of",
    "log_problems",
    "note_failures",
    "processed_by_subtopology",
    "standby_stores",
    "task_owners",
    "tasks_per_instance",
    "wait_reowned",
]

TaskKey = tuple[int, int]
"""A task: (sub-topology, partition)."""
Offsets = dict[TopicPartitionKey, int]

_ERROR_STATE = re.compile(r"streams app \S+: ERROR")
_PROBLEM = re.compile(
    r"\[(?:error|critical)\s*\]|: ERROR\b|Traceback|KafkaError|Failed to seek"
    r"|\w(?:Error|Exception): "
)
"""Log lines worth showing: error-level records, the ERROR state, tracebacks and their last
line, librdkafka errors."""


def task_owners(view: GroupView, topology: Topology) -> dict[TaskKey, str]:
    """The client id holding each task of ``topology`` in ``view``: task (s, p) is on the
    member that owns partition p of every source topic of sub-topology s (tasks whose inputs
    are split between members, or unowned, are left out)."""
    owner_of = {tp: client for client, tps in view.assignment.items() for tp in tps}
    owners: dict[TaskKey, str] = {}
    for sub in topology.subtopologies:
        for p in range(INPUT_PARTITIONS):
            holders = {owner_of.get((topic, p)) for topic in sub.source_topics}
            if len(holders) == 1 and (holder := holders.pop()) is not None:
                owners[(sub.id, p)] = holder
    return owners


def tasks_per_instance(
    view: GroupView, topology: Topology, clients: Sequence[str]
) -> dict[int, list[int]]:
    """Per sub-topology, how many of its tasks each of ``clients`` holds (in that order)."""
    owners = task_owners(view, topology)
    return {
        sub.id: [
            sum(1 for (s, _), c in owners.items() if s == sub.id and c == client)
            for client in clients
        ]
        for sub in topology.subtopologies
    }


def standby_stores(
    bootstrap: str, application_id: str
) -> dict[str, tuple[int, frozenset[tuple[str, int]]]]:
    """Per runtime instance id, its latest membership record's heartbeat (epoch ms) and the
    store partitions (store, partition) it keeps standby copies of; instances that left (a
    tombstone) are left out. The runtime places a task's stores together, but an instance may
    report one store of a task before another (a membership record is a moment's view)."""
    topic = f"{application_id}-membership"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return {}
    latest: dict[str, MemberInfo | None] = {}
    for msg in read_topic(bootstrap, topic, len(metadata.partitions), timeout_s=30):
        key, value = (msg.key() or b"").decode(), msg.value()
        latest[key] = None if value is None else MemberInfo.from_json(value)
    return {
        instance_id: (
            info.heartbeat_ms,
            frozenset((store, p) for store, parts in info.standby.items() for p in parts),
        )
        for instance_id, info in latest.items()
        if info is not None
    }


class OffsetsWatch:
    """Polls the group's committed offsets of ``topics`` every ``interval_s`` in a thread and
    keeps each answer with the time it came (``time.monotonic()``).

    Offsets are read with ``require_stable=False``: the last committed ones, whatever
    transaction is still open (a SIGKILLed instance's stays open until its transaction
    timeout). A partition never committed reads -1001."""

    def __init__(
        self, bootstrap: str, group: str, topics: Sequence[str], interval_s: float = 0.2
    ) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._group = group
        self._partitions = [TopicPartition(t, p) for t in topics for p in range(INPUT_PARTITIONS)]
        self._interval_s = interval_s
        self._history: list[tuple[float, Offsets]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offsets-watch", daemon=True)

    def __enter__(self) -> OffsetsWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(30)

    def read(self) -> Offsets | None:
        """The committed offsets now; ``None`` when they cannot be read."""
        request = ConsumerGroupTopicPartitions(self._group, list(self._partitions))
        try:
            futures = self._admin.list_consumer_group_offsets([request], require_stable=False)
            result = futures[self._group].result(10)
        except (KafkaException, TimeoutError):
            return None
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.error is None
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            offsets = self.read()
            if offsets is not None:
                with self._lock:
                    self._history.append((time.monotonic(), offsets))
            self._stop.wait(self._interval_s)

    def first(self, condition: Callable[[Offsets], bool], after: float = 0.0) -> float | None:
        """When, after ``after``, an answer first met ``condition`` (``None``: none yet)."""
        with self._lock:
            history = list(self._history)
        return next((at for at, offsets in history if at >= after and condition(offsets)), None)

    def first_past(self, tp: TopicPartitionKey, offset: int, after: float) -> float | None:
        """When, after ``after``, the committed offset of ``tp`` first passed ``offset``."""
        return self.first(lambda offsets: offsets.get(tp, -1) > offset, after)

    def at(self, when: float) -> Offsets | None:
        """The first answer that came at ``when`` or later (``None``: none yet)."""
        with self._lock:
            return next((offsets for at, offsets in self._history if at >= when), None)

    def latest(self) -> Offsets | None:
        with self._lock:
            return self._history[-1][1] if self._history else None


def failure_of(instance: Instance) -> str | None:
    """Why ``instance``, meant to be running, failed: it exited, or its log says its app went
    to ``ERROR`` (the runtime logs ``streams app <id>: ERROR`` before its ``run`` raises);
    ``None`` when neither."""
    code = instance.process.poll()
    if code is not None:
        return f"exited with {code}"
    try:
        text = instance.log_path.read_text(errors="replace")
    except OSError:
        return None
    return "state ERROR" if _ERROR_STATE.search(text) else None


def log_problems(instance: Instance, show: int = 4) -> list[str]:
    """The first ``show`` log lines of ``instance`` that name an error or an exception."""
    try:
        lines = instance.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[-300:] for line in lines if _PROBLEM.search(line)][:show]


def note_failures(cluster: SessionCluster, failed: dict[str, str]) -> bool:
    """Add to ``failed`` (name -> :func:`failure_of`) the running instances that failed; mark
    those that exited as gone, so the cluster's waits go on without them. Whether any is new."""
    new = False
    for instance in cluster.live():
        why = failure_of(instance)
        if why is None:
            continue
        if instance.name not in failed:
            failed[instance.name] = why
            new = True
        if instance.process.poll() is not None:
            cluster.kill(instance)
    return new


def wait_reowned(
    cluster: SessionCluster,
    topics: Sequence[str],
    since: float,
    failed: dict[str, str],
    timeout_s: float,
) -> float | None:
    """Seconds from ``since`` (monotonic) to the first of :data:`STABLE_POLLS` polls, 0.2 s
    apart, with the same assignment, the group stable, the running instances its only members
    and every partition of ``topics`` owned; ``None`` after ``timeout_s``. Instances that fail
    meanwhile are noted in ``failed`` (see :func:`note_failures`)."""
    wanted = {(t, p) for t in topics for p in range(INPUT_PARTITIONS)}
    streak: tuple[float, object] | None = None
    count = 0
    while time.monotonic() < since + timeout_s:
        note_failures(cluster, failed)
        polled = time.monotonic()
        view = cluster.group()
        members = {i.client_id for i in cluster.live()}
        if (
            view is None
            or not view.stable
            or set(view.assignment) != members
            or not set().union(*view.assignment.values()) >= wanted
        ):
            streak, count = None, 0
        elif streak is not None and streak[1] == view.assignment:
            count += 1
        else:
            streak, count = (polled, view.assignment), 1
        if streak is not None and count >= STABLE_POLLS:
            return streak[0] - since
        time.sleep(0.2)
    return None


def drain(cluster: SessionCluster, writer: ClickWriter, failed: dict[str, str]) -> None:
    """:meth:`SessionCluster.wait_processed`, going on without instances that fail meanwhile
    (noted in ``failed``)."""
    while True:
        if not cluster.live():
            raise ClusterError("no instance left")
        try:
            cluster.wait_processed(writer)
            return
        except ClusterError:
            if not note_failures(cluster, failed):
                raise


def processed_by_subtopology(instance: Instance) -> dict[int, float]:
    """``streams_records_processed_total`` of ``instance`` per sub-topology, as last scraped
    (label ``task`` is ``<sub-topology>_<partition>``)."""
    found: dict[int, float] = {}
    for key, value in instance.last_metrics.items():
        if key.startswith("streams_records_processed_total{task="):
            sub = int(key.split("task=", 1)[1].split("_", 1)[0])
            found[sub] = found.get(sub, 0.0) + value
    return found

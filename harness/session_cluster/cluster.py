"""The runtime processes of one session application (:class:`SessionCluster`): start, stop,
kill, pause, resume, replace and restart them, read their consumer group, offsets and metrics,
and wait for conditions with deadlines; and the topics they read and write
(:func:`create_topics`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, MemberDescription, NewTopic

from harness.session_cluster.app import INPUT_PARTITIONS
from harness.session_cluster.config import ClusterConfig, ClusterError, TopicPartitionKey
from harness.session_cluster.instance import Instance
from harness.session_cluster.reader import data_records, read_topic
from harness.session_cluster.writer import ClickWriter
from harness.waiting import wait_for

T = TypeVar("T")

STABLE_POLLS = 3
STARTUP_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class GroupView:
    """The consumer group as the coordinator describes it."""

    stable: bool
    assignment: dict[str, frozenset[TopicPartitionKey]]  # client id -> partitions


class SessionCluster:
    """Runtime processes of one application (see :mod:`harness.session_cluster`), each in its
    own slot (state dir); replacing or restarting a slot keeps its state dir, as a StatefulSet
    pod."""

    def __init__(self, config: ClusterConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.instances: list[Instance] = []
        """Every process started, in order (the running ones: :meth:`live`)."""
        self._admin = AdminClient({"bootstrap.servers": config.bootstrap})
        self.retired_late_drops = 0.0
        self.retired_ticks = 0.0
        self.unscraped: list[str] = []
        """Instances whose last counters are unknown (SIGKILLed after their last scrape)."""

    # -- processes ------------------------------------------------------------------------------

    def start(self, slot: int) -> Instance:
        generation = sum(1 for i in self.instances if i.slot == slot)
        instance = Instance(self.config, slot, generation, self.workdir)
        self.instances.append(instance)
        return instance

    def start_all(self, count: int) -> list[Instance]:
        return [self.start(slot) for slot in range(count)]

    def live(self) -> list[Instance]:
        """Instances started and neither killed nor stopped (paused ones included)."""
        return [i for i in self.instances if i.state in ("running", "paused")]

    def slot(self, slot: int) -> Instance:
        return next(i for i in reversed(self.instances) if i.slot == slot)

    def _retire(self, instance: Instance) -> None:
        instance.scrape()
        self.retired_late_drops += instance.total("streams_dropped_records_total", reason="late")
        self.retired_ticks += instance.total("streams_progress_ticks_total")

    def kill(self, instance: Instance) -> None:
        """Scrape, then SIGKILL (whatever it counts after the scrape is lost)."""
        self._retire(instance)
        self.unscraped.append(instance.name)
        instance.kill()

    def stop(self, instance: Instance) -> None:
        """Scrape, then SIGTERM and wait for the exit (it commits and leaves the group)."""
        self.begin_stop(instance)
        instance.wait_stopped()

    def begin_stop(self, instance: Instance) -> None:
        """:meth:`stop` without waiting for the exit (see :meth:`Instance.wait_stopped`)."""
        if instance.state == "paused":
            instance.resume()
        self._retire(instance)
        instance.terminate()

    def stop_all(self) -> None:
        for instance in self.live():
            self.begin_stop(instance)
        for instance in self.instances:
            if instance.process.returncode is None:
                instance.wait_stopped()

    def check_alive(self) -> None:
        for instance in self.instances:
            instance.check_alive()

    # -- waiting ----------------------------------------------------------------------------------

    def wait(
        self,
        condition: Callable[[], T | None],
        timeout_s: float,
        what: str,
        *,
        interval_s: float = 0.5,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value; :class:`ClusterError` after
        ``timeout_s`` or as soon as an instance that was not stopped on purpose exits."""

        def checked() -> T | None:
            self.check_alive()
            return condition()

        try:
            return wait_for(checked, timeout_s=timeout_s, interval_s=interval_s, message=what)
        except AssertionError as exc:
            tails = {i.name: i.log_tail(3) for i in self.live()}
            raise ClusterError(f"{exc}; logs: {tails}") from None

    def group(self) -> GroupView | None:
        """The group's state and assignment by client id; ``None`` when it cannot be read."""
        group_id = self.config.application_id
        try:
            description = self._admin.describe_consumer_groups([group_id])[group_id].result(10)
        except (KafkaException, TimeoutError):  # no answer in 10 s, e.g. a broker just started
            return None
        # An instance with lanes (streams_runtime/processing/lanes.py) is two members: its
        # partitions are both's. The lanes' placeholder topic is no task's.
        placeholder = f"{group_id}-lanes"
        assignment: dict[str, frozenset[TopicPartitionKey]] = {}
        for m in description.members:
            client = self._client_of(m)
            assignment[client] = assignment.get(client, frozenset()) | {
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else [])
                if tp.topic != placeholder
            }
        return GroupView(description.state == ConsumerGroupState.STABLE, assignment)

    def _client_of(self, member: MemberDescription) -> str:
        """The client id of the instance ``member`` is: its own client id when it is one of
        ours, else (a static member, classic or KIP-848, whose client id is another) the
        instance whose runtime instance id its ``group.instance.id`` names."""
        if any(i.client_id == member.client_id for i in self.instances):
            return member.client_id
        static = member.group_instance_id or ""
        for instance in reversed(self.instances):  # a slot's latest start first
            instance_id = instance.runtime_instance_id
            if static and instance_id and instance_id in static:
                return instance.client_id
        return member.client_id

    def wait_stable(self, timeout_s: float = STARTUP_TIMEOUT_S) -> GroupView:
        """Until the group is stable with exactly the running instances as members, each
        owning something, every source partition owned, the same way in
        :data:`STABLE_POLLS` polls in a row."""
        sources = self.source_partitions()
        streak: list[GroupView] = []

        def settled() -> GroupView | None:
            view = self.group()
            running = {i.client_id for i in self.live() if i.state == "running"}
            owned = set().union(*view.assignment.values()) if view else set()
            ok = (
                view is not None
                and view.stable
                and set(view.assignment) == running
                and all(view.assignment.values())
                and owned >= sources
            )
            if not ok or (streak and streak[-1].assignment != view.assignment):  # type: ignore[union-attr]
                streak.clear()
            if ok and view is not None:
                streak.append(view)
            return streak[-1] if len(streak) >= STABLE_POLLS else None

        return self.wait(settled, timeout_s, "a stable group with every partition owned")

    def source_partitions(self) -> set[TopicPartitionKey]:
        """The input's and the repartition topic's partitions (the topics the group reads)."""
        topics = [self.config.source]
        repartition = self.repartition_topic(wait=False)
        if repartition:
            topics.append(repartition)
        return {(t, p) for t in topics for p in range(INPUT_PARTITIONS)}

    def repartition_topic(self, *, wait: bool = True) -> str:
        """The internal repartition topic (named after the application id)."""

        def find() -> str:
            topics = self._admin.list_topics(timeout=10).topics
            prefix = self.config.application_id
            names = [t for t in topics if t.startswith(prefix) and t.endswith("-repartition")]
            return names[0] if len(names) == 1 else ""

        return self.wait(find, 120, "the repartition topic") if wait else find()

    def input_partitions_of(self, instance: Instance, view: GroupView) -> list[int]:
        """The input partitions ``instance`` owns in ``view``."""
        owned = view.assignment.get(instance.client_id, frozenset())
        return sorted(p for t, p in owned if t == self.config.source)

    def committed(self, topic: str) -> dict[int, int]:
        """The group's committed offsets on ``topic`` (stable ones: no pending transaction)."""
        request = ConsumerGroupTopicPartitions(
            self.config.application_id,
            [TopicPartition(topic, p) for p in range(INPUT_PARTITIONS)],
        )
        futures = self._admin.list_consumer_group_offsets([request], require_stable=True)
        result = futures[self.config.application_id].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions or []}

    def wait_committed(self, topic: str, targets: dict[int, int], timeout_s: float) -> None:
        """Until the group committed at least ``targets[p]`` on each partition ``p``."""

        def reached() -> bool:
            try:
                committed = self.committed(topic)
            except KafkaException:
                return False
            return all(committed.get(p, -1) >= target for p, target in targets.items())

        self.wait(reached, timeout_s, f"offsets {targets} committed on {topic}")

    def wait_processed(self, writer: ClickWriter, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Until every input record written so far went through both sub-topologies: the
        input committed past it, then the repartition topic past every data record on it
        (the results of a processed record are committed with its offset)."""
        self.wait_committed(self.config.source, writer.end_offsets(), timeout_s)
        repartition = self.repartition_topic()
        records = read_topic(self.config.bootstrap, repartition, INPUT_PARTITIONS)
        targets: dict[int, int] = {}
        for msg in data_records(records):
            targets[msg.partition() or 0] = (msg.offset() or 0) + 1
        self.wait_committed(repartition, targets, timeout_s)

    # -- metrics --------------------------------------------------------------------------------

    def late_drops(self) -> float:
        """Records dropped as late, over every instance: the running ones scraped now, the
        stopped and killed ones as last scraped."""
        live = 0.0
        for instance in self.live():
            instance.scrape()
            live += instance.total("streams_dropped_records_total", reason="late")
        return live + self.retired_late_drops

    def ticks_sent(self) -> float:
        """``streams_progress_ticks`` over every instance (as :meth:`late_drops`)."""
        live = 0.0
        for instance in self.live():
            instance.scrape()
            live += instance.total("streams_progress_ticks_total")
        return live + self.retired_ticks

    def logs(self, lines: int = 5) -> dict[str, list[str]]:
        return {i.name: i.log_tail(lines) for i in self.instances}


def create_topics(bootstrap: str, *names: str) -> None:
    """Create ``names`` with :data:`INPUT_PARTITIONS` partitions each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(n, num_partitions=INPUT_PARTITIONS, replication_factor=1) for n in names]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=30)

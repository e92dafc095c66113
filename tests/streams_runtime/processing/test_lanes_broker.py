"""Lanes against the real group (streams_runtime/processing/lanes.py): instances of
:class:`ConsumerLanes` over three sub-topologies (6 tasks; 6 tasks reading two co-partitioned
topics; 4 tasks) join one KIP-848 group; once settled, every instance owns exactly the tasks
:func:`~streams_runtime.cluster.assignment.task_owners` computes for lanes (per sub-topology and
in total balanced), each task's partitions through one lane, as instances join and leave."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from streams_runtime.cluster.assignment import GroupMember, task_owners
from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.record import TaskId
from tests.helpers import unique_name, wait_for

pytestmark = pytest.mark.broker

PARTITIONS = {0: 6, 1: 6, 2: 4}
SET = AlterConfigOpType.SET


class _Instance:
    def __init__(
        self, name: str, bootstrap: str, group: str, topics: dict[int, tuple[str, ...]]
    ) -> None:
        self.name = name
        self.owned: dict[Consumer, set[tuple[str, int]]] = {}
        self.lanes = ConsumerLanes(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "group.remote.assignor": "range",
                "client.id": name,
            },
            lanes=True,
            instance_id=name,
            subtopology_topics=topics,
            partitions=PARTITIONS,
            placeholder=f"{group}-lanes",
            admin_config={"bootstrap.servers": bootstrap},
        )
        self.lanes.subscribe(self._assigned, self._revoked, self._revoked)

    def _assigned(self, lane: Consumer, partitions: list[TopicPartition]) -> None:
        lane.incremental_assign(partitions)
        self.owned.setdefault(lane, set()).update((tp.topic, tp.partition) for tp in partitions)

    def _revoked(self, lane: Consumer, partitions: list[TopicPartition]) -> None:
        lane.incremental_unassign(partitions)
        self.owned.get(lane, set()).difference_update((tp.topic, tp.partition) for tp in partitions)

    def turn(self) -> None:
        self.lanes.consume(100, 0.02)
        self.lanes.refresh()

    def tasks(self, topics: dict[int, tuple[str, ...]]) -> set[TaskId] | None:
        """The tasks this instance owns, None when a task's partitions are split between its
        lanes or only partly here."""
        owned = {tp: lane for lane, tps in self.owned.items() for tp in tps}
        tasks = set()
        for sub, names in topics.items():
            for p in range(PARTITIONS[sub]):
                lanes = {owned.get((t, p)) for t in names}
                if lanes == {None}:
                    continue
                if len(lanes) != 1 or None in lanes:
                    return None
                tasks.add(TaskId(sub, p))
        return tasks


def test_the_group_gives_lanes_the_computed_balanced_assignment(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topics = {
        0: (create_topic("clicks", partitions=6),),
        1: (create_topic("orders", partitions=6), create_topic("users", partitions=6)),
        2: (create_topic("audit", partitions=4),),
    }
    group = unique_name("lanes")
    create_topic(f"{group}-lanes", partitions=1)
    # Heartbeats every second (the broker's default is 5 s): each step of a rebalance waits one.
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("consumer.heartbeat.interval.ms", "1000", incremental_operation=SET),
            ConfigEntry("consumer.session.timeout.ms", "6000", incremental_operation=SET),
        ],
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    instances: dict[str, _Instance] = {}

    def settled_on(names: list[str]) -> None:
        streak: list[dict[str, set[TaskId] | None]] = []

        def settled() -> bool:
            for instance in instances.values():
                instance.turn()
            members = [
                GroupMember.of(n, None, i.lanes.memberid() or "", lanes=True)
                for n, i in instances.items()
            ]
            expected = task_owners(members, PARTITIONS)
            now = {n: i.tasks(topics) for n, i in instances.items()}
            ok = all(now[n] == {t for t, owner in expected.items() if owner == n} for n in names)
            if not ok:
                streak.clear()
                return False
            streak.append(now)
            return len(streak) >= 20

        wait_for(settled, timeout_s=90, interval_s=0.0, message=f"{names} as computed")
        totals = Counter(len(tasks or ()) for tasks in streak[-1].values())
        assert max(totals) - min(totals) <= 1, totals

    try:
        for name in ("a", "b"):
            instances[name] = _Instance(name, kafka_bootstrap, group, topics)
        settled_on(["a", "b"])
        for name in ("c", "d", "e"):  # three join at once
            instances[name] = _Instance(name, kafka_bootstrap, group, topics)
        settled_on(list(instances))
        instances.pop("b").lanes.close()  # leaves: its front lane hands its tasks on first
        settled_on(list(instances))
    finally:
        for instance in instances.values():
            instance.lanes.close(release=False)

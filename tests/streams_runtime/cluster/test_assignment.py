"""The range assignment the runtime computes (streams_runtime/cluster/assignment.py) and the
placement of standbys and warm-up copies built on it: pure logic, and against the broker's own
assignor (KIP-848) and librdkafka's (classic), which it must match member for member."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from hypothesis import given
from hypothesis import strategies as st

from streams_runtime.cluster.assignment import (
    GroupMember,
    failover_owners,
    range_ranges,
    task_owners,
)
from streams_runtime.cluster.membership import MemberInfo, StorePartition
from streams_runtime.cluster.placement import copy_placement
from streams_runtime.record import TaskId
from tests.helpers import unique_name, wait_for, wait_for_leaders

TASKS = {0: 6, 1: 6}


def _member(name: str, *, static: bool = False) -> GroupMember:
    return GroupMember.of(name, name if static else None, f"id-{name}")


@given(st.integers(1, 12), st.integers(0, 40))
def test_ranges_cover_every_partition_once_and_differ_by_at_most_one(
    members: int, partitions: int
) -> None:
    ranges = range_ranges(members, partitions)
    assert [p for r in ranges for p in r] == list(range(partitions))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the longer ranges first, as the assignor


@given(st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=6))
def test_every_subtopology_is_spread_evenly_and_co_partitioned(names: set[str]) -> None:
    owners = task_owners([_member(n) for n in names], TASKS)
    for sub, count in TASKS.items():
        per_instance = Counter(owners[TaskId(sub, p)] for p in range(count))
        loads = [per_instance.get(n, 0) for n in names]
        assert max(loads) - min(loads) <= 1
    # Partition p of every sub-topology (equal counts) on one instance.
    assert all(owners[TaskId(0, p)] == owners[TaskId(1, p)] for p in range(6))


def test_static_members_come_first_then_member_ids() -> None:
    dynamic, static = _member("a"), _member("z", static=True)
    owners = task_owners([dynamic, static], {0: 2})
    assert owners == {TaskId(0, 0): "z", TaskId(0, 1): "a"}


def test_failover_owner_is_who_gets_the_task_without_its_owner() -> None:
    members = [_member(n) for n in "abc"]  # a: 0-1, b: 2-3, c: 4-5
    owners = {TaskId(0, 4): {"c"}, TaskId(0, 0): {"a"}}
    # Without c: a: 0-2, b: 3-5; without a: b: 0-2, c: 3-5.
    assert failover_owners(owners, members, TASKS) == {TaskId(0, 4): "b", TaskId(0, 0): "b"}
    assert failover_owners({TaskId(0, 0): {"a"}}, members[:1], TASKS) == {}


def _info(name: str, active: tuple[int, ...] = (), *, joining: bool = False) -> MemberInfo:
    return MemberInfo(
        name,
        None,
        heartbeat_ms=0,
        interval_ms=1000,
        active={"store": active} if active else {},
        group_member_id=f"id-{name}",
        joining=joining,
    )


def _store(sub: int) -> str:
    return "store" if sub == 0 else f"store-{sub}"  # "store": the one _info's partitions are of


def _logged(tasks: dict[int, int]) -> dict[TaskId, list[StorePartition]]:
    return {
        TaskId(sub, p): [StorePartition(_store(sub), p)]
        for sub, count in tasks.items()
        for p in range(count)
    }


def test_first_standbys_go_to_failover_owners_as_far_as_balance_allows() -> None:
    # Owners as the range assignor puts them: a 0-1, b 2-3, c 4-5. The failover owners are
    # b, b, a, c, b, b: b cannot keep four of six standbys and stay balanced, so two of its
    # four go elsewhere, and the other four standbys are on their failover owners.
    members = {"a": _info("a", (0, 1)), "b": _info("b", (2, 3)), "c": _info("c", (4, 5))}
    placed = copy_placement(members, 1, _logged({0: 6}), {0: 6})
    joined = [m.group_member for m in members.values() if m.group_member]
    owners = {TaskId(0, p): {"abc"[p // 2]} for p in range(6)}
    successors = failover_owners(owners, joined, {0: 6})
    assert successors == {TaskId(0, p): o for p, o in enumerate("bbacbb")}
    assert Counter(copies[0] for copies in placed.values()) == {"a": 2, "b": 2, "c": 2}
    assert sum(placed[t] == [successors[t]] for t in placed) == 4
    assert all(owners[t].isdisjoint(copies) for t, copies in placed.items())


def test_a_joining_instance_gets_warm_up_copies_of_what_it_will_own() -> None:
    # a and b run (a: 0-2, b: 3-5); c joins: a: 0-1, b: 2-3, c: 4-5.
    members = {
        "a": _info("a", (0, 1, 2)),
        "b": _info("b", (3, 4, 5)),
        "c": _info("c", joining=True),
    }
    placed = copy_placement(members, 0, _logged({0: 6}), {0: 6})
    moves = {2: "b", 4: "c", 5: "c"}
    assert placed == {TaskId(0, p): [moves[p]] if p in moves else [] for p in range(6)}


def test_no_owner_keeps_what_is_there() -> None:
    members = {"a": _info("a"), "b": _info("b")}
    assert copy_placement(members, 1, _logged({0: 1}), {0: 1}) == {}


def test_standbys_of_four_instances_are_balanced_per_subtopology_and_in_total() -> None:
    # The case: two sub-topologies of 6 tasks on 4 instances, one standby. Rendezvous
    # hashing gave 2, 2 and 8 of 12 over 3 instances; balanced, every instance keeps 3.
    names = "abcd"
    owners = task_owners([_member(n) for n in names], TASKS)
    members = {
        n: MemberInfo(
            n,
            None,
            heartbeat_ms=0,
            interval_ms=1000,
            active={
                _store(sub): tuple(p for p in range(6) if owners[TaskId(sub, p)] == n)
                for sub in TASKS
            },
            group_member_id=f"id-{n}",
        )
        for n in names
    }
    placed = copy_placement(members, 1, _logged(TASKS), TASKS)
    per_instance = Counter(i for copies in placed.values() for i in copies)
    assert sorted(per_instance.values()) == [3, 3, 3, 3]
    for sub in TASKS:
        spread = Counter(i for t, copies in placed.items() if t.subtopology == sub for i in copies)
        assert max(spread.values()) - min(spread.get(n, 0) for n in names) <= 1


# -- against the real assignors ------------------------------------------------------------------


def _assignments(
    bootstrap: str, topics: list[str], count: int, config: dict[str, str]
) -> dict[str, set[TopicPartition]]:
    """``count`` consumers of one group, polled until the assignment is stable: member id ->
    partitions."""
    group = unique_name("assign")
    # A classic member subscribes only to the topics its metadata already shows: one that joined
    # before the broker served a new topic gets none of it until a later rebalance, a stable but
    # transient assignment this test would otherwise take for the assignor's.
    wait_for_leaders(AdminClient({"bootstrap.servers": bootstrap}), topics)
    owned: dict[int, set[tuple[str, int]]] = {}
    consumers = []
    for n in range(count):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
        owned[n] = set()

        def on_assign(c: Consumer, parts: list[TopicPartition], n: int = n) -> None:
            owned[n] |= {(p.topic, p.partition) for p in parts}
            (c.incremental_assign if config.get("group.protocol") == "consumer" else c.assign)(
                parts
            )

        def on_revoke(c: Consumer, parts: list[TopicPartition], n: int = n) -> None:
            if config.get("group.protocol") == "consumer":
                owned[n] -= {(p.topic, p.partition) for p in parts}
                c.incremental_unassign(parts)
            else:
                owned[n].clear()
                c.unassign()

        consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
        consumers.append(consumer)
    total = sum(6 for _ in topics)
    stable: list[object] = []

    def settled() -> bool:
        for consumer in consumers:
            consumer.poll(0.05)
        snapshot = sorted((n, sorted(p)) for n, p in owned.items())
        # Every member in (the first alone owns everything until the others are seen).
        complete = sum(len(p) for p in owned.values()) == total and all(owned.values())
        if not complete or (stable and stable[-1] != snapshot):
            stable.clear()
        if complete:
            stable.append(snapshot)
        return len(stable) >= 20

    try:
        wait_for(settled, timeout_s=60, interval_s=0.0, message="a stable assignment")
        return {
            c.memberid() or "": {TopicPartition(t, p) for t, p in owned[n]}
            for n, c in enumerate(consumers)
        }
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.mark.broker
@pytest.mark.parametrize(
    ("protocol", "count"), [("consumer", 2), ("consumer", 3), ("consumer", 4), ("classic", 3)]
)
def test_the_computed_assignment_is_the_assignors(
    protocol: str, count: int, kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topics = [create_topic("left", partitions=6), create_topic("right", partitions=6)]
    config = (
        {"group.protocol": "consumer", "group.remote.assignor": "range"}
        if protocol == "consumer"
        else {"group.protocol": "classic", "partition.assignment.strategy": "range"}
    )
    started = time.monotonic()
    actual = _assignments(kafka_bootstrap, topics, count, config)
    members = [GroupMember.of(member_id, None, member_id) for member_id in actual]
    # Tasks of sub-topology 0 read topics[0], of 1 topics[1] (the computation is per topic).
    computed = task_owners(members, {0: 6, 1: 6})
    for member_id, partitions in actual.items():
        expected = {
            TopicPartition(topics[task.subtopology], task.partition)
            for task, owner in computed.items()
            if owner == member_id
        }
        assert partitions == expected, f"after {time.monotonic() - started:.1f}s"

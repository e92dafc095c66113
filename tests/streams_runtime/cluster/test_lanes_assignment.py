"""The assignment with lanes (streams_runtime/cluster/assignment.py, processing/lanes.py): pure
logic over generated topologies (1-5 sub-topologies of 1-24 tasks), 1-8 instances, joins and
leaves in any order; what the real group does is test_lanes_broker.py."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime.cluster.assignment import GroupMember, extra_holders, task_owners
from streams_runtime.record import TaskId

topologies = st.lists(st.integers(1, 24), min_size=1, max_size=5)
names = st.text("abcdefgh", min_size=1, max_size=3)


def _members(instances: list[str], static: bool) -> list[GroupMember]:
    return [
        GroupMember.of(i, i if static else None, f"member-{i[::-1]}", lanes=True) for i in instances
    ]


def _check_balanced(owners: dict[TaskId, str], instances: list[str], partitions: list[int]) -> None:
    assert set(owners) == {TaskId(s, p) for s, n in enumerate(partitions) for p in range(n)}
    totals = Counter(owners.values())
    loads = [totals.get(i, 0) for i in instances]
    assert max(loads) - min(loads) <= 1, loads
    for sub in range(len(partitions)):
        per_sub = Counter(o for t, o in owners.items() if t.subtopology == sub)
        loads = [per_sub.get(i, 0) for i in instances]
        assert max(loads) - min(loads) <= 1, (sub, loads)


@given(st.lists(names, min_size=1, max_size=8, unique=True), topologies)
def test_extra_holders_take_one_more_each_and_as_many_extras_as_each_other(
    instances: list[str], partitions: list[int]
) -> None:
    holders = extra_holders(instances, partitions)
    for count, held in zip(partitions, holders, strict=True):
        assert len(held) == count % len(instances)
    extras = Counter(i for held in holders for i in held)
    loads = [extras.get(i, 0) for i in instances]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=300)
@given(
    topologies,
    st.lists(st.tuples(st.booleans(), names), min_size=1, max_size=12),
    st.booleans(),
)
def test_every_instance_as_busy_as_every_other_through_joins_and_leaves(
    partitions: list[int], steps: list[tuple[bool, str]], static: bool
) -> None:
    tasks = dict(enumerate(partitions))
    group: list[str] = []
    for joins, name in steps:
        if joins and name not in group and len(group) < 8:
            group.append(name)
        elif not joins and name in group and len(group) > 1:
            group.remove(name)
        if not group:
            continue
        owners = task_owners(_members(group, static), tasks)
        if len(partitions) > 1:
            _check_balanced(owners, group, partitions)


def test_four_instances_two_subtopologies_of_six_three_tasks_each() -> None:
    # The case: the extras of sub-topology 0 on two instances, of 1 on the other two.
    owners = task_owners(_members(list("abcd"), static=False), {0: 6, 1: 6})
    assert sorted(Counter(owners.values()).values()) == [3, 3, 3, 3]
    assert extra_holders("abcd", [6, 6]) == [frozenset("ab"), frozenset("cd")]


def test_without_lanes_the_first_members_take_every_extra() -> None:
    members = [GroupMember.of(i, None, f"member-{i}") for i in "abcd"]
    owners = task_owners(members, {0: 6, 1: 6})
    assert Counter(owners.values()) == {"a": 4, "b": 4, "c": 2, "d": 2}

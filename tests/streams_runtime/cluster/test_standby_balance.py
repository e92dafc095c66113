"""Balanced standby placement (streams_runtime/cluster/standby_balance.py): pure logic over
generated topologies (1-5 sub-topologies of 1-24 tasks), 1-8 instances, 0-3 standbys, and owners
as the range assignor places them today or dealt evenly in total as well."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime.cluster.assignment import GroupMember, task_owners
from streams_runtime.cluster.standby_balance import balanced_standbys
from streams_runtime.record import TaskId

topologies = st.lists(st.integers(1, 24), min_size=1, max_size=5)
instance_sets = st.lists(
    st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True
)


def _ranged(instances: list[str], partitions: list[int]) -> dict[TaskId, set[str]]:
    members = [GroupMember.of(i, None, f"id-{i}") for i in instances]
    owned = task_owners(members, dict(enumerate(partitions)))
    return {task: {owner} for task, owner in owned.items()}


def _dealt(instances: list[str], partitions: list[int], start: int) -> dict[TaskId, set[str]]:
    """Tasks dealt round-robin, sub-topology after sub-topology: even per sub-topology and in
    total."""
    tasks = [TaskId(s, p) for s, count in enumerate(partitions) for p in range(count)]
    return {t: {instances[(start + n) % len(instances)]} for n, t in enumerate(tasks)}


def _spread(counts: Counter[str], instances: list[str]) -> int:
    loads = [counts.get(i, 0) for i in instances]
    return max(loads) - min(loads)


def _check(
    owners: dict[TaskId, set[str]],
    instances: list[str],
    count: int,
    *,
    totals: bool,
    held: dict[TaskId, list[str]] | None = None,
) -> dict[TaskId, list[str]]:
    placed = balanced_standbys(owners, instances, count, held)
    assert set(placed) == set(owners)
    for task, copies in placed.items():
        assert len(copies) == len(set(copies)) == min(count, len(instances) - 1)
        assert owners[task].isdisjoint(copies)  # never on the active's instance
    if count < len(instances) - 1:  # else every other instance keeps every task: no choice
        for sub in {t.subtopology for t in owners}:
            per_sub = Counter(i for t, c in placed.items() if t.subtopology == sub for i in c)
            assert _spread(per_sub, instances) <= 1, sub
        if totals:
            assert _spread(Counter(i for c in placed.values() for i in c), instances) <= 1
    return placed


@settings(max_examples=300)
@given(topologies, instance_sets, st.integers(0, 3))
def test_standbys_of_ranged_owners_are_even_per_subtopology(
    partitions: list[int], instances: list[str], count: int
) -> None:
    # The range assignor's totals can differ by the number of sub-topologies: then the
    # standbys' totals cannot all be even, but every sub-topology's are.
    _check(_ranged(instances, partitions), instances, count, totals=False)


@settings(max_examples=300)
@given(topologies, instance_sets, st.integers(0, 3), st.integers(0, 7), st.booleans())
def test_standbys_of_evenly_dealt_owners_are_even_per_subtopology_and_in_total(
    partitions: list[int], instances: list[str], count: int, start: int, joins: bool
) -> None:
    placed = _check(_dealt(instances, partitions, start), instances, count, totals=True)
    # An instance joins (or the first leaves): from the copies that exist, even again.
    after = [*instances, "new"] if joins or len(instances) == 1 else instances[1:]
    _check(_dealt(after, partitions, start), after, count, totals=True, held=placed)


@given(topologies, instance_sets, st.integers(1, 3))
def test_placement_is_deterministic_and_keeps_copies_among_equals(
    partitions: list[int], instances: list[str], count: int
) -> None:
    owners = _ranged(instances, partitions)
    placed = balanced_standbys(owners, instances, count)
    assert balanced_standbys(owners, list(reversed(instances)), count) == placed
    # Told where copies are, it keeps them: the same loads, nothing to move.
    again = balanced_standbys(owners, instances, count, held=placed)
    assert {t: set(c) for t, c in again.items()} == {t: set(c) for t, c in placed.items()}


def test_an_owner_of_a_whole_subtopology_makes_it_as_even_as_it_can() -> None:
    # a owns both one-task sub-topologies: only b, c and d can keep their standbys.
    owners = {
        TaskId(s, p): {"abcd"[p % 4] if s == 0 else "a"}
        for s in range(3)
        for p in (range(16) if s == 0 else range(1))
    }
    placed = balanced_standbys(owners, "abcd", 2)
    loads = Counter(i for c in placed.values() for i in c)
    assert loads["a"] == 8  # sub-topology 0's share only
    assert sorted(loads[i] for i in "bcd") == [9, 9, 10]

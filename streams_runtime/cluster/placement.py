"""Where standbys and warm-up copies live (docs/runtime/scaling.md, docs/runtime/queries.md).

For every task with logged stores whose active owner is known, every instance computes the same
placement from the same membership view:

- a **warm-up copy** on the instance the task moves to once the instances now joining are in
  the group (:func:`~streams_runtime.cluster.assignment.task_owners`): they restore what they
  will own before they join, so a task moves with its state (KIP-441's warm-up replicas);
- ``num_standby_replicas`` **standbys** on other instances, balanced per sub-topology and in
  total (:func:`~streams_runtime.cluster.standby_balance.balanced_standbys`); among equally
  loaded instances, one that has a copy already, then the one that takes the task over if its
  owner leaves (:func:`~streams_runtime.cluster.assignment.failover_owners`), so a failover
  restores only the changelog's tail.

While no live instance claims a task (its owner just died, the group has not rebalanced yet),
its existing copies are kept, never created or dropped: they are what serves queries during the
failover.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from streams_runtime.cluster.assignment import failover_owners, task_owners
from streams_runtime.cluster.membership import MemberInfo, StorePartition
from streams_runtime.cluster.standby_balance import balanced_standbys
from streams_runtime.record import TaskId

__all__ = ["copy_placement"]


def copy_placement(
    members: Mapping[str, MemberInfo],
    count: int,
    logged: Mapping[TaskId, Collection[StorePartition]],
    tasks_per_subtopology: Mapping[int, int],
) -> dict[TaskId, list[str]]:
    """Instances that should hold a copy of each task's store partitions (``logged``) given the
    live ``members``: the warm-up copy first, then the standbys. A task no member claims as
    active or restoring is left out (keep what is there)."""
    owners = {
        task: claimed
        for task, sps in logged.items()
        if (claimed := frozenset(i for i, m in members.items() if any(map(m.owns, sps))))
    }
    group = {i: m.group_member for i, m in members.items() if m.group_member is not None}
    joined = [g for i, g in group.items() if not members[i].joining]
    placed: dict[TaskId, list[str]] = {task: [] for task in owners}
    if len(joined) < len(group):
        targets = task_owners(group.values(), tasks_per_subtopology)
        for task, claimed in owners.items():
            target = targets.get(task)
            if target is not None and target not in claimed:
                placed[task].append(target)
    if count <= 0:
        return placed
    held = {
        task: {i for i, m in members.items() if any(m.role(sp) == "standby" for sp in logged[task])}
        for task in owners
    }
    standbys = balanced_standbys(
        owners, members, count, held, failover_owners(owners, joined, tasks_per_subtopology)
    )
    return {
        task: copies + [i for i in standbys[task] if i not in copies]
        for task, copies in placed.items()
    }

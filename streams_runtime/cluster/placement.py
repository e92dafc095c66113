"""Where standbys and warm-up copies live (docs/runtime/scaling.md, docs/runtime/queries.md).

For every logged store partition whose active owner is known, every instance computes the same
placement from the same membership view:

- a **warm-up copy** on the instance the task moves to once the instances now joining are in
  the group (:func:`~streams_runtime.cluster.assignment.task_owners`): they restore what they
  will own before they join, so a task moves with its state (KIP-441's warm-up replicas);
- ``num_standby_replicas`` **standbys** on other instances: the first on the instance that takes
  the task over if its owner leaves (:func:`~streams_runtime.cluster.assignment.failover_owner`),
  so a failover restores only the changelog's tail, the rest by rendezvous hash of (store,
  partition, instance id), which moves only the partitions of an instance that leaves.

While no live instance claims a partition (its owner just died, the group has not rebalanced
yet), existing copies are kept, never created or dropped: they are what serves queries during
the failover.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from streams_runtime.cluster.assignment import failover_owner, task_owners
from streams_runtime.cluster.membership import MemberInfo, StorePartition
from streams_runtime.record import TaskId

__all__ = ["rendezvous_standbys", "standby_placement"]


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
    sp: StorePartition,
    task: TaskId,
    members: Mapping[str, MemberInfo],
    count: int,
    tasks_per_subtopology: Mapping[int, int],
) -> list[str] | None:
    """Instances that should hold a copy of ``sp`` (of ``task``) given the live ``members``:
    the warm-up copy first, then the standbys; ``None`` while no member claims ``sp`` as active
    or restoring (keep what is there)."""
    owners = {i for i, m in members.items() if m.owns(sp)}
    if not owners:
        return None
    group = {i: m.group_member for i, m in members.items() if m.group_member is not None}
    joined = [g for i, g in group.items() if not members[i].joining]
    placed: list[str] = []
    if len(joined) < len(group):
        target = task_owners(group.values(), tasks_per_subtopology).get(task)
        if target is not None and target not in owners:
            placed.append(target)
    if count <= 0:
        return placed
    standbys: list[str] = []
    successor = failover_owner(task, min(owners), joined, tasks_per_subtopology)
    if successor is not None and successor not in owners:
        standbys.append(successor)
    standbys += rendezvous_standbys(
        sp, set(members) - owners - set(standbys), count - len(standbys)
    )
    return placed + [i for i in standbys if i not in placed]

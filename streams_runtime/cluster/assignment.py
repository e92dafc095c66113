"""Where the group's range assignor puts tasks, computed as the assignor does
(docs/runtime/scaling.md).

The stream thread's consumer joins with the range assignor (KIP-848's ``RangeAssignor`` on the
broker, librdkafka's on the classic protocol): members sorted (static members by
``group.instance.id`` first, then the others by member id), and each topic's partitions cut
into contiguous ranges in that order, the first ``partitions % members`` ranges one longer.
So the assignment is a pure function of the members and the partition counts, and every
instance can compute it from the membership topic, for today's members and for tomorrow's:

- :func:`failover_owner`: who takes a task over when its owner leaves; a standby there makes
  the failover restore only the changelog's tail;
- :func:`task_owners` with a joining instance: which tasks it will take; it restores them as
  warm-up copies before it joins (KIP-441's warm-up replicas, without a probing rebalance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from streams_runtime.record import TaskId

__all__ = ["GroupMember", "failover_owner", "range_ranges", "task_owners"]


@dataclass(frozen=True, order=True)
class GroupMember:
    """One instance as the range assignor orders members: static members (with a
    ``group.instance.id``) before dynamic ones, then by that id or by member id."""

    dynamic: bool
    key: str
    instance_id: str

    @classmethod
    def of(cls, instance_id: str, group_instance_id: str | None, member_id: str) -> GroupMember:
        if group_instance_id is not None:
            return cls(False, group_instance_id, instance_id)
        return cls(True, member_id, instance_id)


def range_ranges(members: int, partitions: int) -> list[range]:
    """The partitions of one topic each of ``members`` sorted members gets."""
    quota, extra = divmod(partitions, members)
    out, start = [], 0
    for index in range(members):
        end = min(partitions, start + quota + (1 if index < extra else 0))
        out.append(range(start, end))
        start = end
    return out


def task_owners(
    members: Iterable[GroupMember], tasks_per_subtopology: Mapping[int, int]
) -> dict[TaskId, str]:
    """The instance owning each task once ``members`` are the group: a task ``(s, p)`` goes
    where partition ``p`` of sub-topology ``s``'s source topics goes (they are co-partitioned:
    equal partition counts, ``tasks_per_subtopology[s]``)."""
    ordered: Sequence[GroupMember] = sorted(set(members))
    if not ordered:
        return {}
    owners: dict[TaskId, str] = {}
    for sub, partitions in tasks_per_subtopology.items():
        for member, owned in zip(ordered, range_ranges(len(ordered), partitions), strict=True):
            for partition in owned:
                owners[TaskId(sub, partition)] = member.instance_id
    return owners


def failover_owner(
    task: TaskId,
    owner: str,
    members: Iterable[GroupMember],
    tasks_per_subtopology: Mapping[int, int],
) -> str | None:
    """Who owns ``task`` once ``owner`` has left ``members``; None when nobody is left."""
    rest = [m for m in members if m.instance_id != owner]
    return task_owners(rest, tasks_per_subtopology).get(task)

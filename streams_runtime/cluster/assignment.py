"""Where the group's range assignor puts tasks, computed as the assignor does
(docs/runtime/scaling.md).

The stream thread's consumer joins with the range assignor (KIP-848's ``RangeAssignor`` on the
broker, librdkafka's on the classic protocol): members sorted (static members by
``group.instance.id`` first, then the others by member id), and each topic's partitions cut
into contiguous ranges in that order, the first ``partitions % members`` ranges one longer.
With lanes (:mod:`streams_runtime.processing.lanes`), each instance is two members, and for each
sub-topology the instances :func:`extra_holders` names come first (their front lanes hold its
topics). So the assignment is a pure function of the members and the partition counts, and every
instance can compute it from the membership topic, for today's members and for tomorrow's:

- :func:`failover_owners`: who takes each task over when its owner leaves; a standby there makes
  the failover restore only the changelog's tail;
- :func:`task_owners` with a joining instance: which tasks it will take; it restores them as
  warm-up copies before it joins (KIP-441's warm-up replicas, without a probing rebalance).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from streams_runtime.record import TaskId

__all__ = [
    "LANE_PREFIX",
    "GroupMember",
    "extra_holders",
    "failover_owners",
    "front_instance_id",
    "front_lane_instance",
    "range_ranges",
    "task_owners",
]

LANE_PREFIX = "-"
"""Starts a front lane's ``group.instance.id`` (:mod:`streams_runtime.processing.lanes`): ``-``
sorts before the characters any other id may start with (letters, digits, ``.``, ``_``)."""


def front_instance_id(instance_id: str, process: str) -> str:
    """The ``group.instance.id`` of ``instance_id``'s front lane in one process."""
    return f"{LANE_PREFIX}{instance_id}.{process}"


def front_lane_instance(group_instance_id: str | None) -> str | None:
    """The instance whose front lane has ``group_instance_id``; None for any other member."""
    if not (group_instance_id or "").startswith(LANE_PREFIX):
        return None
    return (group_instance_id or "")[len(LANE_PREFIX) :].rsplit(".", 1)[0]


def extra_holders(instances: Sequence[str], partitions: Sequence[int]) -> list[frozenset[str]]:
    """Per sub-topology (``partitions``: each one's task count, in order), the instances that
    take one task more than the others: ``count % len(instances)`` of them, a rotation over the
    sorted instances that goes on where the previous sub-topology's stopped, so every instance
    takes as many extras as any other, give or take one."""
    ordered = sorted(set(instances))
    if not ordered:
        return [frozenset() for _ in partitions]
    out, start = [], 0
    for count in partitions:
        extra = count % len(ordered)
        out.append(frozenset(ordered[(start + j) % len(ordered)] for j in range(extra)))
        start = (start + extra) % len(ordered)
    return out


@dataclass(frozen=True, order=True)
class GroupMember:
    """One instance as the range assignor orders members: static members (with a
    ``group.instance.id``) before dynamic ones, then by that id or by member id."""

    dynamic: bool
    key: str
    instance_id: str
    lanes: bool = False
    """Whether the instance joins with a front and a back lane (this member is its back)."""

    @classmethod
    def of(
        cls, instance_id: str, group_instance_id: str | None, member_id: str, *, lanes: bool = False
    ) -> GroupMember:
        if group_instance_id is not None:
            return cls(False, group_instance_id, instance_id, lanes)
        return cls(True, member_id, instance_id, lanes)


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
    subs = sorted(tasks_per_subtopology)
    if len(subs) > 1 and all(m.lanes for m in ordered):
        holders = extra_holders(
            [m.instance_id for m in ordered], [tasks_per_subtopology[s] for s in subs]
        )
    else:
        holders = [frozenset() for _ in subs]
    owners: dict[TaskId, str] = {}
    for sub, held in zip(subs, holders, strict=True):
        # Front lanes of the holders first (by their ids, "-<instance id>."), then the backs.
        fronts = sorted(
            (m for m in ordered if m.instance_id in held),
            key=lambda m: front_instance_id(m.instance_id, ""),
        )
        members_of_sub = [*fronts, *(m for m in ordered if m.instance_id not in held)]
        partitions = tasks_per_subtopology[sub]
        for member, owned in zip(
            members_of_sub, range_ranges(len(members_of_sub), partitions), strict=True
        ):
            for partition in owned:
                owners[TaskId(sub, partition)] = member.instance_id
    return owners


def failover_owners(
    owners: Mapping[TaskId, Collection[str]],
    joined: Collection[GroupMember],
    tasks_per_subtopology: Mapping[int, int],
) -> dict[TaskId, str]:
    """Who takes each task over if its owner (the first, when it has two for a moment) leaves
    ``joined``; a task nobody would take is left out."""
    without: dict[str, dict[TaskId, str]] = {}
    out: dict[TaskId, str] = {}
    for task, claimed in owners.items():
        owner = min(claimed)
        if owner not in without:
            rest = [m for m in joined if m.instance_id != owner]
            without[owner] = task_owners(rest, tasks_per_subtopology)
        successor = without[owner].get(task)
        if successor is not None:
            out[task] = successor
    return out

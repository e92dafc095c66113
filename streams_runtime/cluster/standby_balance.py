"""Balanced standby placement (docs/runtime/scaling.md): which instances keep a standby of each
task, so that every instance keeps about as many as every other, per sub-topology and in total
(Kafka Streams' ``StandbyTaskAssignor`` balances them by client load the same way).

Pure and deterministic: every instance computes the same placement from the same inputs.

1. Copies that exist are kept (a move costs a restore), where they may be.
2. Each standby still missing (a task's first standby for every task, then its second, ...)
   goes to the instance with the fewest standbys of the task's sub-topology, then the fewest in
   total, then the task's preferred instance (the one that would take it over), then a hash of
   (task, instance). Never to an instance that owns the task or has a copy of it placed already.
3. Kept copies (an instance joined) and greedy choices (the least loaded instance owns the last
   tasks of a sub-topology) can leave an instance two behind another. A repair pass then moves
   single standbys from the busiest to the least busy instance of a sub-topology, directly or
   through a third instance, and between sub-topologies for the totals, until nothing moves.

Where the owners make balance impossible (one instance owns all tasks of a sub-topology and can
hold none of its standbys), the result is as even as the owners allow.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from streams_runtime.record import TaskId

__all__ = ["balanced_standbys"]

_Allowed = Callable[[TaskId, str], bool]
"""Whether an instance may take a standby of a task (neither owns nor has one of it)."""


def _score(task: TaskId, instance_id: str) -> bytes:
    return hashlib.sha256(f"{task.subtopology}\0{task.partition}\0{instance_id}".encode()).digest()


class _Loads:
    """Standbys placed so far, per instance, per (sub-topology, instance) and per task."""

    def __init__(self, tasks: Iterable[TaskId]) -> None:
        self.placed: dict[TaskId, list[str]] = {task: [] for task in tasks}
        self.by_sub: Counter[tuple[int, str]] = Counter()
        self.total: Counter[str] = Counter()

    def add(self, task: TaskId, instance_id: str) -> None:
        self.placed[task].append(instance_id)
        self.by_sub[task.subtopology, instance_id] += 1
        self.total[instance_id] += 1

    def move(self, task: TaskId, source: str, target: str) -> None:
        copies = self.placed[task]
        copies[copies.index(source)] = target
        self.by_sub[task.subtopology, source] -= 1
        self.by_sub[task.subtopology, target] += 1
        self.total[source] -= 1
        self.total[target] += 1


def balanced_standbys(
    owners: Mapping[TaskId, Collection[str]],
    instances: Iterable[str],
    count: int,
    held: Mapping[TaskId, Collection[str]] | None = None,
    preferred: Mapping[TaskId, str] | None = None,
) -> dict[TaskId, list[str]]:
    """``count`` standbys per task of ``owners`` (task -> the instances that own it, running or
    restoring), on ``instances``, never on an owner: as many as there are other instances when
    fewer. ``held``: instances with a copy of the task now; ``preferred``: where its first
    standby is best (the instance that would take it over)."""
    candidates = sorted(set(instances))
    tasks = sorted(owners)
    loads = _Loads(tasks)
    held = held or {}
    preferred = preferred or {}

    def allowed(task: TaskId, instance_id: str) -> bool:
        return instance_id not in owners[task] and instance_id not in loads.placed[task]

    # Copies that exist stay where they are (a move costs a restore), as long as they may;
    # the repair below moves what balance needs moved, one standby at a time.
    known = set(candidates)
    for task in tasks:
        for instance_id in sorted(held.get(task, ())):
            if (
                len(loads.placed[task]) < count
                and instance_id in known
                and allowed(task, instance_id)
            ):
                loads.add(task, instance_id)
    for replica in range(count):
        for task in tasks:
            free = [i for i in candidates if allowed(task, i)]
            if len(loads.placed[task]) > replica or not free:
                continue
            best = min(
                free,
                key=lambda i: (
                    loads.by_sub[task.subtopology, i],
                    loads.total[i],
                    i != preferred.get(task),
                    _score(task, i),
                ),
            )
            loads.add(task, best)
    _repair(loads, candidates, allowed)
    return loads.placed


def _repair(loads: _Loads, candidates: list[str], allowed: _Allowed) -> None:
    """Move single standbys until no sub-topology and no instance total is two apart (or no move
    helps). A move within a sub-topology lowers its sum of squared loads; a move for the totals
    lowers theirs and raises no sub-topology's: so this ends."""
    if len(candidates) < 2:
        return
    subs = sorted({task.subtopology for task in loads.placed})
    by_sub = {s: [t for t in loads.placed if t.subtopology == s] for s in subs}

    def movable(tasks: list[TaskId], source: str, target: str) -> TaskId | None:
        return next((t for t in tasks if source in loads.placed[t] and allowed(t, target)), None)

    def balance_sub(sub: int) -> bool:
        def load(i: str) -> tuple[int, int]:
            return loads.by_sub[sub, i], loads.total[i]

        busiest, idlest = max(candidates, key=load), min(candidates, key=load)
        if loads.by_sub[sub, busiest] - loads.by_sub[sub, idlest] <= 1:
            return False
        tasks = by_sub[sub]
        task = movable(tasks, busiest, idlest)
        if task is not None:
            loads.move(task, busiest, idlest)
            return True
        for middle in candidates:  # busiest -> middle, middle -> idlest: middle's load stays
            if middle in (busiest, idlest):
                continue
            second = movable(tasks, middle, idlest)
            first = movable([t for t in tasks if t != second], busiest, middle)
            if first is not None and second is not None:
                loads.move(second, middle, idlest)
                loads.move(first, busiest, middle)
                return True
        return False

    def evening(source: str, target: str) -> list[TaskId]:
        # Tasks of the sub-topologies where source keeps more than target: a move from source
        # to target keeps their spread within one.
        return [
            t
            for t in loads.placed
            if loads.by_sub[t.subtopology, source] > loads.by_sub[t.subtopology, target]
        ]

    def balance_total() -> bool:
        busiest = max(candidates, key=lambda i: loads.total[i])
        idlest = min(candidates, key=lambda i: loads.total[i])
        if loads.total[busiest] - loads.total[idlest] <= 1:
            return False
        task = movable(evening(busiest, idlest), busiest, idlest)
        if task is not None:
            loads.move(task, busiest, idlest)
            return True
        for middle in candidates:
            if middle in (busiest, idlest):
                continue
            second = movable(evening(middle, idlest), middle, idlest)
            first = movable([t for t in evening(busiest, middle) if t != second], busiest, middle)
            if first is not None and second is not None:
                loads.move(second, middle, idlest)
                loads.move(first, busiest, middle)
                return True
        return False

    while any([*(balance_sub(s) for s in subs), balance_total()]):
        pass

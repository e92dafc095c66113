"""Standby placement by rendezvous hashing (docs/runtime/queries.md).

For every logged store partition whose active owner is known, the ``num_standby_replicas`` live
instances other than the owner with the highest rendezvous hash of (store, partition, instance
id) keep a copy. Every instance computes the same placement from the same membership view. While
no live instance claims a partition (its owner just died, the group has not rebalanced yet),
existing standbys are kept, never created or dropped: they are what serves queries during the
failover.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from streams_runtime.cluster.membership import MemberInfo, StorePartition

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
    sp: StorePartition, members: Mapping[str, MemberInfo], count: int
) -> list[str] | None:
    """Instances that should hold a standby of ``sp`` given the live ``members``; ``None``
    while no member claims ``sp`` as active or restoring (keep what is there)."""
    owners = {i for i, m in members.items() if m.owns(sp)}
    if not owners:
        return None
    return rendezvous_standbys(sp, set(members) - owners, count)

"""The cluster side of an instance (KIP-535, docs/runtime/queries.md, docs/runtime/scaling.md),
one job per module:

- ``assignment``: where the group's range assignor puts tasks, for today's members and others;
- ``membership``: the membership record (wire format), lags, and the view of live members;
- ``membership_auth``: signing and verifying membership records (HMAC);
- ``placement``: which instances keep a standby or warm-up copy of a store partition;
- ``standby``: a standby replica, applying its changelog and keeping its committed copy;
- ``replicator``: the thread that publishes and reads membership and feeds the standbys;
- ``changelog_lags``: how far behind each local copy is, and the offsets that takes;
- ``store_provider``: the local copies of stores that interactive queries read.

The query router is :mod:`streams_runtime.queries.router`.
"""

from streams_runtime.cluster.membership import (
    LagInfo,
    MemberInfo,
    MembershipView,
    StorePartition,
)
from streams_runtime.cluster.placement import rendezvous_standbys, standby_placement
from streams_runtime.cluster.replicator import Replicator
from streams_runtime.cluster.standby import StandbyReplica

__all__ = [
    "LagInfo",
    "MemberInfo",
    "MembershipView",
    "Replicator",
    "StandbyReplica",
    "StorePartition",
    "rendezvous_standbys",
    "standby_placement",
]

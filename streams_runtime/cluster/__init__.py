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

from typing import TYPE_CHECKING, Any

from streams_runtime.cluster.membership import (
    LagInfo,
    MemberInfo,
    MembershipView,
    StorePartition,
)
from streams_runtime.cluster.placement import copy_placement

if TYPE_CHECKING:
    from streams_runtime.cluster.replicator import Replicator
    from streams_runtime.cluster.standby import StandbyReplica

__all__ = [
    "LagInfo",
    "MemberInfo",
    "MembershipView",
    "Replicator",
    "StandbyReplica",
    "StorePartition",
    "copy_placement",
]


def __getattr__(name: str) -> Any:
    # Imported on first use (PEP 562): the replicator and the standbys pull in most of the
    # cluster side, which an app without membership never runs; ``import streams_runtime``
    # (``LagInfo``) would otherwise load them at every start.
    if name == "Replicator":
        from streams_runtime.cluster.replicator import Replicator

        return Replicator
    if name == "StandbyReplica":
        from streams_runtime.cluster.standby import StandbyReplica

        return StandbyReplica
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

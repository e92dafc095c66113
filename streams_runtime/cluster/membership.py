"""The membership wire format and view (KIP-535, docs/runtime/queries.md).

Every instance publishes its :class:`MemberInfo` (query endpoint, active / restoring / standby
store partitions, per-store-partition lag, heartbeat) as JSON keyed by its instance id to the
compacted topic ``<application_id>-membership`` (records signed and verified by
:mod:`streams_runtime.cluster.membership_auth`); every instance reads that topic into a
:class:`MembershipView` (an instance is live while its heartbeat is younger than three
intervals). The :class:`~streams_runtime.cluster.replicator.Replicator` does the publishing and
reading.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams_runtime.cluster.assignment import GroupMember

__all__ = [
    "LIVENESS_INTERVALS",
    "MEMBERSHIP_VERSION",
    "LagInfo",
    "MemberInfo",
    "MembershipView",
    "Partitions",
    "StorePartition",
    "epoch_ms",
    "partitions_by_store",
    "store_partitions",
]

MEMBERSHIP_VERSION = 1
LIVENESS_INTERVALS = 3


def epoch_ms() -> int:
    """Wall-clock time in epoch milliseconds (heartbeats, lags)."""
    return int(time.time() * 1000)


@dataclass(frozen=True, order=True)
class StorePartition:
    store: str
    partition: int

    def __str__(self) -> str:
        return f"{self.store}/{self.partition}"


@dataclass(frozen=True)
class LagInfo:
    """How far a local copy of a store partition is behind its changelog.

    ``current_offset``: next changelog offset reflected locally (-1: unknown, e.g. restoring);
    ``end_offset``: the changelog's end (high watermark); ``offset_lag``: records behind;
    ``time_lag_ms``: wall-clock age of the newest applied record while behind, 0 when caught up.
    """

    current_offset: int
    end_offset: int
    offset_lag: int
    time_lag_ms: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "current_offset": self.current_offset,
            "end_offset": self.end_offset,
            "offset_lag": self.offset_lag,
            "time_lag_ms": self.time_lag_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LagInfo:
        return cls(
            int(data["current_offset"]),
            int(data["end_offset"]),
            int(data["offset_lag"]),
            int(data.get("time_lag_ms", 0)),
        )


Partitions = dict[str, tuple[int, ...]]


def partitions_by_store(items: Iterable[StorePartition]) -> Partitions:
    """``{store: sorted partitions}`` of ``items`` (the form of a membership record)."""
    out: dict[str, list[int]] = {}
    for sp in items:
        out.setdefault(sp.store, []).append(sp.partition)
    return {store: tuple(sorted(parts)) for store, parts in sorted(out.items())}


def store_partitions(partitions: Mapping[str, Iterable[int]]) -> frozenset[StorePartition]:
    """The inverse of :func:`partitions_by_store`."""
    return frozenset(StorePartition(s, p) for s, parts in partitions.items() for p in parts)


@dataclass(frozen=True)
class MemberInfo:
    """One instance's membership record (the value in the membership topic, as JSON)::

    {"version": 1, "instance_id": "...", "endpoint": "host:port" | null,
     "heartbeat_ms": <epoch ms>, "interval_ms": 1000,
     "group_member_id": "..." | null, "group_instance_id": "..." | null, "joining": false,
     "lanes": false,
     "active": {"store": [0, 2]}, "restoring": {...}, "standby": {...},
     "lags": {"store": {"0": {"current_offset": .., "end_offset": .., "offset_lag": ..,
                              "time_lag_ms": ..}}}}
    """

    instance_id: str
    endpoint: str | None
    heartbeat_ms: int
    interval_ms: int
    active: Partitions = field(default_factory=dict)
    restoring: Partitions = field(default_factory=dict)
    standby: Partitions = field(default_factory=dict)
    lags: dict[str, dict[int, LagInfo]] = field(default_factory=dict)
    group_member_id: str | None = None
    """The stream thread's consumer's member id (None until it has one)."""
    group_instance_id: str | None = None
    """Its ``group.instance.id`` under static membership."""
    joining: bool = False
    """Warming up the tasks it will own before it joins the group (docs/runtime/scaling.md)."""
    lanes: bool = False
    """It joins with a front and a back lane (:mod:`streams_runtime.processing.lanes`); the
    member id and ``group.instance.id`` above are its back lane's."""

    @property
    def group_member(self) -> GroupMember | None:
        """This instance as the range assignor orders members; None while it has no member
        id."""
        if self.group_member_id is None:
            return None
        return GroupMember.of(
            self.instance_id, self.group_instance_id, self.group_member_id, lanes=self.lanes
        )

    def live(self, now_ms: int, at_least_ms: int = 0) -> bool:
        """Whether the heartbeat is younger than three publishing intervals (or
        ``at_least_ms``, when longer)."""
        return now_ms - self.heartbeat_ms < max(LIVENESS_INTERVALS * self.interval_ms, at_least_ms)

    def role(self, sp: StorePartition) -> str | None:
        """``active``, ``standby``, ``restoring`` or ``None`` for ``sp`` on this instance (a
        standby whose partition is restoring as active here is still reported as a standby:
        it keeps serving until the restore is done)."""
        for role, parts in (
            ("active", self.active),
            ("standby", self.standby),
            ("restoring", self.restoring),
        ):
            if sp.partition in parts.get(sp.store, ()):
                return role
        return None

    def lag(self, sp: StorePartition) -> LagInfo | None:
        return self.lags.get(sp.store, {}).get(sp.partition)

    def owns(self, sp: StorePartition) -> bool:
        """Whether this instance is ``sp``'s active (running or restoring)."""
        return sp.partition in self.active.get(sp.store, ()) or sp.partition in self.restoring.get(
            sp.store, ()
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": MEMBERSHIP_VERSION,
                "instance_id": self.instance_id,
                "endpoint": self.endpoint,
                "heartbeat_ms": self.heartbeat_ms,
                "interval_ms": self.interval_ms,
                "group_member_id": self.group_member_id,
                "group_instance_id": self.group_instance_id,
                "joining": self.joining,
                "lanes": self.lanes,
                "active": {s: list(p) for s, p in self.active.items()},
                "restoring": {s: list(p) for s, p in self.restoring.items()},
                "standby": {s: list(p) for s, p in self.standby.items()},
                "lags": {
                    store: {str(p): lag.to_json() for p, lag in sorted(parts.items())}
                    for store, parts in sorted(self.lags.items())
                },
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> MemberInfo:
        """Parse a membership record; ``ValueError`` when it is not one of this version."""
        try:
            data = json.loads(raw)
            if data["version"] != MEMBERSHIP_VERSION:
                raise ValueError(f"unsupported membership version {data['version']!r}")

            def parts(value: Mapping[str, Iterable[int]]) -> Partitions:
                return {str(s): tuple(sorted(int(p) for p in ps)) for s, ps in value.items()}

            endpoint = data.get("endpoint")
            member_id, group_instance_id = (
                data.get("group_member_id"),
                data.get("group_instance_id"),
            )
            return cls(
                instance_id=str(data["instance_id"]),
                endpoint=None if endpoint is None else str(endpoint),
                heartbeat_ms=int(data["heartbeat_ms"]),
                interval_ms=int(data["interval_ms"]),
                active=parts(data.get("active", {})),
                restoring=parts(data.get("restoring", {})),
                standby=parts(data.get("standby", {})),
                lags={
                    str(store): {int(p): LagInfo.from_json(lag) for p, lag in lags.items()}
                    for store, lags in data.get("lags", {}).items()
                },
                group_member_id=None if member_id is None else str(member_id),
                group_instance_id=None if group_instance_id is None else str(group_instance_id),
                joining=bool(data.get("joining", False)),
                lanes=bool(data.get("lanes", False)),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a membership record: {exc}") from exc


class MembershipView:
    """The latest membership record per instance (thread-safe).

    A record older than the one held for its instance (by heartbeat) is refused: a replayed
    record, even a validly signed one, cannot turn an instance's view back to an earlier
    assignment. (Heartbeats are the publishing instance's wall clock, so only that instance's
    own records are compared with each other.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, MemberInfo] = {}

    def update(self, instance_id: str, info: MemberInfo | None, left_ms: int | None = None) -> bool:
        """Take ``info`` for ``instance_id`` (``None``: it left, at ``left_ms`` when known);
        ``False`` when refused as older than the record held."""
        with self._lock:
            current = self._members.get(instance_id)
            if info is None:
                if current is not None and left_ms is not None and left_ms < current.heartbeat_ms:
                    return False
                self._members.pop(instance_id, None)
                return True
            if current is not None and info.heartbeat_ms < current.heartbeat_ms:
                return False
            self._members[instance_id] = info
            return True

    def members(self) -> dict[str, MemberInfo]:
        with self._lock:
            return dict(self._members)

    def live(self, now_ms: int | None = None, at_least_ms: int = 0) -> dict[str, MemberInfo]:
        """Members whose heartbeat is recent (see :meth:`MemberInfo.live`)."""
        now = epoch_ms() if now_ms is None else now_ms
        return {i: m for i, m in self.members().items() if m.live(now, at_least_ms)}

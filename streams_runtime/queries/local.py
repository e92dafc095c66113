"""A read served by this instance's own copy of a store partition (Kafka Streams'
``StreamThreadStateStoreProvider`` with KIP-535's stale stores): the running active first,
then, with ``allow_stale``, a standby within ``max_lag``, then a restoring active (lag
unknown, so only without ``max_lag``).

The read itself is the caller's (a point read, a key's windows, a partition's key range:
:mod:`streams_runtime.queries.reads`); this module picks the copy and says how it served:
its role and :class:`~streams_runtime.cluster.membership.LagInfo`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from streams_runtime.cluster.membership import LagInfo, StorePartition, epoch_ms
from streams_runtime.cluster.store_provider import LocalStoreProvider
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.queries.results import NoReplicaWithinBoundError, NotAvailableError
from streams_runtime.record import TaskId
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.topology import QueryableStore

__all__ = ["LocalCopies"]

logger = logging.getLogger("streams_runtime.queries.router")  # the name these logs had

T = TypeVar("T")

_ACTIVE_LAG = LagInfo(-1, -1, 0, 0)
_UNKNOWN_LAG = LagInfo(-1, -1, -1, -1)


class LocalCopies:
    """This instance's copies of store partitions, as queries read them (see the module
    docstring); counts each read served by role."""

    def __init__(self, stores: LocalStoreProvider, metrics: RuntimeMetrics, instance_id: str):
        self.stores = stores
        self.metrics = metrics
        self.instance_id = instance_id

    def serve(
        self,
        spec: QueryableStore,
        partition: int,
        read: Callable[[KeyValueStore | SessionStore], T],
        *,
        allow_stale: bool,
        max_lag: int | None,
    ) -> tuple[T, str, LagInfo]:
        """``read`` of partition ``partition`` of ``spec`` on this instance's copy: what it
        read, the role of the copy that served it (``active``, ``standby`` or
        ``restoring``), and the lag it was served at. :class:`NotAvailableError` when no copy
        here may answer."""
        stores, instance_id = self.stores, self.instance_id
        sp = StorePartition(spec.name, partition)
        task_id = TaskId(spec.subtopology, partition)

        def served(role: str, value: T, lag: LagInfo) -> tuple[T, str, LagInfo]:
            self.metrics.queries_served(role).inc()
            return value, role, lag

        def from_active() -> tuple[T, str, LagInfo] | None:
            lookup = stores.active(task_id)
            if lookup is None:
                return None
            try:
                value = read(lookup(spec.name))
            except (KeyError, RuntimeError, ValueError) as exc:
                _unreadable("active store", sp, exc)
                return None
            return served("active", value, _ACTIVE_LAG)

        answer = from_active()
        if answer is not None:
            return answer
        if not allow_stale:
            raise NotAvailableError(f"no running active copy of {sp} on {instance_id}")
        seen: list[dict[str, object]] = []
        replica = stores.standby(sp)
        if replica is not None:
            lag = replica.lag(epoch_ms())
            seen.append({"instance_id": instance_id, "role": "standby", **lag.to_json()})
            if lag.offset_lag >= 0 and (max_lag is None or lag.offset_lag <= max_lag):
                try:
                    return served("standby", read(replica.store), lag)
                except (RuntimeError, ValueError) as exc:
                    _unreadable("standby", sp, exc)
        restoring = stores.restoring(task_id)
        if restoring is not None:
            seen.append({"instance_id": instance_id, "role": "restoring", "offset_lag": -1})
            if max_lag is None:
                try:
                    return served("restoring", read(restoring(spec.name)), _UNKNOWN_LAG)
                except (KeyError, RuntimeError, ValueError) as exc:
                    _unreadable("restoring store", sp, exc)
        # The partition may have become active here meanwhile (and its standby been dropped).
        answer = from_active()
        if answer is not None:
            return answer
        raise NoReplicaWithinBoundError(
            f"no local copy of {sp} on {instance_id} within max_lag={max_lag}", seen
        )


def _unreadable(what: str, sp: StorePartition, exc: Exception) -> None:
    logger.debug(
        "%(what)s %(store)s/%(partition)d not readable: %(error)s",
        {"what": what, "store": sp.store, "partition": sp.partition, "error": str(exc)},
    )

"""Interactive queries (KIP-535): key metadata, local lags, local reads and the router.

``InteractiveQueries.get(store, key, allow_stale, max_lag)`` answers any key on any instance:

1. the live active copy (this instance's, or forwarded over HTTP to the instance that owns it,
   by :class:`~streams_runtime.queries.client.QueryForwarder`);
2. with ``allow_stale``: otherwise the most caught-up live standby (or restoring active) whose
   offset lag is within ``max_lag`` (lags from the membership records, checked again by the
   instance that serves);
3. otherwise :class:`NoReplicaWithinBoundError` listing the copies and lags seen.

Every answer says where it was served (``active`` / ``standby`` / ``restoring``) and at which
offset and time lag.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from streams_runtime.cluster.membership import LagInfo, MemberInfo, StorePartition, epoch_ms
from streams_runtime.cluster.store_provider import LocalStoreProvider
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.queries.client import ForwardError, QueryForwarder
from streams_runtime.queries.results import (
    InvalidKeyError,
    KeyQueryMetadata,
    NoReplicaWithinBoundError,
    NotAvailableError,
    QueryResult,
    UnknownStoreError,
)
from streams_runtime.queries.security import client_ssl_context, query_token
from streams_runtime.record import TaskId
from streams_runtime.serdes import (
    Bytes,
    Float,
    Integer,
    SerializationError,
    String,
    ValueAndTimestamp,
)
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import KeyValueStore, SessionStore, changelog_topic
from streams_runtime.topology import QueryableStore, Topology

if TYPE_CHECKING:  # imported by the app only with membership on: not at start-up otherwise
    from streams_runtime.cluster.replicator import Replicator

__all__ = ["InteractiveQueries", "key_from_text"]

logger = logging.getLogger(__name__)

_RETRY_S = 0.1


def key_from_text(spec: QueryableStore, text: str) -> int | float | bytes | str:
    """A key given as text (an HTTP path segment) as the store's key serde expects it."""
    serde = spec.key_serde
    try:
        if isinstance(serde, Integer):
            return int(text)
        if isinstance(serde, Float):
            return float(text)
        if isinstance(serde, Bytes):
            return text.encode("utf-8")
    except ValueError as exc:
        raise InvalidKeyError(
            f"store {spec.name!r} has {type(serde).__name__} keys, got {text!r}"
        ) from exc
    return text  # String, and Json keys as JSON strings


def _jsonable(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class InteractiveQueries:
    """The query side of one running instance (owned by :class:`~streams_runtime.App`)."""

    def __init__(
        self,
        topology: Topology,
        settings: RuntimeSettings,
        *,
        instance_id: str,
        partition_counts: dict[str, int],
        stores: LocalStoreProvider,
        replicator: Replicator | None,
        metrics: RuntimeMetrics,
    ) -> None:
        self.topology = topology
        self.settings = settings
        self.instance_id = instance_id
        self.partition_counts = partition_counts
        self.stores = stores
        self.replicator = replicator
        self.metrics = metrics
        # With TLS on, every instance serves HTTPS: forwarded queries verify the peer.
        # Forwards run on the query server's workers: one kept-alive connection per worker
        # and member.
        self._forwarder = QueryForwarder(
            ssl_context=client_ssl_context(settings),
            token=query_token(settings),
            timeout_s=settings.query_timeout_ms / 1000,
            connections_per_member=settings.query_workers,
        )
        self.forward: Callable[[str, str, str, bool, int | None], QueryResult] = (
            self._forwarder.forward
        )

    # -- metadata -----------------------------------------------------------------------------

    def store(self, name: str) -> QueryableStore:
        spec = self.topology.queryable_stores.get(name)
        if spec is None:
            raise UnknownStoreError(name, self.topology.queryable_stores)
        return spec

    def _serialize_key(self, spec: QueryableStore, key: object) -> bytes:
        if isinstance(spec.key_serde, String) and not isinstance(key, str):
            raise InvalidKeyError(f"store {spec.name!r} has string keys, got {type(key).__name__}")
        if isinstance(spec.key_serde, Integer) and (
            not isinstance(key, int) or isinstance(key, bool)
        ):
            raise InvalidKeyError(f"store {spec.name!r} has integer keys, got {type(key).__name__}")
        try:
            raw = spec.key_serde.serialize(key)
        except (SerializationError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidKeyError(f"key {key!r} does not fit store {spec.name!r}: {exc}") from exc
        if raw is None:
            raise InvalidKeyError("null keys are never in a store")
        return raw

    def partitions(self, spec: QueryableStore) -> int:
        count = self.partition_counts.get(changelog_topic(self.settings.application_id, spec.name))
        if not count:
            sub = self.topology.subtopologies[spec.subtopology]
            count = self.partition_counts.get(sub.source_topics[0], 0)
        if not count:
            raise NotAvailableError(f"partition count of store {spec.name!r} unknown")
        return count

    def partition_for(self, store: str, key: object) -> int:
        spec = self.store(store)
        return partition_for_key(self._serialize_key(spec, key), self.partitions(spec))

    def _members(self) -> dict[str, MemberInfo]:
        """The live members this instance believes: only records that verified with the
        membership secret enter the view (:mod:`streams_runtime.cluster.membership_auth`), so
        queries and the token are forwarded to verified members only."""
        if self.replicator is None:
            return {}
        members = self.replicator.view.live()
        members[self.instance_id] = self.replicator.member_info(with_lags=False)
        return members

    def query_metadata_for_key(self, store: str, key: object) -> KeyQueryMetadata:
        partition = self.partition_for(store, key)
        sp = StorePartition(store, partition)
        active, standbys = None, []
        for member in sorted(self._members().values(), key=lambda m: m.instance_id):
            if member.owns(sp) and active is None:
                active = member.endpoint
            elif member.role(sp) == "standby" and member.endpoint:
                standbys.append(member.endpoint)
        return KeyQueryMetadata(active, standbys, partition)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        if self.replicator is None:
            return {}
        out: dict[str, dict[int, LagInfo]] = {}
        for sp, lag in sorted(self.replicator.local_lags().items()):
            out.setdefault(sp.store, {})[sp.partition] = lag
        return out

    # -- local reads --------------------------------------------------------------------------

    def _read(
        self, spec: QueryableStore, store: KeyValueStore | SessionStore, raw: bytes
    ) -> tuple[bool, object, int | None]:
        if isinstance(store, KeyValueStore):
            data = store.get(raw)
            if data is None:
                return False, None, None
            stored = ValueAndTimestamp.from_bytes(data)
            return True, spec.value_serde.deserialize(stored.value), stored.timestamp
        sessions = store.find_sessions(raw, -(2**63), 2**63 - 1)
        values = [
            {"start": start, "end": end, "value": spec.value_serde.deserialize(value)}
            for start, end, value in sessions
        ]
        return bool(values), values, max((end for _, end, _ in sessions), default=None)

    def get_local(
        self, store: str, key: object, *, allow_stale: bool = False, max_lag: int | None = None
    ) -> QueryResult:
        """Answer from this instance's own copy: the running active first, then (with
        ``allow_stale``) a standby within ``max_lag``, then a restoring active (lag unknown, so
        only without ``max_lag``). :class:`NotAvailableError` when there is none."""
        spec = self.store(store)
        raw = self._serialize_key(spec, key)
        partition = partition_for_key(raw, self.partitions(spec))
        sp = StorePartition(store, partition)
        task_id = TaskId(spec.subtopology, partition)
        endpoint = self.replicator.endpoint if self.replicator else None

        def result(
            role: str, found: bool, value: object, ts: int | None, lag: LagInfo
        ) -> QueryResult:
            self.metrics.queries_served(role).inc()
            return QueryResult(
                store,
                _jsonable(key),
                found,
                _jsonable(value),
                ts,
                role,
                self.instance_id,
                endpoint,
                partition,
                lag.offset_lag,
                lag.time_lag_ms,
            )

        def from_active() -> QueryResult | None:
            stores = self.stores.active(task_id)
            if stores is None:
                return None
            try:
                found, value, ts = self._read(spec, stores(store), raw)
            except (KeyError, RuntimeError, ValueError) as exc:
                logger.debug(
                    "active store %(store)s/%(partition)d not readable: %(error)s",
                    {"store": sp.store, "partition": sp.partition, "error": str(exc)},
                )
                return None
            return result("active", found, value, ts, LagInfo(-1, -1, 0, 0))

        answer = from_active()
        if answer is not None:
            return answer
        if not allow_stale:
            raise NotAvailableError(f"no running active copy of {sp} on {self.instance_id}")
        seen: list[dict[str, object]] = []
        replica = self.stores.standby(sp)
        if replica is not None:
            lag = replica.lag(epoch_ms())
            seen.append({"instance_id": self.instance_id, "role": "standby", **lag.to_json()})
            if lag.offset_lag >= 0 and (max_lag is None or lag.offset_lag <= max_lag):
                try:
                    found, value, ts = self._read(spec, replica.store, raw)
                    return result("standby", found, value, ts, lag)
                except (RuntimeError, ValueError) as exc:
                    logger.debug(
                        "standby %(store)s/%(partition)d not readable: %(error)s",
                        {"store": sp.store, "partition": sp.partition, "error": str(exc)},
                    )
        restoring = self.stores.restoring(task_id)
        if restoring is not None:
            seen.append({"instance_id": self.instance_id, "role": "restoring", "offset_lag": -1})
            if max_lag is None:
                try:
                    found, value, ts = self._read(spec, restoring(store), raw)
                    return result("restoring", found, value, ts, LagInfo(-1, -1, -1, -1))
                except (KeyError, RuntimeError, ValueError) as exc:
                    logger.debug(
                        "restoring store %(store)s/%(partition)d not readable: %(error)s",
                        {"store": sp.store, "partition": sp.partition, "error": str(exc)},
                    )
        # The partition may have become active here meanwhile (and its standby been dropped).
        answer = from_active()
        if answer is not None:
            return answer
        raise NoReplicaWithinBoundError(
            f"no local copy of {sp} on {self.instance_id} within max_lag={max_lag}", seen
        )

    # -- routing ------------------------------------------------------------------------------

    def get(
        self, store: str, key: object, *, allow_stale: bool = False, max_lag: int | None = None
    ) -> QueryResult:
        """Answer ``key`` from wherever it lives (see the module docstring). A failed routing
        pass is retried once with a fresh view after ``_RETRY_S``: copies move between roles
        (standby to active) faster than membership records say so."""
        try:
            return self._route(store, key, allow_stale=allow_stale, max_lag=max_lag)
        except NotAvailableError:
            time.sleep(_RETRY_S)
        return self._route(store, key, allow_stale=allow_stale, max_lag=max_lag)

    def _route(
        self, store: str, key: object, *, allow_stale: bool, max_lag: int | None
    ) -> QueryResult:
        if self.replicator is None:
            # No membership (no application_server, no standbys): this instance knows no other,
            # so its own copies are the only ones to ask, as Kafka Streams' local stores.
            return self.get_local(store, key, allow_stale=allow_stale, max_lag=max_lag)
        spec = self.store(store)
        raw = self._serialize_key(spec, key)
        if max_lag is not None and max_lag < 0:
            raise InvalidKeyError(f"max_lag must be >= 0, got {max_lag}")
        partition = partition_for_key(raw, self.partitions(spec))
        sp = StorePartition(store, partition)
        members = self._members()
        seen: list[dict[str, object]] = []
        # 1. The live active.
        actives = [m for m in members.values() if m.role(sp) == "active"]
        for member in sorted(actives, key=lambda m: m.instance_id != self.instance_id):
            seen.append({"instance_id": member.instance_id, "role": "active", "offset_lag": 0})
            result = self._ask_or_log(member, sp, key, "active", allow_stale=False, max_lag=None)
            if result is not None:
                return result
        if not allow_stale:
            self.metrics.routing_failures("unavailable").inc()
            raise NotAvailableError(
                f"no live active copy of {sp} answered (stale reads not allowed)"
            )
        # 2. The most caught-up live standby (or restoring active) within the bound.
        candidates: list[tuple[int, str, MemberInfo, str]] = []
        for member in members.values():
            role = member.role(sp)
            if role not in {"standby", "restoring"}:
                continue
            lag = member.lag(sp)
            offset_lag = lag.offset_lag if lag is not None else -1
            if member.instance_id == self.instance_id and self.replicator is not None:
                fresh = self.replicator.standby_lag(sp)
                offset_lag = fresh.offset_lag if fresh is not None else offset_lag
            seen.append(
                {
                    "instance_id": member.instance_id,
                    "role": role,
                    "offset_lag": offset_lag,
                    "time_lag_ms": lag.time_lag_ms if lag is not None else -1,
                }
            )
            if role == "restoring" and max_lag is None:
                candidates.append((2**62, member.instance_id, member, role))
            elif offset_lag >= 0 and (max_lag is None or offset_lag <= max_lag):
                candidates.append((offset_lag, member.instance_id, member, role))
        for _lag, _instance, member, _role in sorted(candidates, key=lambda c: (c[0], c[1])):
            result = self._ask_or_log(member, sp, key, "copy", allow_stale=True, max_lag=max_lag)
            if result is not None:
                return result
        self.metrics.routing_failures("no-replica").inc()
        raise NoReplicaWithinBoundError(f"no live copy of {sp} within max_lag={max_lag}", seen)

    def _ask_or_log(
        self,
        member: MemberInfo,
        sp: StorePartition,
        key: object,
        what: str,
        *,
        allow_stale: bool,
        max_lag: int | None,
    ) -> QueryResult | None:
        """``_ask``, or ``None`` (counted and logged, ``what`` naming the copy) when the member
        does not answer, so routing moves on to the next candidate."""
        try:
            return self._ask(member, sp.store, key, allow_stale=allow_stale, max_lag=max_lag)
        except (NotAvailableError, ForwardError) as exc:
            self.metrics.routing_failures("forward-failed").inc()
            logger.info(
                "%(what)s %(instance)s of %(store)s/%(partition)d did not answer: %(error)s",
                {
                    "what": what,
                    "instance": member.instance_id,
                    "store": sp.store,
                    "partition": sp.partition,
                    "error": str(exc),
                },
            )
            return None

    def _ask(
        self, member: MemberInfo, store: str, key: object, *, allow_stale: bool, max_lag: int | None
    ) -> QueryResult:
        if member.instance_id == self.instance_id:
            return self.get_local(store, key, allow_stale=allow_stale, max_lag=max_lag)
        if not member.endpoint:
            raise ForwardError(f"instance {member.instance_id} has no query endpoint")
        spec = self.store(store)
        text = key.decode("utf-8") if isinstance(key, bytes) else str(key)
        if not isinstance(spec.key_serde, String | Integer | Float | Bytes) and not isinstance(
            key, str
        ):
            raise ForwardError(f"cannot forward a {type(key).__name__} key as text")
        return self.forward(member.endpoint, store, text, allow_stale, max_lag)

    def close(self) -> None:
        """Close the connections kept for forwarding queries."""
        self._forwarder.close()

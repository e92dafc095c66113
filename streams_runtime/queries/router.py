"""Interactive queries (KIP-535): key metadata, local lags, and the router (Kafka Streams'
``KafkaStreams.query``/``store`` with ``StreamsMetadataState``).

``InteractiveQueries.get(store, key, allow_stale, max_lag, read)`` answers any key on any
instance (``read``: the value, or a key's windows or sessions,
:mod:`streams_runtime.queries.reads`):

1. the live active copy (this instance's, or forwarded over HTTP to the instance that owns it,
   by :class:`~streams_runtime.queries.client.QueryForwarder`);
2. with ``allow_stale``: otherwise the most caught-up live standby (or restoring active) whose
   offset lag is within ``max_lag`` (lags from the membership records, checked again by the
   instance that serves);
3. otherwise :class:`NoReplicaWithinBoundError` listing the copies and lags seen.

Every answer says where it was served (``active`` / ``standby`` / ``restoring``) and at which
offset and time lag.

``InteractiveQueries.query_range(store, read, partitions, allow_stale, max_lag)`` reads many
keys (a key range, a prefix, every key's windows in a time range), as IQv2's
``StateQueryRequest`` over all partitions: each partition is routed as a key of it would be
(its own copy here, or forwarded with ``partitions=N&local=true``), and the partitions' entries,
each in the read's order, are merged into one list in that order (by serialized key, or by
window start then key). The answer says who served each partition at which lag.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from streams_runtime.cluster.membership import LagInfo, MemberInfo, StorePartition
from streams_runtime.cluster.store_provider import LocalStoreProvider
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.queries.client import ForwardError, QueryForwarder
from streams_runtime.queries.local import LocalCopies
from streams_runtime.queries.reads import (
    KeyRead,
    PartitionRead,
    PointRead,
    jsonable,
    merge_partitions,
)
from streams_runtime.queries.results import (
    InvalidKeyError,
    KeyQueryMetadata,
    NoReplicaWithinBoundError,
    NotAvailableError,
    PartitionResult,
    QueryResult,
    RangeResult,
    UnknownStoreError,
    UnsupportedQueryError,
)
from streams_runtime.queries.security import client_ssl_context, query_token
from streams_runtime.serdes import Bytes, Float, Integer, Serde, SerializationError, String
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import KeyValueStore, SessionStore, changelog_topic
from streams_runtime.topology import QueryableStore, Topology

if TYPE_CHECKING:  # imported by the app only with membership on: not at start-up otherwise
    from streams_runtime.cluster.replicator import Replicator

__all__ = ["InteractiveQueries", "key_from_text"]

logger = logging.getLogger(__name__)

_RETRY_S = 0.1
POINT = PointRead()
_GLOBAL_LAG = LagInfo(-1, -1, 0, 0)  # a global store: this instance's own live copy
T = TypeVar("T")


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
        self.local = LocalCopies(stores, metrics, instance_id)
        # With TLS on, every instance serves HTTPS: forwarded queries verify the peer.
        # Forwards run on the query server's workers: one kept-alive connection per worker
        # and member.
        self._forwarder = QueryForwarder(
            ssl_context=client_ssl_context(settings),
            token=query_token(settings),
            timeout_s=settings.query_timeout_ms / 1000,
            connections_per_member=settings.query_workers,
        )

    # -- metadata -----------------------------------------------------------------------------

    def store(self, name: str) -> QueryableStore:
        spec = self.topology.queryable_stores.get(name)
        if spec is None:
            raise UnknownStoreError(name, self.topology.queryable_stores)
        return spec

    def _serialize_key(
        self, spec: QueryableStore, key: object, serde: Serde[Any] | None = None
    ) -> bytes:
        serde = spec.key_serde if serde is None else serde
        if isinstance(serde, String) and not isinstance(key, str):
            raise InvalidKeyError(f"store {spec.name!r} has string keys, got {type(key).__name__}")
        if isinstance(serde, Integer) and (not isinstance(key, int) or isinstance(key, bool)):
            raise InvalidKeyError(f"store {spec.name!r} has integer keys, got {type(key).__name__}")
        try:
            raw = serde.serialize(key)
        except (SerializationError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidKeyError(f"key {key!r} does not fit store {spec.name!r}: {exc}") from exc
        if raw is None:
            raise InvalidKeyError("null keys are never in a store")
        return raw

    def serialize_key(self, store: str, key: object, serde: Serde[Any] | None = None) -> bytes:
        """``key`` (a range bound, a prefix) as ``store`` holds it, serialized with its key
        serde or ``serde``; :class:`InvalidKeyError` when it does not fit."""
        return self._serialize_key(self.store(store), key, serde)

    def partitions(self, spec: QueryableStore) -> int:
        if spec.name in self.topology.global_stores:
            return 1  # whole on every instance: one copy, answered here
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
        if store in self.topology.global_stores:  # on every instance: this one, as Kafka Streams
            self.partition_for(store, key)  # the key must fit
            return KeyQueryMetadata(self._endpoint(), [], -1)
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

    def _endpoint(self) -> str | None:
        return self.replicator.endpoint if self.replicator else None

    def _check(self, spec: QueryableStore, read: KeyRead | PartitionRead) -> None:
        if spec.kind not in read.kinds:
            raise UnsupportedQueryError(
                f"store {spec.name!r} is a {spec.kind} store: it does not answer "
                f"{type(read).__name__} (stores that do: {', '.join(sorted(read.kinds))})"
            )

    def get_local(
        self,
        store: str,
        key: object,
        *,
        allow_stale: bool = False,
        max_lag: int | None = None,
        read: KeyRead = POINT,
    ) -> QueryResult:
        """Answer ``read`` of ``key`` from this instance's own copy
        (:class:`~streams_runtime.queries.local.LocalCopies`); :class:`NotAvailableError` when
        there is none."""
        spec = self.store(store)
        self._check(spec, read)
        raw = self._serialize_key(spec, key)
        partition = partition_for_key(raw, self.partitions(spec))
        (found, value, ts), role, lag = self._serve(
            spec,
            partition,
            lambda copy: read.read(spec, copy, raw),
            allow_stale=allow_stale,
            max_lag=max_lag,
        )
        return QueryResult(
            store,
            jsonable(key),
            found,
            value,
            ts,
            role,
            self.instance_id,
            self._endpoint(),
            partition,
            lag.offset_lag,
            lag.time_lag_ms,
        )

    def range_local(
        self,
        store: str,
        read: PartitionRead,
        partitions: Iterable[int] | None = None,
        *,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """Answer ``read`` of ``partitions`` (default: all) from this instance's own copies;
        :class:`NotAvailableError` when one of them has none here."""
        spec = self.store(store)
        self._check(spec, read)
        answers = [
            self._partition_local(spec, read, partition, allow_stale, max_lag)
            for partition in self._partition_list(spec, partitions)
        ]
        return self._gathered(spec, read, answers)

    def _partition_local(
        self,
        spec: QueryableStore,
        read: PartitionRead,
        partition: int,
        allow_stale: bool,
        max_lag: int | None,
    ) -> RangeResult:
        entries, role, lag = self._serve(
            spec,
            partition,
            lambda copy: read.read(spec, copy),
            allow_stale=allow_stale,
            max_lag=max_lag,
        )
        served = PartitionResult(
            partition, role, self.instance_id, self._endpoint(), lag.offset_lag, lag.time_lag_ms
        )
        return RangeResult(spec.name, entries, [served])

    def _partition_list(self, spec: QueryableStore, partitions: Iterable[int] | None) -> list[int]:
        count = self.partitions(spec)
        if partitions is None:
            return list(range(count))
        chosen = list(partitions)
        wrong = [
            p for p in chosen if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < count
        ]
        if wrong:
            raise InvalidKeyError(f"store {spec.name!r} has partitions 0..{count - 1}, not {wrong}")
        return sorted(set(chosen))

    @staticmethod
    def _gathered(
        spec: QueryableStore, read: PartitionRead, answers: list[RangeResult]
    ) -> RangeResult:
        """One answer of the partitions' answers: their entries merged in ``read``'s order
        (:func:`~streams_runtime.queries.reads.merge_partitions`), who served each."""
        entries = merge_partitions(spec, read, [answer.entries for answer in answers])
        served = sorted((p for a in answers for p in a.partitions), key=lambda p: p.partition)
        return RangeResult(spec.name, entries, served)

    # -- routing ------------------------------------------------------------------------------

    def get(
        self,
        store: str,
        key: object,
        *,
        allow_stale: bool = False,
        max_lag: int | None = None,
        read: KeyRead = POINT,
    ) -> QueryResult:
        """Answer ``read`` of ``key`` (default: its value) from wherever it lives (see the module
        docstring)."""
        return _retried(lambda: self._route_key(store, key, read, allow_stale, max_lag))

    def query_range(
        self,
        store: str,
        read: PartitionRead,
        partitions: Iterable[int] | None = None,
        *,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """Answer ``read`` from every partition of ``store`` (or ``partitions``), each routed
        to its copy as a key's query is (the live active; with ``allow_stale`` the most
        caught-up copy within ``max_lag``), one after the other; their entries merged in the
        read's order. Any partition without an answer fails the whole read (a range never
        silently misses keys)."""
        spec = self.store(store)
        self._check(spec, read)
        _check_max_lag(max_lag)
        answers = [
            _retried(
                functools.partial(
                    self._route_partition, spec, read, partition, allow_stale, max_lag
                )
            )
            for partition in self._partition_list(spec, partitions)
        ]
        return self._gathered(spec, read, answers)

    def _serve(
        self,
        spec: QueryableStore,
        partition: int,
        read: Callable[[KeyValueStore | SessionStore], T],
        *,
        allow_stale: bool,
        max_lag: int | None,
    ) -> tuple[T, str, LagInfo]:
        """``read`` on this instance's copy of ``partition``
        (:class:`~streams_runtime.queries.local.LocalCopies`); a global table's store is whole
        and live on every instance, so it answers here, as the active copy at lag 0."""
        if spec.name in self.topology.global_stores:
            found = self.topology.global_state.get(spec.name)
            if found is None:
                raise NotAvailableError(f"global store {spec.name!r} is not open here (yet)")
            self.metrics.queries_served("active").inc()
            return read(found), "active", _GLOBAL_LAG
        return self.local.serve(spec, partition, read, allow_stale=allow_stale, max_lag=max_lag)

    def _route_key(
        self, store: str, key: object, read: KeyRead, allow_stale: bool, max_lag: int | None
    ) -> QueryResult:
        if self.replicator is None or store in self.topology.global_stores:
            # No membership (no application_server, no standbys): this instance knows no other,
            # so its own copies are the only ones to ask, as Kafka Streams' local stores.
            return self.get_local(store, key, allow_stale=allow_stale, max_lag=max_lag, read=read)
        spec = self.store(store)
        self._check(spec, read)
        raw = self._serialize_key(spec, key)
        _check_max_lag(max_lag)
        sp = StorePartition(store, partition_for_key(raw, self.partitions(spec)))

        def ask(member: MemberInfo, stale: bool, bound: int | None) -> QueryResult:
            if member.instance_id == self.instance_id:
                return self.get_local(store, key, allow_stale=stale, max_lag=bound, read=read)
            if not member.endpoint:
                raise ForwardError(f"instance {member.instance_id} has no query endpoint")
            text = key.decode("utf-8") if isinstance(key, bytes) else str(key)
            if not isinstance(spec.key_serde, String | Integer | Float | Bytes) and not isinstance(
                key, str
            ):
                raise ForwardError(f"cannot forward a {type(key).__name__} key as text")
            return self._forwarder.forward(
                member.endpoint, store, text, stale, bound, path=read.path, params=read.params()
            )

        return self._route(sp, ask, allow_stale, max_lag)

    def _route_partition(
        self,
        spec: QueryableStore,
        read: PartitionRead,
        partition: int,
        allow_stale: bool,
        max_lag: int | None,
    ) -> RangeResult:
        if self.replicator is None or spec.name in self.topology.global_stores:
            return self._partition_local(spec, read, partition, allow_stale, max_lag)

        def ask(member: MemberInfo, stale: bool, bound: int | None) -> RangeResult:
            if member.instance_id == self.instance_id:
                return self._partition_local(spec, read, partition, stale, bound)
            if not member.endpoint:
                raise ForwardError(f"instance {member.instance_id} has no query endpoint")
            return self._forwarder.forward_partition(
                member.endpoint, spec.name, read.path, read.params(), partition, stale, bound
            )

        return self._route(StorePartition(spec.name, partition), ask, allow_stale, max_lag)

    def _route(
        self,
        sp: StorePartition,
        ask: Callable[[MemberInfo, bool, int | None], T],
        allow_stale: bool,
        max_lag: int | None,
    ) -> T:
        """What ``ask(member, allow_stale, max_lag)`` answers from the copy of ``sp`` that may
        serve it: the live active, or with ``allow_stale`` the most caught-up live copy within
        ``max_lag`` (see the module docstring)."""
        members = self._members()
        seen: list[dict[str, object]] = []
        # 1. The live active.
        actives = [m for m in members.values() if m.role(sp) == "active"]
        for member in sorted(actives, key=lambda m: m.instance_id != self.instance_id):
            seen.append({"instance_id": member.instance_id, "role": "active", "offset_lag": 0})
            result = self._ask_or_log(
                member, sp, "active", functools.partial(ask, member, False, None)
            )
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
            result = self._ask_or_log(
                member, sp, "copy", functools.partial(ask, member, True, max_lag)
            )
            if result is not None:
                return result
        self.metrics.routing_failures("no-replica").inc()
        raise NoReplicaWithinBoundError(f"no live copy of {sp} within max_lag={max_lag}", seen)

    def _ask_or_log(
        self, member: MemberInfo, sp: StorePartition, what: str, ask: Callable[[], T]
    ) -> T | None:
        """``ask()``, or ``None`` (counted and logged, ``what`` naming the copy) when the member
        does not answer, so routing moves on to the next candidate."""
        try:
            return ask()
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

    def close(self) -> None:
        """Close the connections kept for forwarding queries."""
        self._forwarder.close()


def _check_max_lag(max_lag: int | None) -> None:
    if max_lag is not None and max_lag < 0:
        raise InvalidKeyError(f"max_lag must be >= 0, got {max_lag}")


def _retried(route: Callable[[], T]) -> T:
    """``route()``, tried once more after ``_RETRY_S`` when it found no copy: copies move
    between roles (standby to active) faster than membership records say so."""
    try:
        return route()
    except NotAvailableError:
        time.sleep(_RETRY_S)
    return route()

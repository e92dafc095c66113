"""What an interactive query reads from one store partition: Kafka Streams' IQv2 query types
(``KeyQuery``, ``RangeQuery``, ``WindowKeyQuery``, ``WindowRangeQuery``) and what its
``StoreQueryUtils`` runs for each against a store.

Two families, told apart by how they are routed (:mod:`streams_runtime.queries.router`):

- a :class:`KeyRead` reads one key, so the key's partition answers it, as a point query:
  :class:`PointRead` (the value, or a windowed store's windows of the key),
  :class:`WindowKeyRead` (``WindowKeyQuery.withKeyAndWindowStartRange``: the key's windows
  starting in ``[time_from, time_to]``, by start) and :class:`SessionKeyRead` (a session
  store's ``fetch(key)`` / ``findSessions``: by end, then start);
- a :class:`PartitionRead` reads every key of a partition, so every partition answers its part
  and the parts are merged in the read's order (:func:`merge_partitions`): :class:`KeyRange`
  (``RangeQuery``: ``range``, ``reverseRange``, ``all``, ``reverseAll``; and ``prefixScan``)
  and :class:`WindowStartRange` (``WindowRangeQuery.withWindowStartRange``: ``fetchAll``).

Each read also says how it travels to another instance (:meth:`KeyRead.params`,
:meth:`PartitionRead.params`: keys as base64 of their serialized bytes, so a forwarded bound is
exactly the one asked). Reads see the store as interactive queries read it: through the record
cache (:meth:`streams_runtime.processing.task.StreamTask.query_store`).
"""

from __future__ import annotations

import base64
import heapq
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from streams_runtime.serdes import Bytes, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.state.stores import EARLIEST, LATEST, windows_of
from streams_runtime.topology import QueryableStore

__all__ = [
    "ANY_STORE",
    "KeyRange",
    "KeyRead",
    "PartitionRead",
    "PointRead",
    "SessionKeyRead",
    "WindowKeyRead",
    "WindowStartRange",
    "b64",
    "clamp_time",
    "jsonable",
    "merge_partitions",
]

Store = KeyValueStore | SessionStore
Entry = dict[str, Any]
ANY_STORE = frozenset({"key_value", "session", "window"})


def jsonable(value: object) -> object:
    """``value`` as JSON can carry it: bytes as base64, tuples as lists, dict keys as text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def clamp_time(time: int) -> int:
    """``time`` within what a store holds (64-bit milliseconds), so any int is a bound."""
    return min(max(time, EARLIEST), LATEST)


def _windows(spec: QueryableStore, found: Iterable[tuple[int, int, bytes]]) -> list[Entry]:
    deserialize = spec.value_serde.deserialize
    return [
        {"start": start, "end": end, "value": jsonable(deserialize(value))}
        for start, end, value in found
    ]


def _answer(windows: list[Entry]) -> tuple[bool, object, int | None]:
    return bool(windows), windows, max((w["end"] for w in windows), default=None)


# -- one key -------------------------------------------------------------------------------------


class KeyRead(ABC):
    """A read of one key, answered by the copy of the key's partition."""

    kinds: ClassVar[frozenset[str]]
    """The store kinds that answer it (another: ``UnsupportedQueryError``)."""
    path: ClassVar[str]
    """What follows ``/stores/{store}/keys/{key}`` in its HTTP path."""

    @abstractmethod
    def read(
        self, spec: QueryableStore, store: Store, raw: bytes
    ) -> tuple[bool, object, int | None]:
        """``(found, value, timestamp)`` of the serialized key ``raw`` in ``store``."""

    def params(self) -> dict[str, str]:
        """The HTTP parameters that ask another instance for the same read."""
        return {}


class PointRead(KeyRead):
    """The value of a key (``KeyQuery``); of a session or window store, every window of the
    key, by ``(start, end)``, the timestamp the latest end."""

    kinds = ANY_STORE
    path = ""

    def read(
        self, spec: QueryableStore, store: Store, raw: bytes
    ) -> tuple[bool, object, int | None]:
        if isinstance(store, KeyValueStore):
            data = store.get(raw)
            if data is None:
                return False, None, None
            stored = ValueAndTimestamp.from_bytes(data)
            return True, jsonable(spec.value_serde.deserialize(stored.value)), stored.timestamp
        return _answer(_windows(spec, store.find_sessions(raw, EARLIEST, LATEST)))


@dataclass(frozen=True)
class WindowKeyRead(KeyRead):
    """``WindowKeyQuery.withKeyAndWindowStartRange(key, time_from, time_to)``: the key's windows
    starting in ``[time_from, time_to]``, ascending by start; none when ``time_from >
    time_to``."""

    time_from: int = EARLIEST
    time_to: int = LATEST
    kinds: ClassVar[frozenset[str]] = frozenset({"window"})
    path: ClassVar[str] = "/windows"

    def read(
        self, spec: QueryableStore, store: Store, raw: bytes
    ) -> tuple[bool, object, int | None]:
        assert isinstance(store, SessionStore)
        found = windows_of(store, raw, clamp_time(self.time_from), clamp_time(self.time_to))
        return _answer(_windows(spec, found))

    def params(self) -> dict[str, str]:
        return {"from": str(self.time_from), "to": str(self.time_to)}


@dataclass(frozen=True)
class SessionKeyRead(KeyRead):
    """A session store's ``fetch(key)``, or with bounds ``findSessions(key,
    earliest_session_end, latest_session_start)``: by end, then start (descending: their
    ``backwardFetch`` / ``backwardFindSessions``)."""

    earliest_end: int = EARLIEST
    latest_start: int = LATEST
    descending: bool = False
    kinds: ClassVar[frozenset[str]] = frozenset({"session"})
    path: ClassVar[str] = "/sessions"

    def read(
        self, spec: QueryableStore, store: Store, raw: bytes
    ) -> tuple[bool, object, int | None]:
        assert isinstance(store, SessionStore)
        found = store.sessions(
            raw,
            clamp_time(self.earliest_end),
            clamp_time(self.latest_start),
            reverse=self.descending,
        )
        return _answer(_windows(spec, found))

    def params(self) -> dict[str, str]:
        return {
            "earliest_end": str(self.earliest_end),
            "latest_start": str(self.latest_start),
            "descending": str(self.descending).lower(),
        }


# -- every key of a partition ------------------------------------------------------------------


class PartitionRead(ABC):
    """A read of every key of a partition (in a range), answered partition by partition."""

    kinds: ClassVar[frozenset[str]]
    descending: bool = False

    @property
    @abstractmethod
    def path(self) -> str:
        """What follows ``/stores/{store}`` in its HTTP path."""

    @abstractmethod
    def read(self, spec: QueryableStore, store: Store) -> list[Entry]:
        """The entries of one partition's copy, in the read's order."""

    @abstractmethod
    def order(self, spec: QueryableStore, entry: Entry) -> tuple[Any, ...]:
        """Where ``entry`` sorts among every partition's (:func:`merge_partitions`)."""

    @abstractmethod
    def params(self) -> dict[str, str]:
        """The HTTP parameters that ask another instance for the same read."""


def _key_bytes(spec: QueryableStore, key: object) -> bytes:
    """The serialized key an answer's JSON key came from (the order a store keeps)."""
    if isinstance(spec.key_serde, Bytes) and isinstance(key, str):
        return base64.b64decode(key)
    return spec.key_serde.serialize(key) or b""


@dataclass(frozen=True)
class KeyRange(PartitionRead):
    """``RangeQuery``: the keys with ``lower <= key <= upper`` (serialized; ``None``:
    unbounded), ascending by their bytes or descending (``withDescendingKeys``), none when
    ``lower > upper``; or, with ``prefix``, ``prefixScan``: the keys starting with it."""

    lower: bytes | None = None
    upper: bytes | None = None
    descending: bool = False
    prefix: bytes | None = None
    kinds: ClassVar[frozenset[str]] = frozenset({"key_value"})

    @property
    def path(self) -> str:
        return "/range" if self.prefix is None else "/prefix"

    def read(self, spec: QueryableStore, store: Store) -> list[Entry]:
        assert isinstance(store, KeyValueStore)
        if self.prefix is not None:
            found = store.prefix_scan(self.prefix)
        else:
            found = store.range(self.lower, self.upper, reverse=self.descending)
        deserialize_key, deserialize = spec.key_serde.deserialize, spec.value_serde.deserialize
        entries = []
        for raw, data in found:
            stored = ValueAndTimestamp.from_bytes(data)
            entries.append(
                {
                    "key": jsonable(deserialize_key(raw)),
                    "value": jsonable(deserialize(stored.value)),
                    "timestamp": stored.timestamp,
                }
            )
        return entries

    def order(self, spec: QueryableStore, entry: Entry) -> tuple[Any, ...]:
        return (_key_bytes(spec, entry["key"]),)

    def params(self) -> dict[str, str]:
        if self.prefix is not None:
            return {"prefix_b64": b64(self.prefix)}
        params = {"descending": str(self.descending).lower()}
        if self.lower is not None:
            params["from_b64"] = b64(self.lower)
        if self.upper is not None:
            params["to_b64"] = b64(self.upper)
        return params


@dataclass(frozen=True)
class WindowStartRange(PartitionRead):
    """``WindowRangeQuery.withWindowStartRange(time_from, time_to)`` (``fetchAll``): every
    key's windows starting in ``[time_from, time_to]``, by start, then key bytes, then end;
    none when ``time_from > time_to``."""

    time_from: int = EARLIEST
    time_to: int = LATEST
    kinds: ClassVar[frozenset[str]] = frozenset({"window"})

    @property
    def path(self) -> str:
        return "/windows"

    def read(self, spec: QueryableStore, store: Store) -> list[Entry]:
        assert isinstance(store, SessionStore)
        found = store.windows_starting(clamp_time(self.time_from), clamp_time(self.time_to))
        deserialize_key, deserialize = spec.key_serde.deserialize, spec.value_serde.deserialize
        return [
            {
                "key": jsonable(deserialize_key(raw)),
                "start": start,
                "end": end,
                "value": jsonable(deserialize(value)),
            }
            for raw, start, end, value in found
        ]

    def order(self, spec: QueryableStore, entry: Entry) -> tuple[Any, ...]:
        return (entry["start"], _key_bytes(spec, entry["key"]), entry["end"])

    def params(self) -> dict[str, str]:
        return {"from": str(self.time_from), "to": str(self.time_to)}


def merge_partitions(
    spec: QueryableStore, read: PartitionRead, parts: Iterable[list[Entry]]
) -> list[Entry]:
    """The entries of every partition, each list in ``read``'s order, merged into one in that
    order. A key lives in one partition, so no key is twice."""
    return list(
        heapq.merge(*parts, key=lambda entry: read.order(spec, entry), reverse=read.descending)
    )

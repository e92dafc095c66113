"""What an interactive query answers: :class:`QueryResult`, :class:`KeyQueryMetadata`, and
the :class:`QueryError` family, each with the HTTP status and the error code
(``{"error": code, "message": ...}``) the query server answers with.

A key absent from a store is an answer, not an error: a :class:`QueryResult` with ``found``
false and ``value`` ``None`` (HTTP 200), as Kafka Streams' ``ReadOnlyKeyValueStore.get``
returns null. A store the topology does not have is an error: :class:`UnknownStoreError`
(HTTP 404, ``"error": "unknown-store"``), naming the stores there are
(docs/runtime/queries.md#errors).

A read of many keys (a key range, a prefix, every key's windows in a time range) is a
:class:`RangeResult`: the entries of every partition asked, merged in the read's order, and per
partition who served it at which lag (:class:`PartitionResult`), as Kafka Streams' IQv2
``StateQueryResult`` holds one ``QueryResult`` per partition. A store kind that does not answer
a read (a key range of a window store) is :class:`UnsupportedQueryError` (IQv2's
``UNKNOWN_QUERY_TYPE``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "InvalidKeyError",
    "KeyQueryMetadata",
    "NoReplicaWithinBoundError",
    "NotAvailableError",
    "PartitionResult",
    "QueryError",
    "QueryResult",
    "RangeResult",
    "UnknownStoreError",
    "UnsupportedQueryError",
]


class QueryError(Exception):
    """A query that cannot be answered; ``status`` is the HTTP status the server uses and
    ``code`` the ``error`` field of its JSON body."""

    status = 500
    code = "query-failed"

    def to_json(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self)}


STORE_NAMING_HINT = (
    "a store is named by name= on count/reduce/aggregate (and suppress), or store_name= on "
    "StreamsBuilder.table and Table.filter; see docs/runtime/dsl.md#naming-stores"
)


class UnknownStoreError(QueryError, KeyError):
    """The topology has no queryable store ``store``; ``queryable`` lists those it has."""

    status = 404
    code = "unknown-store"

    def __init__(self, store: str, queryable: Iterable[str] = ()) -> None:
        super().__init__(store)
        self.store = store
        self.queryable = sorted(queryable)

    def __str__(self) -> str:
        return f"unknown store {self.store!r}; queryable: {self.queryable} ({STORE_NAMING_HINT})"

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "store": self.store, "queryable": self.queryable}


class InvalidKeyError(QueryError, ValueError):
    """A key (or a query parameter) the store cannot take."""

    status = 400
    code = "invalid-key"


class UnsupportedQueryError(QueryError, TypeError):
    """A read the store's kind does not answer: a key range or prefix of a session or window
    store, windows of a key-value store, sessions of a window store (IQv2's
    ``FailureReason.UNKNOWN_QUERY_TYPE``)."""

    status = 400
    code = "unknown-query-type"


class NotAvailableError(QueryError):
    """No copy this query may be served from (e.g. no live active, stale reads not allowed,
    or the app not running)."""

    status = 503
    code = "not-available"


class NoReplicaWithinBoundError(NotAvailableError):
    """No live copy within ``max_lag``; ``lags`` lists what was seen."""

    code = "no-replica-within-bound"

    def __init__(self, message: str, lags: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.lags = lags

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "lags": self.lags}


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key lives: the query endpoint of its active copy (``None`` while no live
    instance owns it), the endpoints of its standbys, and its partition."""

    active_host: str | None
    standby_hosts: list[str]
    partition: int


@dataclass
class QueryResult:
    """One answer: ``found`` (false for a key the store does not hold, ``value`` then
    ``None``), ``value`` (a table's value, or for a session or window store a list of
    ``{"start", "end", "value"}``), where it was served, and the lag it was served at."""

    store: str
    key: object
    found: bool
    value: Any
    timestamp: int | None
    served_by: str  # active, standby or restoring
    instance_id: str
    host: str | None
    partition: int
    offset_lag: int
    time_lag_ms: int
    stale: bool = field(init=False)

    def __post_init__(self) -> None:
        self.stale = self.served_by != "active"

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueryResult:
        """The answer in ``data`` (fields it does not know, e.g. a newer instance's, ignored)."""
        names = {f.name for f in cls.__dataclass_fields__.values() if f.init}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class PartitionResult:
    """Who served one partition's part of a :class:`RangeResult`, and at which lag (as
    :class:`QueryResult` says it for a key)."""

    partition: int
    served_by: str  # active, standby or restoring
    instance_id: str
    host: str | None
    offset_lag: int
    time_lag_ms: int
    stale: bool = field(init=False)

    def __post_init__(self) -> None:
        self.stale = self.served_by != "active"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionResult:
        names = {f.name for f in cls.__dataclass_fields__.values() if f.init}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class RangeResult:
    """The answer to a read of many keys: ``entries`` from every partition asked, merged in
    the read's order (a key-value range by serialized key, ascending or descending, each
    ``{"key", "value", "timestamp"}``; windows by start, then key, each ``{"key", "start",
    "end", "value"}``), each key once; ``partitions`` says who served each partition, by
    partition; ``stale`` whether any of them is not the active."""

    store: str
    entries: list[dict[str, Any]]
    partitions: list[PartitionResult]
    stale: bool = field(init=False)

    def __post_init__(self) -> None:
        self.stale = any(part.stale for part in self.partitions)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RangeResult:
        """The answer in ``data`` (fields it does not know ignored)."""
        parts = [PartitionResult.from_json(part) for part in data["partitions"]]
        return cls(data["store"], list(data["entries"]), parts)

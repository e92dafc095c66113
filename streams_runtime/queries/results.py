"""What an interactive query answers: :class:`QueryResult`, :class:`KeyQueryMetadata`, and
the :class:`QueryError` family (each with the HTTP status the query server answers with)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "InvalidKeyError",
    "KeyQueryMetadata",
    "NoReplicaWithinBoundError",
    "NotAvailableError",
    "QueryError",
    "QueryResult",
    "UnknownStoreError",
]


class QueryError(Exception):
    """A query that cannot be answered; ``status`` is the HTTP status the server uses."""

    status = 500

    def to_json(self) -> dict[str, object]:
        return {"error": type(self).__name__, "message": str(self)}


class UnknownStoreError(QueryError, KeyError):
    status = 404

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown store"


class InvalidKeyError(QueryError, ValueError):
    status = 400


class NotAvailableError(QueryError):
    """No copy this query may be served from (e.g. no live active, stale reads not allowed)."""

    status = 503


class NoReplicaWithinBoundError(NotAvailableError):
    """No live copy within ``max_lag``; ``lags`` lists what was seen."""

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
    """One answer: ``value`` (a table's value, or for a session store a list of
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
        fields = {k: v for k, v in data.items() if k != "stale"}
        return cls(**fields)

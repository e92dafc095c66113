"""Typed read-only views of a driver's stores (what Kafka Streams' driver hands out with
``getKeyValueStore``, ``getSessionStore`` and ``getWindowStore``), read as interactive queries
read them: through the record cache.

The reads and their order are Kafka Streams' read-only stores' (and what ``App``'s queries
answer, :mod:`streams_runtime.queries.reads`): key ranges by serialized key, inclusive, ``None``
unbounded, reversed bounds answering nothing (``range``, ``reverse_range``, ``all``,
``reverse_all``, ``prefix_scan``); a key's sessions by end then start (``fetch``,
``find_sessions`` and their ``backward_`` twins); a key's windows by start (``fetch_range``)
and every key's by start then key (``fetch_all``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore
from streams_runtime.state.stores import windows_of
from streams_runtime.topology import QueryableStore

__all__ = ["KeyValueStoreView", "SessionStoreView", "WindowStoreView"]

K = TypeVar("K")
V = TypeVar("V")

_EARLIEST = -(2**63)
_LATEST = 2**63 - 1


class _View(Generic[K, V]):
    def __init__(self, spec: QueryableStore, store: Callable[[], KeyValueStore | SessionStore]):
        self.name = spec.name
        self._spec = spec
        self._store = store

    def _key(self, key: K, serde: Serde[Any] | None = None) -> bytes:
        raw = (self._spec.key_serde if serde is None else serde).serialize(key)
        if raw is None:
            raise ValueError(f"store {self.name!r}: a key cannot be null")
        return bytes(raw)

    def _deserialize_key(self, raw: bytes) -> K:
        key: Any = self._spec.key_serde.deserialize(raw)
        return key  # type: ignore[no-any-return]

    def _value(self, raw: bytes) -> V:
        value: Any = self._spec.value_serde.deserialize(raw)
        return value  # type: ignore[no-any-return]

    def _sessions(self) -> SessionStore:
        store = self._store()
        assert isinstance(store, SessionStore)
        return store


class KeyValueStoreView(_View[K, V]):
    """A table's store: the latest value per key."""

    def _kv(self) -> KeyValueStore:
        store = self._store()
        assert isinstance(store, KeyValueStore)
        return store

    def get_with_timestamp(self, key: K) -> tuple[V, int] | None:
        """The value of ``key`` and the timestamp of its last update; ``None`` when absent."""
        data = self._kv().get(self._key(key))
        if data is None:
            return None
        stored = ValueAndTimestamp.from_bytes(data)
        return self._value(stored.value), stored.timestamp

    def get(self, key: K) -> V | None:
        found = self.get_with_timestamp(key)
        return None if found is None else found[0]

    def _entries(self, found: Iterable[tuple[bytes, bytes]]) -> list[tuple[K, V]]:
        return [
            (self._deserialize_key(raw), self._value(ValueAndTimestamp.from_bytes(data).value))
            for raw, data in found
        ]

    def _bound(self, key: K | None) -> bytes | None:
        return None if key is None else self._key(key)

    def range(self, from_key: K | None, to_key: K | None) -> list[tuple[K, V]]:
        """``(key, value)`` of the keys from ``from_key`` to ``to_key``, both included
        (``None``: unbounded), in the order of the serialized keys; none when ``from_key`` is
        after ``to_key``."""
        return self._entries(self._kv().range(self._bound(from_key), self._bound(to_key)))

    def reverse_range(self, from_key: K | None, to_key: K | None) -> list[tuple[K, V]]:
        """:meth:`range` in descending key order."""
        store = self._kv()
        return self._entries(store.range(self._bound(from_key), self._bound(to_key), reverse=True))

    def all(self) -> list[tuple[K, V]]:
        """Every ``(key, value)``, in the order of the serialized keys."""
        return self._entries(self._kv().range(None, None))

    def reverse_all(self) -> list[tuple[K, V]]:
        """Every ``(key, value)``, in descending order of the serialized keys."""
        return self._entries(self._kv().range(None, None, reverse=True))

    def prefix_scan(self, prefix: Any, prefix_serde: Serde[Any] | None = None) -> list[tuple[K, V]]:
        """``(key, value)`` of the keys whose serialized form starts with ``prefix``
        serialized by ``prefix_serde`` (default: the store's key serde), ascending."""
        return self._entries(self._kv().prefix_scan(self._key(prefix, prefix_serde)))

    def approximate_num_entries(self) -> int:
        return self._kv().count()


class SessionStoreView(_View[K, V]):
    """A session-windowed aggregation's store: ``(key, start, end) -> value``."""

    def fetch(self, key: K) -> list[tuple[int, int, V]]:
        """Every session ``(start, end, value)`` of ``key``, by end, then start (a key's
        sessions never overlap, so that is by start too)."""
        return self.find_sessions(key, _EARLIEST, _LATEST)

    def backward_fetch(self, key: K) -> list[tuple[int, int, V]]:
        """:meth:`fetch`, latest session first."""
        return self.backward_find_sessions(key, _EARLIEST, _LATEST)

    def find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[int, int, V]]:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or
        before ``latest_session_start``, by end, then start."""
        found = self._sessions().sessions(
            self._key(key), earliest_session_end, latest_session_start
        )
        return [(start, end, self._value(value)) for start, end, value in found]

    def backward_find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[int, int, V]]:
        """:meth:`find_sessions`, latest first."""
        found = self._sessions().sessions(
            self._key(key), earliest_session_end, latest_session_start, reverse=True
        )
        return [(start, end, self._value(value)) for start, end, value in found]

    def fetch_session(self, key: K, start: int, end: int) -> V | None:
        """The value of exactly the session ``[start, end]`` of ``key``."""
        data = self._sessions().fetch(self._key(key), start, end)
        return None if data is None else self._value(data)


class WindowStoreView(_View[K, V]):
    """A time- or sliding-windowed aggregation's store: ``(key, window start) -> value``."""

    def fetch(self, key: K, window_start: int) -> V | None:
        """The value of ``key``'s window starting at ``window_start``."""
        found = self.fetch_range(key, window_start, window_start)
        return found[0][1] if found else None

    def fetch_range(self, key: K, time_from: int, time_to: int) -> list[tuple[int, V]]:
        """``(window start, value)`` of ``key``'s windows starting in ``[time_from, time_to]``,
        by start; none when ``time_from > time_to``."""
        found = windows_of(self._sessions(), self._key(key), time_from, time_to)
        return [(start, self._value(value)) for start, _end, value in found]

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[K, int, V]]:
        """``(key, window start, value)`` of every key's windows starting in ``[time_from,
        time_to]``, by start, then serialized key (Kafka Streams' ``fetchAll``)."""
        found = self._sessions().windows_starting(time_from, time_to)
        return [
            (self._deserialize_key(raw), start, self._value(value))
            for raw, start, _, value in found
        ]

    def all(self) -> list[tuple[K, int, V]]:
        """Every ``(key, window start, value)``, by serialized key, then window."""
        return [
            (self._deserialize_key(raw), start, self._value(value))
            for raw, start, _end, value in self._sessions().items()
        ]

"""Typed read-only views of a driver's stores (what Kafka Streams' driver hands out with
``getKeyValueStore``, ``getSessionStore`` and ``getWindowStore``), read as interactive queries
read them: through the record cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from streams_runtime.serdes import ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore
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

    def _key(self, key: K) -> bytes:
        raw = self._spec.key_serde.serialize(key)
        if raw is None:
            raise ValueError(f"store {self.name!r}: a key cannot be null")
        return bytes(raw)

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

    def all(self) -> list[tuple[K, V]]:
        """Every ``(key, value)``, in the order of the serialized keys."""
        out = []
        for raw_key, data in sorted(self._kv().items()):
            key: Any = self._spec.key_serde.deserialize(raw_key)
            out.append((key, self._value(ValueAndTimestamp.from_bytes(data).value)))
        return out

    def approximate_num_entries(self) -> int:
        return self._kv().count()


class SessionStoreView(_View[K, V]):
    """A session-windowed aggregation's store: ``(key, start, end) -> value``."""

    def fetch(self, key: K) -> list[tuple[int, int, V]]:
        """Every session ``(start, end, value)`` of ``key``, by start."""
        return self.find_sessions(key, _EARLIEST, _LATEST)

    def find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[int, int, V]]:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or
        before ``latest_session_start``."""
        found = self._sessions().find_sessions(
            self._key(key), earliest_session_end, latest_session_start
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
        """``(window start, value)`` of ``key``'s windows starting in ``[time_from, time_to]``."""
        found = self._sessions().find_sessions(self._key(key), _EARLIEST, time_to)
        return [(start, self._value(value)) for start, _end, value in found if start >= time_from]

    def all(self) -> list[tuple[K, int, V]]:
        """Every ``(key, window start, value)``."""
        out = []
        for raw_key, start, _end, value in self._sessions().items():
            key: Any = self._spec.key_serde.deserialize(raw_key)
            out.append((key, start, self._value(value)))
        return out

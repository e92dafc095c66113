"""State stores a user processor declares and uses (Kafka Streams' ``Stores`` factory, its
``StoreBuilder``, and the typed ``KeyValueStore``, ``WindowStore`` and ``SessionStore`` a
processor gets from ``context.get_state_store``).

A user's store is a store like any other: on the application's engine
(``state_engine``), logged to ``<application.id>-<name>-changelog`` unless logging is off,
restored, kept on standbys and queryable. Key-value entries are stored as Kafka Streams'
timestamped stores keep them (``ValueAndTimestamp``: the timestamp of the record or punctuation
that wrote them), so interactive queries read them as they read a table's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from streams_runtime.serdes import Serde, ValueAndTimestamp
from streams_runtime.state import KeyValueStore, SessionStore, StoreSpec, WindowStore

__all__ = [
    "StoreBuilder",
    "Stores",
    "TypedKeyValueStore",
    "TypedSessionStore",
    "TypedWindowStore",
]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class StoreBuilder:
    """What ``StreamsBuilder.add_state_store`` takes (Kafka Streams' ``StoreBuilder``): a named
    store, its kind and serdes; :meth:`with_caching_enabled` and :meth:`with_logging_disabled`
    give changed copies."""

    name: str
    kind: Literal["key_value", "session", "window"]
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    retention_ms: int | None = None
    window_size_ms: int | None = None
    logged: bool = True
    cached: bool = False

    def __post_init__(self) -> None:
        self.spec()  # the name and retention checked now, not at build

    def with_caching_enabled(self) -> StoreBuilder:
        """Writes go through the record cache (``statestore_cache_max_bytes``)."""
        return dataclasses.replace(self, cached=True)

    def with_caching_disabled(self) -> StoreBuilder:
        """Writes go to the store at once (the default)."""
        return dataclasses.replace(self, cached=False)

    def with_logging_disabled(self) -> StoreBuilder:
        """No changelog: the store starts empty after a move or a lost disk."""
        return dataclasses.replace(self, logged=False)

    def with_logging_enabled(self) -> StoreBuilder:
        """A changelog topic backs the store (the default)."""
        return dataclasses.replace(self, logged=True)

    def spec(self) -> StoreSpec:
        """The store as the runtime's state manager opens it."""
        return StoreSpec(
            self.name, self.kind, self.logged, retention_ms=self.retention_ms, cached=self.cached
        )


class Stores:
    """Store builders (Kafka Streams' ``Stores``); the engine is the application's."""

    @staticmethod
    def key_value_store_builder(
        name: str, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> StoreBuilder:
        """A key-value store (``Stores.timestampedKeyValueStoreBuilder``)."""
        return StoreBuilder(name, "key_value", key_serde, value_serde)

    @staticmethod
    def window_store_builder(
        name: str,
        *,
        retention_ms: int,
        window_size_ms: int,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
    ) -> StoreBuilder:
        """A window store: values per ``(key, window start)``, windows ``window_size_ms`` long,
        kept ``retention_ms`` of stream time after they end."""
        if window_size_ms < 1:
            raise ValueError(f"window_size_ms must be >= 1, got {window_size_ms}")
        return StoreBuilder(
            name, "window", key_serde, value_serde, retention_ms, window_size_ms=window_size_ms
        )

    @staticmethod
    def session_store_builder(
        name: str, *, retention_ms: int, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> StoreBuilder:
        """A session store: values per ``(key, start, end)``."""
        return StoreBuilder(name, "session", key_serde, value_serde, retention_ms)


Clock = Callable[[], int]
"""The timestamp a write is stamped with: the record's, or the punctuation's time."""


class TypedKeyValueStore(Generic[K, V]):
    """A key-value store as a processor sees it (Kafka Streams' ``KeyValueStore``): typed keys
    and values; entries iterate in the order of their serialized keys."""

    def __init__(
        self,
        store: KeyValueStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now: Clock,
        *,
        read_only: bool = False,
    ) -> None:
        self.name = store.name
        self._store = store
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._now = now
        self._read_only = read_only
        """A global table's store: its topic is its only writer."""

    def _key(self, key: K) -> bytes:
        if key is None:
            raise ValueError(f"store {self.name!r}: a key may not be None")
        return self._key_serde.serialize(key) or b""

    def get(self, key: K) -> V | None:
        """The value of ``key``, or ``None``."""
        raw = self._store.get(self._key(key))
        if raw is None:
            return None
        return self._value_serde.deserialize(ValueAndTimestamp.from_bytes(raw).value)

    def put(self, key: K, value: V | None) -> None:
        """Write ``key``; ``None`` deletes it."""
        if self._read_only:
            raise TypeError(f"store {self.name!r} is a global table's: read-only")
        data = None if value is None else self._value_serde.serialize(value)
        timestamp = self._now()
        stored = None if data is None else ValueAndTimestamp(data, timestamp).to_bytes()
        self._store.put(self._key(key), stored, timestamp)

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Write ``key`` unless it has a value; the value it had."""
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def delete(self, key: K) -> V | None:
        """Delete ``key``; the value it had."""
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def all(self) -> Iterator[tuple[K, V]]:
        """Every entry, by serialized key."""
        return self._typed(self._store.items())

    def range(self, lower: K | None, upper: K | None) -> Iterator[tuple[K, V]]:
        """Entries with serialized keys from ``lower`` to ``upper``, both inclusive (``None``:
        unbounded), by serialized key; empty when ``lower`` is above ``upper``."""
        low = None if lower is None else self._key(lower)
        high = None if upper is None else self._key(upper)
        return self._typed(
            (key, raw)
            for key, raw in self._store.items()
            if (low is None or key >= low) and (high is None or key <= high)
        )

    def prefix_scan(self, prefix: Any, prefix_serde: Serde[Any]) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with ``prefix`` serialized by ``prefix_serde``."""
        start = prefix_serde.serialize(prefix) or b""
        return self._typed((k, raw) for k, raw in self._store.items() if k.startswith(start))

    def approximate_num_entries(self) -> int:
        """How many entries the store holds."""
        return self._store.count()

    def _typed(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[K, V]]:
        key_serde, value_serde = self._key_serde, self._value_serde
        for key, raw in entries:
            value = value_serde.deserialize(ValueAndTimestamp.from_bytes(raw).value)
            yield key_serde.deserialize(key), value  # type: ignore[misc]


class TypedWindowStore(Generic[K, V]):
    """A window store as a processor sees it (Kafka Streams' ``WindowStore``): a value per key
    and window start; each window is ``window_size_ms`` long."""

    def __init__(
        self,
        store: WindowStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        now: Clock,
        window_size_ms: int,
    ) -> None:
        self.name = store.name
        self._store = store
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._now = now
        self._size = window_size_ms

    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Write the window of ``key`` starting at ``window_start``; ``None`` deletes it."""
        raw_key = self._key_serde.serialize(key) or b""
        end = window_start + self._size
        timestamp = self._now()
        data = None if value is None else self._value_serde.serialize(value)
        stored = None if data is None else ValueAndTimestamp(data, timestamp).to_bytes()
        self._store.put(raw_key, window_start, end, stored, timestamp)

    def fetch(self, key: K, window_start: int) -> V | None:
        """The value of ``key``'s window starting at ``window_start``, or ``None``."""
        raw_key = self._key_serde.serialize(key) or b""
        raw = self._store.fetch(raw_key, window_start, window_start + self._size)
        if raw is None:
            return None
        return self._value_serde.deserialize(ValueAndTimestamp.from_bytes(raw).value)

    def fetch_range(self, key: K, time_from: int, time_to: int) -> list[tuple[int, V]]:
        """``(window start, value)`` of ``key``'s windows starting in ``[time_from, time_to]``,
        by start."""
        raw_key = self._key_serde.serialize(key) or b""
        return [
            (start, self._value_serde.deserialize(ValueAndTimestamp.from_bytes(raw).value))  # type: ignore[misc]
            for start, _end, raw in self._store.fetch_range(raw_key, time_from, time_to)
        ]


class TypedSessionStore(Generic[K, V]):
    """A session store as a processor sees it (Kafka Streams' ``SessionStore``): a value per key
    and session ``[start, end]``."""

    def __init__(
        self, store: SessionStore, key_serde: Serde[K], value_serde: Serde[V], now: Clock
    ) -> None:
        self.name = store.name
        self._store = store
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._now = now

    def put(self, key: K, start: int, end: int, value: V | None) -> None:
        """Write the session ``(key, start, end)``; ``None`` removes it."""
        raw_key = self._key_serde.serialize(key) or b""
        data = None if value is None else self._value_serde.serialize(value)
        self._store.put(raw_key, start, end, data, self._now())

    def remove(self, key: K, start: int, end: int) -> None:
        """Remove the session ``(key, start, end)``."""
        self.put(key, start, end, None)

    def fetch_session(self, key: K, start: int, end: int) -> V | None:
        """The value of exactly the session ``(key, start, end)``, or ``None``."""
        raw = self._store.fetch(self._key_serde.serialize(key) or b"", start, end)
        return None if raw is None else self._value_serde.deserialize(raw)

    def all(self) -> Iterator[tuple[K, int, int, V]]:
        """Every session ``(key, start, end, value)``, by serialized key, then end and start."""
        key_serde, value_serde = self._key_serde, self._value_serde
        for key, start, end, raw in self._store.items():
            yield key_serde.deserialize(key), start, end, value_serde.deserialize(raw)  # type: ignore[misc]

    def find_sessions(
        self, key: K, earliest_end: int, latest_start: int
    ) -> list[tuple[int, int, V]]:
        """``(start, end, value)`` of ``key``'s sessions ending at or after ``earliest_end`` and
        starting at or before ``latest_start``, by ``(start, end)``."""
        raw_key = self._key_serde.serialize(key) or b""
        return [
            (start, end, self._value_serde.deserialize(raw))  # type: ignore[misc]
            for start, end, raw in self._store.find_sessions(raw_key, earliest_end, latest_start)
        ]

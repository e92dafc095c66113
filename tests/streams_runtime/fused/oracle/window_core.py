"""What the pure-Python cores, the native core's oracle, share (native/src/window_core.rs is
its native twin): how an aggregate folds values in (:class:`Aggregation`), the batch loop
(:class:`WindowCore`), and the state written behind (:class:`WriteBehind`), every change since
the last write in the order of its latest change."""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from streams_runtime.fused import Failure, Final, StateWrite
from streams_runtime.record import Headers

__all__ = [
    "ENTRY_OVERHEAD",
    "Aggregation",
    "Failure",
    "Final",
    "StateWrite",
    "WindowCore",
    "WriteBehind",
]

ENTRY_OVERHEAD = 64
"""Bytes counted per written-behind entry besides key and value (as the record cache counts)."""

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "count": operator.add,  # merging sessions' counts
    "sum": operator.add,
    "min": min,
    "max": max,
}


_NO_AGGREGATE = object()
"""A window's aggregate before anything was folded in (a reduce's), told from ``None``."""


class Aggregation:
    """An aggregation (``kind``: ``count``, ``sum``, ``min``, ``max``, ``reduce`` by the user's
    reducer, or ``aggregate`` by the user's initializer, aggregator and merger; ``functions``:
    that reducer, or those three) as the chain computes it: a count adds 1 per record; the
    built-ins are ``reduce(operator.add)``, ``reduce(min)`` and ``reduce(max)``; a reduce's first
    value is its aggregate as it is; an aggregate starts from ``initializer()`` and takes every
    merged session by ``merger(key, aggregate, other)`` and the record by ``aggregator(key,
    value, aggregate)``.

    ``normalize``: what the chain's round trip through the store does to an aggregate
    (``deserialize(serialize(aggregate))``; it may raise, as the chain's serialize would); it is
    skipped for an ``int`` of 64 bits when ``exact_ints`` and for a ``float`` when
    ``exact_floats`` (the value serde keeps them as they are), and for ``None``. Every NaN
    aggregate is the one NaN, ``math.nan`` (``0x7ff8000000000000``)."""

    def __init__(
        self,
        kind: str = "count",
        functions: Any = None,
        normalize: Callable[[Any], Any] | None = None,
        exact_ints: bool = True,
        exact_floats: bool = True,
    ) -> None:
        takes_functions = kind in {"reduce", "aggregate"}
        if takes_functions != (functions is not None) or kind not in {*_REDUCERS, "reduce"} | {
            "aggregate"
        }:
            raise ValueError(f"not an aggregation the core runs: {kind!r}")
        self.kind = kind
        self.needs_keys = kind == "aggregate"
        self._user = functions if kind == "aggregate" else None
        self.combine: Callable[[Any, Any], Any] = (
            functions if kind == "reduce" else _REDUCERS.get(kind, operator.add)
        )
        """``reducer(aggregate, value)``."""
        self._normalize = normalize
        self._exact_ints = exact_ints
        self._exact_floats = exact_floats

    def start(self) -> Any:
        """What a window starts from: an aggregate's ``initializer()``, else nothing yet."""
        return _NO_AGGREGATE if self._user is None else self._user[0]()

    def merge(self, key: Any, aggregate: Any, other: Any) -> Any:
        """A merged session's aggregate taken in."""
        if self._user is not None:
            return self._user[2](key, aggregate, other)
        if aggregate is _NO_AGGREGATE or aggregate is None:
            return other
        return aggregate if other is None else self.combine(aggregate, other)

    def fold(self, key: Any, aggregate: Any, value: Any) -> Any:
        """The record's value taken in."""
        if self._user is not None:
            return self._user[1](key, value, aggregate)
        if aggregate is _NO_AGGREGATE or aggregate is None:
            return value
        return self.combine(aggregate, value)

    def finish(self, aggregate: Any) -> Any:
        """The aggregate as the chain reads it back from its store."""
        if aggregate is None:
            return aggregate
        kind = type(aggregate)
        if self._normalize is not None and not (
            (kind is int and self._exact_ints and _LONG_MIN <= aggregate <= _LONG_MAX)
            or (kind is float and self._exact_floats)
        ):
            aggregate = self._normalize(aggregate)
        if type(aggregate) is float and math.isnan(aggregate):
            # One NaN, as Kafka's DoubleSerializer writes every NaN: an addition's NaN takes its
            # sign from whichever operand the hardware (or LLVM, which may swap them) picks.
            return math.nan
        return aggregate


class WriteBehind:
    """The changes not written yet; ``value_bytes``: the bytes of a value written."""

    def __init__(self, value_bytes: int) -> None:
        self._value_bytes = value_bytes
        self._dirty: dict[bytes, tuple[Any, int, int, int]] = {}
        self._stored: set[bytes] = set()
        self.bytes = 0
        """Bytes of the changes not written yet, counted as the record cache counts."""

    def stored(self, state_key: bytes) -> None:
        """A window read from the stored state."""
        self._stored.add(state_key)

    def mark(
        self, state_key: bytes, value: Any, value_ts: int, offset: int, timestamp: int
    ) -> None:
        """A change to write: ``value`` None when the window is gone."""
        # Popped and put back: the dict's order is that of the latest changes.
        old = self._dirty.pop(state_key, None)
        if old is not None:
            self.bytes -= self._size(state_key, old[0])
        self._dirty[state_key] = (value, value_ts, offset, timestamp)
        self.bytes += self._size(state_key, value)

    def take(self) -> list[StateWrite]:
        """The changes since the last call, in the order of their latest change; a window both
        made and gone in between is left out unless it was written before."""
        writes: list[StateWrite] = []
        for state_key, (value, value_ts, offset, timestamp) in self._dirty.items():
            if value is None:
                if state_key not in self._stored:
                    continue
                self._stored.discard(state_key)
            else:
                self._stored.add(state_key)
            writes.append((state_key, value, value_ts, offset, timestamp))
        self._dirty = {}
        self.bytes = 0
        return writes

    def _size(self, state_key: bytes, value: Any) -> int:
        return len(state_key) + ENTRY_OVERHEAD + (0 if value is None else self._value_bytes)


class WindowCore(ABC):
    """A windowed built-in aggregation's core: a batch of one partition's records per call.
    Subclasses fold a record into their windows and emit the windows time closed."""

    def __init__(self, observed_time: int, value_bytes: int, aggregation: Aggregation) -> None:
        self.observed_time = observed_time
        self.accepted_time = -1
        """The largest timestamp aggregated into a window (-1: none)."""
        self._writes = WriteBehind(value_bytes)
        self._aggregation = aggregation
        self._counts = aggregation.kind == "count"
        self._late = 0

    def process(  # noqa: PLR0917 - the batch's columns
        self,
        keys: Sequence[bytes | None],
        timestamps: Sequence[int],
        offsets: Sequence[int],
        headers: Sequence[Headers | None],
        values: Sequence[Any] | None = None,
        key_objects: Sequence[Any] | None = None,
    ) -> tuple[list[Final], int, int, Failure | None]:
        """Aggregate a batch of data records (one partition's, in order; ``values``: their
        deserialized values, not needed by a count): the windows emitted, how many window
        updates were late, how many records had no key, and the record whose aggregation
        raised, if one did (the batch stops there, its changes up to the raise kept, as the
        chain's; the records after it are for another call)."""
        if values is None and not self._counts:
            raise ValueError(f"a {self._aggregation.kind} needs the records' values")
        if key_objects is None and self._aggregation.needs_keys:
            raise ValueError("an aggregate's functions need the records' keys")
        emitted: list[Final] = []
        self._late = keyless = 0
        for i, key in enumerate(keys):
            if key is None:
                keyless += 1
                continue
            value = 1 if values is None or self._counts else values[i]
            key_object = None if key_objects is None else key_objects[i]
            try:
                self._aggregate(key, key_object, timestamps[i], offsets[i], headers[i], value)
            except Exception as exc:
                return emitted, self._late, keyless, (i, exc)
            self._emit_closed(emitted, offsets[i])
        return emitted, self._late, keyless, None

    def advance(self, timestamp: int, offset: int) -> list[Final]:
        """Time passed to ``timestamp`` without data (a control record at ``offset``): the
        windows that closed."""
        emitted: list[Final] = []
        self.observed_time = max(self.observed_time, timestamp)
        self._emit_closed(emitted, offset)
        return emitted

    def take_writes(self) -> list[StateWrite]:
        """The changes since the last call, in the order of their latest change (the state is
        clean after)."""
        return self._writes.take()

    @property
    def dirty_bytes(self) -> int:
        """Bytes of the changes not written yet."""
        return self._writes.bytes

    @abstractmethod
    def pending(self) -> int:
        """Windows not emitted yet (the suppression buffer's size)."""

    @abstractmethod
    def _aggregate(  # noqa: PLR0917 - one record's columns
        self,
        key: bytes,
        key_object: Any,
        t: int,
        offset: int,
        headers: Headers | None,
        value: Any,
    ) -> None:
        """Fold the record's ``value`` (a count's: 1) into its windows (moving the stream time,
        adding late window updates to ``_late``); ``key_object``: the key an aggregate's
        functions take."""

    @abstractmethod
    def _emit_closed(self, emitted: list[Final], offset: int) -> None:
        """Append the windows now closed to ``emitted`` (in ``(end, state key)`` order) and
        remove them, at input ``offset``."""

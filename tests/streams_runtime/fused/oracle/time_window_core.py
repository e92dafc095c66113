"""The pure-Python time-window core: a tumbling or hopping window built-in aggregation (a
count, sum, min or max) suppressed until each window closes, a batch of records per call; the
reference for the native core (``streams_runtime._native.TimeWindowCore``,
native/src/time_windows.rs), held to it call for call by
tests/streams_runtime/fused/test_time_window_core.py.

The semantics are those of ``TimeWindowAggregateProcessor`` feeding ``SuppressProcessor``
(streams_runtime/processors/time_windows.py and sessions.py), fused:

- a record at ``t`` updates every window ``[start, start + size)`` containing it (starts
  every ``advance`` from 0), in ascending start order; a window with ``end + grace <= stream
  time`` (the record's own time included) no longer takes records: the record is dropped from
  it and counted late, once per such window. Records without a key are dropped, counted, and
  move no time;
- a window's aggregate folds the record's value in
  (:class:`~.window_core.Aggregation`: a count adds 1, a reduce combines
  ``reducer(aggregate, value)``; a window without one, or with ``None``, starts from the value
  as it is, and its timestamp from the record's), as the store would read it back; an aggregate
  of ``None`` removes the window; a reducer or serde raising stops there (the record is
  returned as failed, the windows before it updated);
- a window's aggregate carries the largest timestamp folded into it, and the headers of the
  record that last changed it;
- after every record and every control record, each window with ``end + grace <= stream
  time`` is emitted once, in ``(end, key + start + end)`` order, stamped with its timestamp,
  and leaves the state;
- the state is written behind as the session core's is
  (:class:`~tests.streams_runtime.fused.oracle.window_core.WriteBehind`).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable
from typing import Any

from streams_runtime.record import Headers
from tests.streams_runtime.fused.oracle.window_core import Aggregation, Final, WindowCore

__all__ = ["TimeWindowCore"]

_WINDOW = struct.Struct(">qq")
_VALUE_BYTES = 16  # a count as a long, after its timestamp (so counted for every aggregate)


class _Window:
    __slots__ = ("headers", "key", "start", "timestamp", "value")

    def __init__(
        self, key: bytes, start: int, value: Any, timestamp: int, headers: Headers | None
    ) -> None:
        self.key = key
        self.start = start
        self.value = value
        self.timestamp = timestamp
        self.headers = headers


class TimeWindowCore(WindowCore):
    """Time windows of ``size_ms`` every ``advance_ms`` with ``grace_ms``, aggregated by
    ``aggregation`` (``count``, ``sum``, ``min``, ``max``, or ``reduce`` by ``reducer``;
    ``normalize`` and the exact flags: see
    :class:`~tests.streams_runtime.fused.oracle.window_core.Aggregation`), final results only;
    ``observed_time``: the stream time to start from. ``keep_headers`` is taken for the session
    core's signature: a window's update always carries its record's headers."""

    def __init__(
        self,
        size_ms: int,
        advance_ms: int,
        grace_ms: int,
        observed_time: int,
        keep_headers: bool,
        *,
        aggregation: str = "count",
        functions: Any = None,
        normalize: Callable[[Any], Any] | None = None,
        exact_ints: bool = True,
        exact_floats: bool = True,
    ) -> None:
        super().__init__(
            observed_time,
            _VALUE_BYTES,
            Aggregation(aggregation, functions, normalize, exact_ints, exact_floats),
        )
        self._size = size_ms
        self._advance = advance_ms
        self._grace = grace_ms
        self._windows: dict[bytes, _Window] = {}  # state key -> window
        self._by_end: list[tuple[int, bytes]] = []  # (end, state key)
        self._by_key: dict[bytes, set[int]] = {}  # key -> starts of its windows

    def load(self, key: bytes, start: int, end: int, value: Any, timestamp: int) -> None:
        """Take a window from the stored state (before the first batch)."""
        state_key = key + _WINDOW.pack(start, end)
        self._windows[state_key] = _Window(key, start, value, timestamp, None)
        self._by_key.setdefault(key, set()).add(start)
        self._writes.stored(state_key)
        heapq.heappush(self._by_end, (end, state_key))

    def pending(self) -> int:
        """Windows not emitted yet (the suppression buffer's size)."""
        return len(self._windows)

    def keys(self) -> list[bytes]:
        """The keys with windows not emitted yet, sorted."""
        return sorted(key for key, starts in self._by_key.items() if starts)

    def fetch(self, key: bytes) -> list[tuple[int, int, Any, int]]:
        """The key's windows not emitted yet, ``(start, end, aggregate, timestamp)``, by
        start."""
        found = []
        for start in sorted(self._by_key.get(key, ())):
            window = self._windows[key + _WINDOW.pack(start, start + self._size)]
            found.append((start, start + self._size, window.value, window.timestamp))
        return found

    def _aggregate(  # noqa: PLR0917 - one record's columns
        self,
        key: bytes,
        key_object: Any,
        t: int,
        offset: int,
        headers: Headers | None,
        value: Any,
    ) -> None:
        self.observed_time = max(self.observed_time, t)
        size, advance, grace = self._size, self._advance, self._grace
        aggregation = self._aggregation
        first = max(0, t - size + advance)
        first -= first % advance
        for start in range(first, t + 1, advance):
            end = start + size
            if end + grace <= self.observed_time:
                self._late += 1
                continue
            self.accepted_time = max(self.accepted_time, t)
            state_key = key + _WINDOW.pack(start, end)
            window = self._windows.get(state_key)
            if window is None or window.value is None:
                start_from, timestamp = aggregation.start(), t
            else:
                start_from, timestamp = window.value, max(t, window.timestamp)
            aggregate = aggregation.finish(aggregation.fold(key_object, start_from, value))
            if aggregate is None:
                if window is not None:
                    self._drop(window, state_key)
                    self._writes.mark(state_key, None, timestamp, offset, t)
                continue
            if window is None:
                window = self._windows[state_key] = _Window(key, start, aggregate, t, headers)
                self._by_key.setdefault(key, set()).add(start)
                heapq.heappush(self._by_end, (end, state_key))
            else:
                window.value = aggregate
                window.timestamp = timestamp
                window.headers = headers
            self._writes.mark(state_key, aggregate, timestamp, offset, t)

    def _drop(self, window: _Window, state_key: bytes) -> None:
        """Take the window out of the state (its entry in ``_by_end`` goes stale)."""
        del self._windows[state_key]
        starts = self._by_key[window.key]
        starts.discard(window.start)
        if not starts:
            del self._by_key[window.key]

    def _emit_closed(self, emitted: list[Final], offset: int) -> None:
        heap, now = self._by_end, self.observed_time - self._grace
        while heap and heap[0][0] <= now:
            end, state_key = heapq.heappop(heap)
            window = self._windows.get(state_key)
            if window is None:
                continue  # removed by an aggregate of None after it was pushed
            self._drop(window, state_key)
            emitted.append(
                (window.key, window.start, end, window.value, window.timestamp, window.headers)
            )
            timestamp = max(window.timestamp, self.observed_time)
            self._writes.mark(state_key, None, window.timestamp, offset, timestamp)

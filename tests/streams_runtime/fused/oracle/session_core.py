"""The pure-Python session core: a session-window built-in aggregation (a count, sum, min or
max) suppressed until each session closes, for a whole batch of records per call. The reference
for the native core (``streams_runtime._native.SessionCore``, native/src/sessions.rs), which
must behave the same call for call (tests/streams_runtime/fused/test_session_core.py drives both
with generated input), and the fallback where the native core is not built.

The semantics are those of ``SessionAggregateProcessor`` feeding ``SuppressProcessor``
(streams_runtime/processors/sessions.py; docs/design.md §5), fused:

- a record at ``t`` merges with every retained session of its key where
  ``start - gap <= t <= end + gap`` (retained: ``end > stream time - gap - grace``, stream time
  taken before the record moves it); it is late, dropped and counted when the merged session ends
  before ``stream time - grace - gap``; records without a key are dropped, counted, and move no
  time;
- the merged session's aggregate is that of the sessions merged, by ``(start, end)``, combined
  (:class:`~.window_core.Aggregation`: a count adds, a reduce combines
  ``reducer(aggregate, other)``, skipping ``None``), then the record's value folded in last
  (a count's is 1; a reduce's first value is the aggregate as it is), as the store would read
  it back. The sessions merged are removed once that aggregate is known: a reducer or serde
  raising leaves them as they were (the record is returned as failed); an aggregate of ``None``
  leaves no session;
- after every record and every control record, each session with ``end + gap + grace <=
  stream time`` is emitted once, in ``(end, key + start + end)`` order, stamped with its end,
  and leaves the state (its final result is out: no record merges into it any more);
- the state is written behind: every session created, updated or gone since the last
  :meth:`take_writes` is one write there, in the order of its latest change, with the input
  offset and timestamp of that change; a session both created and gone in between (merged away,
  or emitted) is not written unless it was written before.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable
from typing import Any

from streams_runtime.record import Headers
from tests.streams_runtime.fused.oracle.window_core import Aggregation, Final, WindowCore

__all__ = ["SessionCore"]

_WINDOW = struct.Struct(">qq")
_VALUE_BYTES = 8  # a count is written as a long (and so counted for every aggregate)


class _Session:
    __slots__ = ("end", "headers", "start", "value")

    def __init__(self, start: int, end: int, value: Any, headers: Headers | None) -> None:
        self.start = start
        self.end = end
        self.value = value
        self.headers = headers


class SessionCore(WindowCore):
    """Session windows of ``gap_ms`` and ``grace_ms``, aggregated by ``aggregation`` (``count``,
    ``sum``, ``min``, ``max``, or ``reduce`` by ``reducer``; ``normalize`` and the exact flags: see
    :class:`~tests.streams_runtime.fused.oracle.window_core.Aggregation`), final results only.

    ``observed_time``: the stream time to start from (the task's restored one). With
    ``keep_headers``, an emitted session carries the headers of the record that last changed it
    (as through the record cache); without, none (as with the cache off)."""

    def __init__(
        self,
        gap_ms: int,
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
        self._gap = gap_ms
        self._retention = gap_ms + grace_ms
        self._keep_headers = keep_headers
        self._sessions: dict[bytes, list[_Session]] = {}
        self._by_end: list[tuple[int, bytes, bytes]] = []  # (end, state key, key); may be stale
        self._live: dict[bytes, _Session] = {}  # state key -> session

    def load(self, key: bytes, start: int, end: int, value: Any) -> None:
        """Take a session from the stored state (before the first batch)."""
        state_key = key + _WINDOW.pack(start, end)
        session = _Session(start, end, value, None)
        self._sessions.setdefault(key, []).append(session)
        self._live[state_key] = session
        self._writes.stored(state_key)
        heapq.heappush(self._by_end, (end, state_key, key))

    def pending(self) -> int:
        """Sessions not emitted yet (the suppression buffer's size)."""
        return len(self._live)

    def keys(self) -> list[bytes]:
        """The keys with sessions not emitted yet, sorted."""
        return sorted(key for key, sessions in self._sessions.items() if sessions)

    def fetch(self, key: bytes) -> list[tuple[int, int, Any]]:
        """The key's sessions not emitted yet, ``(start, end, aggregate)``, by start."""
        found = sorted(self._sessions.get(key, ()), key=lambda s: (s.start, s.end))
        return [(s.start, s.end, s.value) for s in found]

    def _aggregate(  # noqa: PLR0917 - one record's columns
        self,
        key: bytes,
        key_object: Any,
        t: int,
        offset: int,
        headers: Headers | None,
        value: Any,
    ) -> None:
        gap = self._gap
        retained_after = self.observed_time - self._retention
        sessions = self._sessions.get(key)
        found = (
            [s for s in sessions if s.end > retained_after and s.start - gap <= t <= s.end + gap]
            if sessions
            else []
        )
        found.sort(key=lambda s: (s.start, s.end))  # as the session store finds them
        self.observed_time = max(self.observed_time, t)
        start = end = t
        for s in found:
            start = min(start, s.start)
            end = max(end, s.end)
        if end < self.observed_time - self._retention:
            self._late += 1
            return
        self.accepted_time = max(self.accepted_time, t)
        aggregation = self._aggregation
        aggregate = aggregation.start()
        for s in found:
            aggregate = aggregation.merge(key_object, aggregate, s.value)
        aggregate = aggregation.finish(aggregation.fold(key_object, aggregate, value))
        # Removed once the aggregate is known, as Kafka Streams does: a record the reducer or
        # the serde refuses leaves the sessions it would have merged.
        for s in found:
            self._remove(key, s, offset, t)
        if aggregate is None:
            return
        session = _Session(start, end, aggregate, headers if self._keep_headers else None)
        state_key = key + _WINDOW.pack(start, end)
        self._sessions.setdefault(key, []).append(session)  # emptied ones are gone
        if state_key not in self._live:
            heapq.heappush(self._by_end, (end, state_key, key))
        self._live[state_key] = session
        self._writes.mark(state_key, aggregate, end, offset, t)

    def _remove(self, key: bytes, session: _Session, offset: int, timestamp: int) -> None:
        sessions = self._sessions[key]
        sessions.remove(session)
        if not sessions:
            del self._sessions[key]
        state_key = key + _WINDOW.pack(session.start, session.end)
        del self._live[state_key]
        self._writes.mark(state_key, None, session.end, offset, timestamp)

    def _emit_closed(self, emitted: list[Final], offset: int) -> None:
        heap, now = self._by_end, self.observed_time - self._retention
        while heap and heap[0][0] <= now:
            end, state_key, key = heapq.heappop(heap)
            session = self._live.get(state_key)
            if session is None:
                continue  # merged away after it was pushed
            emitted.append((key, session.start, end, session.value, end, session.headers))
            self._remove(key, session, offset, max(end, self.observed_time))
        if len(heap) > 2 * len(self._live) + 64:
            # Stale entries of merged-away sessions: rebuild rather than let them pile up.
            self._by_end = [
                (s.end, state_key, state_key[: -_WINDOW.size])
                for state_key, s in self._live.items()
            ]
            heapq.heapify(self._by_end)

"""The pure-Python session core: a session-window count suppressed until each session closes,
for a whole batch of records per call. The reference for the native core
(``streams_runtime._native.SessionCore``, native/src/sessions.rs), which must behave the same
call for call (tests/streams_runtime/fused/test_session_core.py drives both with generated
input), and the fallback where the native core is not built.

The semantics are those of ``SessionAggregateProcessor`` feeding ``SuppressProcessor``
(streams_runtime/processors/sessions.py; docs/design.md §5), fused:

- a record at ``t`` merges with every retained session of its key where
  ``start - gap <= t <= end + gap`` (retained: ``end > stream time - gap - grace``, stream time
  taken before the record moves it); it is late, dropped and counted when the merged session ends
  before ``stream time - grace - gap``; records without a key are dropped, counted, and move no
  time;
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

from streams_runtime.fused.window_core import Final, WindowCore
from streams_runtime.record import Headers

__all__ = ["SessionCore"]

_WINDOW = struct.Struct(">qq")
_VALUE_BYTES = 8  # a count is written as a long


class _Session:
    __slots__ = ("end", "headers", "start", "value")

    def __init__(self, start: int, end: int, value: int, headers: Headers | None) -> None:
        self.start = start
        self.end = end
        self.value = value
        self.headers = headers


class SessionCore(WindowCore):
    """Session windows of ``gap_ms`` and ``grace_ms``, counting, final results only.

    ``observed_time``: the stream time to start from (the task's restored one). With
    ``keep_headers``, an emitted session carries the headers of the record that last changed it
    (as through the record cache); without, none (as with the cache off)."""

    def __init__(self, gap_ms: int, grace_ms: int, observed_time: int, keep_headers: bool) -> None:
        super().__init__(observed_time, _VALUE_BYTES)
        self._gap = gap_ms
        self._retention = gap_ms + grace_ms
        self._keep_headers = keep_headers
        self._sessions: dict[bytes, list[_Session]] = {}
        self._by_end: list[tuple[int, bytes, bytes]] = []  # (end, state key, key); may be stale
        self._live: dict[bytes, _Session] = {}  # state key -> session

    def load(self, key: bytes, start: int, end: int, value: int) -> None:
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

    def fetch(self, key: bytes) -> list[tuple[int, int, int]]:
        """The key's sessions not emitted yet, ``(start, end, count)``, by start."""
        return sorted((s.start, s.end, s.value) for s in self._sessions.get(key, ()))

    def _count(self, key: bytes, t: int, offset: int, headers: Headers | None) -> int:
        gap = self._gap
        retained_after = self.observed_time - self._retention
        sessions = self._sessions.get(key)
        found = (
            [s for s in sessions if s.end > retained_after and s.start - gap <= t <= s.end + gap]
            if sessions
            else []
        )
        self.observed_time = max(self.observed_time, t)
        start = end = t
        for s in found:
            start = min(start, s.start)
            end = max(end, s.end)
        if end < self.observed_time - self._retention:
            return 1  # late
        self.accepted_time = max(self.accepted_time, t)
        value = 1
        for s in found:
            value += s.value
            self._remove(key, s, offset, t)
        session = _Session(start, end, value, headers if self._keep_headers else None)
        state_key = key + _WINDOW.pack(start, end)
        self._sessions.setdefault(key, []).append(session)  # emptied ones are gone
        if state_key not in self._live:
            heapq.heappush(self._by_end, (end, state_key, key))
        self._live[state_key] = session
        self._writes.mark(state_key, value, end, offset, t)
        return 0

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

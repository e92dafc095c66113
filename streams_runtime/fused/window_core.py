"""What the pure-Python cores share (native/src/window_core.rs is its native twin): the batch
loop (:class:`WindowCore`), and the state written behind (:class:`WriteBehind`), every change
since the last write in the order of its latest change."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from streams_runtime.record import Headers

__all__ = ["ENTRY_OVERHEAD", "Final", "StateWrite", "WindowCore", "WriteBehind"]

ENTRY_OVERHEAD = 64
"""Bytes counted per written-behind entry besides key and value (as the record cache counts)."""

Final = tuple[bytes, int, int, int, int, Headers | None]
"""An emitted window: ``(key, start, end, count, timestamp, headers)`` (a session's timestamp
is its end)."""
StateWrite = tuple[bytes, int | None, int, int, int]
"""A written-behind change: ``(key + start + end, count or None (gone), the count's timestamp,
offset, timestamp)`` (the offset and timestamp of the input that caused it)."""


class WriteBehind:
    """The changes not written yet; ``value_bytes``: the bytes of a value written."""

    def __init__(self, value_bytes: int) -> None:
        self._value_bytes = value_bytes
        self._dirty: dict[bytes, tuple[int | None, int, int, int]] = {}
        self._stored: set[bytes] = set()
        self.bytes = 0
        """Bytes of the changes not written yet, counted as the record cache counts."""

    def stored(self, state_key: bytes) -> None:
        """A window read from the stored state."""
        self._stored.add(state_key)

    def mark(
        self, state_key: bytes, value: int | None, value_ts: int, offset: int, timestamp: int
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

    def _size(self, state_key: bytes, value: int | None) -> int:
        return len(state_key) + ENTRY_OVERHEAD + (0 if value is None else self._value_bytes)


class WindowCore(ABC):
    """A windowed count's core: a batch of one partition's records per call. Subclasses count a
    record into their windows and emit the windows time closed."""

    def __init__(self, observed_time: int, value_bytes: int) -> None:
        self.observed_time = observed_time
        self.accepted_time = -1
        """The largest timestamp counted into a window (-1: none)."""
        self._writes = WriteBehind(value_bytes)

    def process(
        self,
        keys: Sequence[bytes | None],
        timestamps: Sequence[int],
        offsets: Sequence[int],
        headers: Sequence[Headers | None],
    ) -> tuple[list[Final], int, int]:
        """Count a batch of data records (one partition's, in order): the windows emitted, and
        how many window updates were late and how many records had no key."""
        emitted: list[Final] = []
        late = keyless = 0
        for i, key in enumerate(keys):
            if key is None:
                keyless += 1
                continue
            late += self._count(key, timestamps[i], offsets[i], headers[i])
            self._emit_closed(emitted, offsets[i])
        return emitted, late, keyless

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
    def _count(self, key: bytes, t: int, offset: int, headers: Headers | None) -> int:
        """Count the record into its windows (moving the stream time); how many were late."""

    @abstractmethod
    def _emit_closed(self, emitted: list[Final], offset: int) -> None:
        """Append the windows now closed to ``emitted`` (in ``(end, state key)`` order) and
        remove them, at input ``offset``."""

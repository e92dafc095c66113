"""Local retention of windowed state: expired windows are removed from their store with
tombstones, so the compacted changelog forgets them too."""

from __future__ import annotations

import time
from collections.abc import Callable

from streams_runtime.state import SessionStore

__all__ = ["RetentionPurge"]

_PURGE_INTERVAL_S = 30.0  # a purge scans the whole store, so it runs at most this often


class RetentionPurge:
    """Removes a store's expired windows, at most every 30 seconds (called from ``flush``)."""

    def __init__(self) -> None:
        self._next = time.monotonic() + _PURGE_INTERVAL_S

    def run(self, store: SessionStore, expired: Callable[[int, int], bool], timestamp: int) -> None:
        """Delete every window ``[start, end]`` of ``store`` with ``expired(start, end)``,
        logging tombstones at ``timestamp``, unless the last purge was too recent."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + _PURGE_INTERVAL_S
        doomed = [(k, s, e) for k, s, e, _ in store.items() if expired(s, e)]
        for key, start, end in doomed:
            store.expire(key, start, end, timestamp)

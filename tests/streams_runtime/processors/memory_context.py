"""A task context for processor tests without a broker: in-memory stores, counted drops."""

from __future__ import annotations

from typing import Any

from streams_runtime.state import (
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueStore,
    WindowStore,
)

__all__ = ["MemoryContext"]


class MemoryContext:
    """What a task offers its processors, with in-memory stores made on first use; sinks are
    not expected (``send`` fails the test)."""

    application_id = "app"
    partition = 0
    stream_time = -1

    def __init__(self) -> None:
        self.kv: dict[str, KeyValueStore] = {}
        self.windows: dict[str, WindowStore] = {}
        self.dropped: list[str] = []  # the reason of every dropped record
        self.skips: list[str] = []  # the processor of every idempotent update skipped

    def send(self, *_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("no sink here")

    def kv_store(self, name: str) -> KeyValueStore:
        return self.kv.setdefault(name, KeyValueStore(name, 0, InMemoryKeyValueEngine(), None))

    def session_store(self, name: str) -> WindowStore:
        return self.window_store(name)

    def window_store(self, name: str) -> WindowStore:
        return self.windows.setdefault(name, WindowStore(name, 0, InMemorySessionEngine(), None))

    def record_dropped(self, processor: str, reason: str) -> None:
        self.dropped.append(reason)

    def record_idempotent_skip(self, processor: str) -> None:
        self.skips.append(processor)

    def suppress_buffer_size(self, processor: str, size: int) -> None:
        pass

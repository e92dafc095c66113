# The native core (native/src/); its pure-Python twins, the oracle of its tests, are in
# tests/streams_runtime/fused/oracle/.
from collections.abc import Callable, Sequence
from typing import Any

from streams_runtime.fused import Failure, Final, StateWrite
from streams_runtime.record import Headers

class _WindowCore:
    observed_time: int
    accepted_time: int
    dirty_bytes: int
    def process(
        self,
        keys: Sequence[bytes | None],
        timestamps: Sequence[int],
        offsets: Sequence[int],
        headers: Sequence[Headers | None],
        values: Sequence[Any] | None = None,
        key_objects: Sequence[Any] | None = None,
    ) -> tuple[list[Final], int, int, Failure | None]: ...
    def advance(self, timestamp: int, offset: int) -> list[Final]: ...
    def take_writes(self) -> list[StateWrite]: ...
    def pending(self) -> int: ...

class SessionCore(_WindowCore):
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
    ) -> None: ...
    def load(self, key: bytes, start: int, end: int, value: Any) -> None: ...
    def keys(self) -> list[bytes]: ...
    def fetch(self, key: bytes) -> list[tuple[int, int, Any]]: ...

class TimeWindowCore(_WindowCore):
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
    ) -> None: ...
    def load(self, key: bytes, start: int, end: int, value: Any, timestamp: int) -> None: ...
    def keys(self) -> list[bytes]: ...
    def fetch(self, key: bytes) -> list[tuple[int, int, Any, int]]: ...

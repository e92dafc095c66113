"""Fused operators: chains of processors the runtime runs as one, a whole batch of records per
call, on the native core (``streams_runtime._native``, built from native/; docs/design.md §5,
"the native core"). The planner (:mod:`streams_runtime.fused.planner`) puts them in a topology
when it is built.

``native_core=False`` (:class:`~streams_runtime.RuntimeSettings`), or a native core that was not
built, runs every chain processor by processor instead: the reference the fused operators are
checked against (their pure-Python twins live in the tests, as an oracle)."""

from __future__ import annotations

import functools
import logging
from typing import Any, Protocol, runtime_checkable

from streams_runtime.processors import ProcessorContext
from streams_runtime.record import Headers, TopicPartitionId
from streams_runtime.state import SourcePosition

__all__ = ["BatchContext", "Failure", "Final", "StateWrite", "native_available"]

_log = logging.getLogger(__name__)

Final = tuple[bytes, int, int, Any, int, Headers | None]
"""A window a core emitted: ``(key, start, end, aggregate, timestamp, headers)`` (a session's
timestamp is its end)."""
StateWrite = tuple[bytes, Any, int, int, int]
"""A change a core writes behind: ``(key + start + end, aggregate or None (gone), the
aggregate's timestamp, offset, timestamp)`` (the offset and timestamp of the input that caused
it)."""
Failure = tuple[int, Exception]
"""A record whose aggregation raised: its index in the batch, and the exception."""


@runtime_checkable
class BatchContext(ProcessorContext, Protocol):
    """What a task offers a source that takes its records a batch at a time."""

    @property
    def batch_input(self) -> TopicPartitionId:
        """The input partition whose records the task gives its batch source."""
        ...

    @property
    def position(self) -> SourcePosition:
        """The input record (or tick) being processed: what a write names as its cause."""
        ...


@functools.cache
def native_available() -> bool:
    """Whether the native core was built and loads (said once in the log when not)."""
    try:
        import streams_runtime._native  # noqa: F401
    except ImportError as exc:
        _log.warning(
            "the runtime's native core is not built (%s): every chain runs processor by "
            "processor, several times slower for those it fuses; install with a Rust toolchain "
            "(cargo) on PATH to build it",
            exc,
        )
        return False
    return True

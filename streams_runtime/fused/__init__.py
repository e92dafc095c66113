"""Fused operators: chains of processors the runtime runs as one, a whole batch of records per
call, on the native core (``streams_runtime._native``, built from native/) or, where it was not
built, on its pure-Python reference (docs/design.md §5, "the native core").

``native_core=False`` (:class:`~streams_runtime.RuntimeSettings`) runs every chain processor by
processor instead, the path the fused operators are checked against."""

from __future__ import annotations

import functools
import logging
from typing import Any

from streams_runtime.fused.session_core import SessionCore as PythonSessionCore
from streams_runtime.fused.time_window_core import TimeWindowCore as PythonTimeWindowCore

__all__ = ["native_available", "session_core_type", "time_window_core_type"]

_log = logging.getLogger(__name__)


@functools.cache
def native_available() -> bool:
    """Whether the native core was built and loads (said once in the log when not)."""
    try:
        import streams_runtime._native  # noqa: F401
    except ImportError as exc:
        _log.warning(
            "the runtime's native core is not built (%s): fused operators run on their "
            "pure-Python reference, several times slower; install with a Rust toolchain "
            "(cargo) on PATH to build it",
            exc,
        )
        return False
    return True


def session_core_type() -> type[Any]:
    """The session core to run: the native one where it is built."""
    if native_available():
        from streams_runtime._native import SessionCore

        return SessionCore
    return PythonSessionCore


def time_window_core_type() -> type[Any]:
    """The time-window core to run: the native one where it is built."""
    if native_available():
        from streams_runtime._native import TimeWindowCore

        return TimeWindowCore
    return PythonTimeWindowCore

"""Waiting without sleeps: poll a condition with a deadline; names no other run uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

__all__ = ["unique_name", "wait_for"]

T = TypeVar("T")


def unique_name(prefix: str) -> str:
    """A topic or group name no other test (or earlier run on a shared cluster) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    message: str = "condition",
) -> T:
    """Poll ``condition`` until it returns a truthy value and return it; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)

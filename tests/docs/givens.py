"""The names ``fragment`` blocks may use without defining them (``given: builder msg``): each a
real object of the kind the page's prose says it is, made fresh for every block."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message

from progress_control.protocol import ControlMarker, ControlRecord
from progress_control.trust import SigningKey, sign
from streams_runtime import StreamsBuilder
from streams_runtime.serdes import Json, String

__all__ = ["GIVENS"]

SECRET = b"a-docs-example-secret-of-32-bytes"


def _builder() -> StreamsBuilder:
    """The builder a page's topology is added to (String keys, JSON values)."""
    return StreamsBuilder(default_key_serde=String(), default_value_serde=Json())


def _tick() -> Message:
    """A control record on clicks[0], signed with ``secret_bytes`` as key ``ops-2026``."""
    now = int(time.time() * 1000)
    marker = sign(
        ControlMarker("docs", sequence=0), "clicks", 0, now, SigningKey("ops-2026", SECRET)
    )
    record = ControlRecord("clicks", 0, now, marker)
    return Message(
        topic="clicks",
        partition=0,
        key=record.key,
        value=None,
        timestamp=(1, now),  # TIMESTAMP_CREATE_TIME
        headers=list(record.headers),
    )


class _Consumer:
    """A consumer whose poll returns one data record."""

    def poll(self, timeout: float | None = None) -> Message:
        return Message(topic="clicks", partition=0, key=b"home", value=b"{}", headers=[])


class _Recorder:
    """A function of the reader's that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


def _quix_application() -> Any:
    """Quix Streams' Application, as the page's previous block imports it."""
    from progress_control.readers.quix import Application

    return Application


GIVENS: dict[str, Callable[[], Any]] = {
    "Application": _quix_application,
    "builder": _builder,
    "msg": _tick,
    "secret_bytes": lambda: SECRET,
    "advance_time": _Recorder,
    "consumer": _Consumer,
    "handle": _Recorder,
    "my_callback": _Recorder,
}
"""Name -> a factory of its object."""

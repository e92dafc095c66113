"""The record sinks the state tests hand their changelog writers
(:class:`streams_runtime.state.changelog.RecordSink`): :class:`ListSink`, a fake that keeps what
it was sent, and :class:`ProducerSink`, a real producer for the tests against the broker."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from streams_runtime.record import Headers
from streams_runtime.state import ChangelogWrites, decode_source

__all__ = ["ListSink", "ProducerSink"]

Sent = tuple[str, int, bytes | None, bytes | None, int, Headers | None]
"""A record as sent: topic, partition, key, value, timestamp, headers."""


class _SendEach:
    """``RecordSink.send_many`` as one ``send`` per write."""

    def send_many(self, topic: str, partition: int, writes: ChangelogWrites) -> None:
        for key, (value, timestamp, headers) in writes:
            self.send(topic, partition, key, value, timestamp, headers)  # type: ignore[attr-defined]


class ListSink(_SendEach):
    """A RecordSink that keeps what it was sent, in order (:attr:`sent`).

    ``sourced``: every record must carry a source header (a changelog write made while a
    record was being processed); :meth:`send` asserts it, so a test whose writes all have a
    source fails on the first one without."""

    def __init__(self, *, sourced: bool = False) -> None:
        self.sourced = sourced
        self.sent: list[Sent] = []

    def send(  # noqa: PLR0917 (RecordSink's signature)
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        if self.sourced:
            assert headers is not None
        self.sent.append((topic, partition, key, value, timestamp, headers))

    def changes(self) -> list[tuple[bytes | None, bytes | None, int]]:
        """Each record sent as (key, value, source offset; -1 without a source)."""
        return [
            (key, value, -1 if headers is None else decode_source(headers[0][1])[1])
            for _topic, _partition, key, value, _timestamp, headers in self.sent
        ]


class ProducerSink(_SendEach):
    """A RecordSink on a real producer; ``transactional_id`` makes it transactional."""

    def __init__(self, bootstrap: str, transactional_id: str | None = None) -> None:
        config: dict[str, str | int | bool] = {"bootstrap.servers": bootstrap, "linger.ms": 0}
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self.producer = Producer(config)
        self.errors: list[str] = []
        if transactional_id is not None:
            self.producer.init_transactions(30)

    def send(  # noqa: PLR0917 (RecordSink's signature)
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        self.producer.produce(
            topic,
            value,
            key,
            partition=partition,
            timestamp=timestamp,
            headers=list(headers or []),
            on_delivery=delivered,
        )

    def flush(self) -> None:
        assert self.producer.flush(30) == 0
        assert self.errors == []

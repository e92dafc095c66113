"""What the conformance topologies (:mod:`.topologies`, :mod:`.operator_topologies`) are built
from: Kafka's ``StringSerde`` and ``LongSerde`` twins, string streams and tables, Java's string
conversion, and the tumbling windows of a seed's session windows."""

from __future__ import annotations

from streams_runtime import SessionWindows, Stream, StreamsBuilder, Table, TimeWindows
from streams_runtime.serdes import Integer, String

__all__ = ["LONG", "STRING", "join", "string_stream", "string_table", "text", "tumbling"]

STRING = String()
LONG = Integer()


def string_stream(builder: StreamsBuilder, topic: str) -> Stream[str, str]:
    return builder.stream(topic, key_serde=STRING, value_serde=STRING)


def string_table(b: StreamsBuilder, topic: str, store: str) -> Table[str, str]:
    return b.table(topic, key_serde=STRING, value_serde=STRING, store_name=store)


def text(value: object) -> str:
    """Java's string conversion of a value in a concatenation (``null`` for ``None``)."""
    return "null" if value is None else str(value)


def join(value: str | None, row: str | None) -> str:
    return f"{text(value)}|{text(row)}"


def tumbling(w: SessionWindows) -> TimeWindows:
    return TimeWindows.of_size(w.gap_ms, grace=w.grace_ms)

"""The main job: a short, real round trip through the embedded broker.

Starts the broker (unless given one), produces a data record and a control record, consumes both
back and prints how each was classified. Later work grows this into the end-to-end pipeline.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TextIO

from confluent_kafka import Consumer, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control.broker import EmbeddedKafkaBroker
from progress_control.protocol import (
    ControlMarker,
    ControlRecord,
    is_control_record,
    parse_control_headers,
)

__all__ = ["run_demo"]

_CLIENT_LOG = logging.getLogger("progress_control.demo.librdkafka")


def run_demo(out: TextIO, bootstrap_servers: str | None = None) -> int:
    """Run the demo, printing a report to ``out``; return a process exit code."""
    if bootstrap_servers is not None:
        return _round_trip(bootstrap_servers, out)
    started = time.monotonic()
    out.write("Starting the embedded Apache Kafka broker (first run fetches its jars)...\n")
    out.flush()
    with EmbeddedKafkaBroker() as broker:
        out.write(
            f"Broker ready at {broker.bootstrap_servers} in {time.monotonic() - started:.1f}s\n"
        )
        return _round_trip(broker.bootstrap_servers, out)


def _round_trip(bootstrap: str, out: TextIO) -> int:
    topic = f"demo-clicks-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=2)]).values():
        future.result(timeout=30)
    out.write(f"Created topic {topic} with 2 partitions\n")

    now_ms = int(time.time() * 1000)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "logger": _CLIENT_LOG}
    )
    producer.produce(
        topic, key=b"user-1", value=b'{"page": "/home"}', partition=0, timestamp=now_ms
    )
    tick = ControlRecord(
        topic=topic,
        partition=1,
        timestamp_ms=now_ms + 1,
        marker=ControlMarker(source_id="demo", sequence=0),
    )
    producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    if producer.flush(30) != 0:
        raise KafkaException("records were not delivered within 30s")
    out.write("Produced 1 data record to partition 0 and 1 control record to partition 1\n")

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        received = _poll_until(consumer, lambda got: len(got) >= 2, timeout_s=30)
    finally:
        consumer.close()
    data = [m for m in received if not is_control_record(m)]
    control = [m for m in received if is_control_record(m)]
    for msg in sorted(received, key=lambda m: m.partition() or 0):
        kind = "control" if msg in control else "data"
        detail = ""
        if kind == "control":
            marker = parse_control_headers(msg.headers())
            assert marker is not None
            detail = f" source={marker.source_id} seq={marker.sequence}"
        out.write(
            f"  partition {msg.partition()} offset {msg.offset()}: {kind:7} key={msg.key()!r} "
            f"value={msg.value()!r} timestamp={msg.timestamp()[1]}{detail}\n"
        )
    out.write(f"Consumed {len(data)} data record(s) and {len(control)} control record(s)\n")
    return 0 if (len(data), len(control)) == (1, 1) else 1


def _poll_until(
    consumer: Consumer, done: Callable[[list[Message]], bool], timeout_s: float
) -> list[Message]:
    received: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while not done(received) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        received.append(msg)
    return received

"""The plain ``confluent_kafka`` baseline of the runtime benchmarks: one ``Consumer`` in
``consume(1000)`` batches, every record's key and value produced (idempotent, acks=all, as the
runtime's producer) to an output topic."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer

from bench._clicks import producer_config

__all__ = ["consume_produce"]

FETCH_BATCH = 1_000


def consume_produce(
    bootstrap_servers: str,
    source: str,
    sink: str,
    group_id: str,
    done: Callable[[int], bool],
    *,
    decode: bool = False,
    commit_interval_s: float | None = None,
) -> int:
    """Consume ``source`` from the start and produce each record to ``sink`` until
    ``done(records so far)``, then flush; returns the records seen.

    With ``decode``, each value is parsed as JSON and encoded again (the serde work of a real
    app); with ``commit_interval_s``, the producer is flushed and the consumer's positions
    committed that often (at-least-once, as a stream processor commits), and once at the end.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = KafkaProducer(producer_config(bootstrap_servers))
    producer.list_topics(sink, timeout=30)  # connect and fetch metadata before the first batch
    seen = 0
    produce, poll = producer.produce, producer.poll
    try:
        consumer.subscribe([source])
        last_commit = time.monotonic()
        while not done(seen):
            for msg in consumer.consume(FETCH_BATCH, 1.0):
                if msg.error() is not None:
                    continue
                value = msg.value()
                if decode and value is not None:
                    value = json.dumps(json.loads(value)).encode()
                while True:
                    try:
                        produce(sink, value, msg.key())
                        break
                    except BufferError:
                        poll(0.01)
                seen += 1
            poll(0)
            if (
                commit_interval_s is not None
                and time.monotonic() - last_commit >= commit_interval_s
            ):
                _commit(producer, consumer)
                last_commit = time.monotonic()
        if producer.flush(120):
            raise RuntimeError("records still queued after flush")
        if commit_interval_s is not None:
            _commit(producer, consumer)
    finally:
        consumer.close()
    return seen


def _commit(producer: KafkaProducer, consumer: Consumer) -> None:
    if producer.flush(120):
        raise RuntimeError("records still queued after flush")
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last one
            raise

"""The click workload of the runtime benchmarks: generate it onto a topic, count a windowed
count's output, and say what that output should be.

``events`` click events: key ``user-<i % 10,000>`` on partition ``(i % 10,000) % 4``, a small JSON
value, timestamps 1 ms apart (each user clicks every 10 s), with a 120 s pause after every block
of ``session_clicks`` clicks per user, so each user's session (gap 60 s) closes once the next
block starts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from bench._kafka import end_offsets, unique_name
from progress_control.protocol import is_control_record

__all__ = [
    "GAP_MS",
    "PARTITIONS",
    "USERS",
    "Clicks",
    "OutputWatch",
    "count_output",
    "produce_all",
    "producer_config",
]

PARTITIONS = 4
USERS = 10_000
GAP_MS = 60_000
STEP_MS = 1  # between consecutive events: a user clicks every USERS * STEP_MS = 10 s
PAUSE_MS = 2 * GAP_MS  # between blocks of sessions
FETCH_BATCH = 1_000
POLL_EVERY = 1_000


def producer_config(bootstrap_servers: str) -> dict[str, Any]:
    """Idempotent, as the runtime's producer: without it a retried batch (e.g. right after a
    topic's creation) can land after later ones, and out-of-order events are dropped as late."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }


def produce_all(producer: KafkaProducer, records: Callable[[], Any]) -> None:
    """Produce every ``(topic, partition, key, value, timestamp)`` of ``records()``, retrying on
    a full queue, then flush."""
    produce, poll = producer.produce, producer.poll
    for n, (topic, partition, key, value, timestamp) in enumerate(records()):
        while True:
            try:
                produce(topic, value, key, partition=partition, timestamp=timestamp)
                break
            except BufferError:
                poll(0.01)
        if n % POLL_EVERY == 0:
            poll(0)
    if producer.flush(120):
        raise RuntimeError("records still queued after flush")


@dataclass(frozen=True)
class Clicks:
    """One generated input: ``events`` clicks in blocks of ``session_clicks`` per user."""

    events: int
    session_clicks: int
    base_ms: int

    @classmethod
    def ending_now(cls, events: int, session_clicks: int) -> Clicks:
        """Event time ends a minute before now: far older timestamps would fall out of the
        topics' time-based retention (and their segments be deleted under the consumers)."""
        block = USERS * session_clicks
        span_ms = events * STEP_MS + (events // block) * PAUSE_MS
        return cls(events, session_clicks, int(time.time() * 1000) - span_ms - 60_000)

    def timestamp(self, i: int) -> int:
        """Event i's timestamp."""
        return self.base_ms + i * STEP_MS + (i // (USERS * self.session_clicks)) * PAUSE_MS

    def _records(self, topic: str) -> Iterator[tuple[str, int, bytes, bytes, int]]:
        for i in range(self.events):
            user = i % USERS
            value = b'{"page":"/p/%d"}' % (i % 100)
            yield topic, user % PARTITIONS, b"user-%d" % user, value, self.timestamp(i)

    def preload(self, bootstrap_servers: str, topic: str) -> None:
        """Produce every event to ``topic`` (``PARTITIONS`` partitions) and check they are there."""
        produce_all(KafkaProducer(producer_config(bootstrap_servers)), lambda: self._records(topic))
        on_broker = sum(end_offsets(bootstrap_servers, topic, PARTITIONS))
        if on_broker != self.events:
            raise RuntimeError(f"{on_broker} events on the broker, expected {self.events}")

    def expected_sessions(self) -> tuple[int, int]:
        """Closed sessions (gap ``GAP_MS``, no grace) and the clicks they count: every block's
        sessions close when the next block starts; the last block's stay open."""
        block = USERS * self.session_clicks
        closed_blocks = max(0, -(-self.events // block) - 1)
        return closed_blocks * USERS, closed_blocks * block

    def expected_tumbling(self, size_ms: int) -> tuple[int, int]:
        """Closed tumbling windows of ``size_ms`` (no grace) and the clicks they count: a
        window closes once its end is at or before its partition's stream time (its largest
        timestamp), as in Kafka Streams."""
        windows: dict[tuple[int, int], int] = {}
        stream_time = [0] * PARTITIONS
        for i in range(self.events):
            user, timestamp = i % USERS, self.timestamp(i)
            partition = user % PARTITIONS
            stream_time[partition] = max(stream_time[partition], timestamp)
            window = (user, timestamp - timestamp % size_ms)
            windows[window] = windows.get(window, 0) + 1
        closed = [
            n
            for (user, start), n in windows.items()
            if start + size_ms <= stream_time[user % PARTITIONS]
        ]
        return len(closed), sum(closed)


def _committed_reader(
    bootstrap_servers: str, topic: str, *, eof: bool = False
) -> tuple[Consumer, int]:
    """A consumer of every partition of ``topic`` from its start, committed records only
    (``eof``: telling the end of each partition), and how many partitions there are."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": unique_name("bench-read"),
            "enable.auto.commit": False,
            "enable.partition.eof": eof,
            "isolation.level": "read_committed",
        }
    )
    partitions = len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer, partitions


class OutputWatch:
    """The data records (windows) of ``topic`` so far, committed ones only, read as they come:
    how the benchmark sees a topology of several stages finish."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self._consumer, _ = _committed_reader(bootstrap_servers, topic)
        self.windows = 0

    def reaches(self, windows: int) -> bool:
        """Read what arrived since the last call; whether ``windows`` data records are there."""
        while self.windows < windows:
            messages = self._consumer.consume(FETCH_BATCH, 0.05)
            if not messages:
                break
            self.windows += sum(
                1
                for msg in messages
                if msg.error() is None and not (msg.headers() and is_control_record(msg))
            )
        return self.windows >= windows

    def close(self) -> None:
        self._consumer.close()


def count_output(bootstrap_servers: str, topic: str) -> tuple[int, int]:
    """Data records (windows) and their summed ``count`` fields in ``topic`` (JSON values),
    committed records only."""
    consumer, partitions = _committed_reader(bootstrap_servers, topic, eof=True)
    windows = clicks = 0
    done: set[int] = set()
    try:
        while len(done) < partitions:
            for msg in consumer.consume(FETCH_BATCH, 1.0):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done.add(msg.partition() or 0)
                    continue
                if msg.headers() and is_control_record(msg):
                    continue
                windows += 1
                clicks += json.loads(msg.value() or b"{}")["count"]
    finally:
        consumer.close()
    return windows, clicks

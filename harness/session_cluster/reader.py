"""Reading the session application's topics: every record to the current end (read_committed),
the final results among them, and :class:`OutWatcher`, which notes when each result became
readable."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from harness.session_cluster.app import INPUT_PARTITIONS
from harness.session_cluster.clicks import FLUSH_PREFIX, Session
from harness.session_cluster.config import ClusterError
from harness.waiting import unique_name
from progress_control.protocol import has_control_header


def _reader(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("promise-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            **extra,
        }
    )


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of each partition of ``topic``."""
    consumer = _reader(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_topic(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0
) -> list[Message]:
    """Every record of ``topic`` from the beginning to its current end, read_committed (so
    aborted transactions are not there), in offset order per partition."""
    ends = high_watermarks(bootstrap, topic, partitions)
    consumer = _reader(bootstrap)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Message] = []
    reached: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(reached) < partitions:
            if time.monotonic() > deadline:
                raise ClusterError(f"{topic}: not read to {ends} in {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                    reached.add(partition)
                continue
            records.append(msg)
            if offset + 1 >= ends[partition]:
                reached.add(partition)
    finally:
        consumer.close()
    return records


def is_tick(msg: Message) -> bool:
    """A record with our header is never data (see progress_control.protocol)."""
    return has_control_header(msg.headers())


def data_records(records: Iterable[Message]) -> list[Message]:
    return [m for m in records if not is_tick(m)]


def results_of(records: Iterable[Message]) -> list[Session]:
    """The final session results among ``out``'s records (flush users left out)."""
    found = []
    for msg in data_records(records):
        user = (msg.key() or b"").decode()
        if user.startswith(FLUSH_PREFIX):
            continue
        value = json.loads(msg.value() or b"null")
        found.append(Session(user, value["start"], value["end"], value["count"]))
    return sorted(found)


class OutWatcher:
    """Reads ``out`` (read_committed) in a thread and notes when each final result became
    readable (wall clock, epoch ms): the window-close delay and the liveness checks use it."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = _reader(bootstrap, **{"enable.partition.eof": False})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(INPUT_PARTITIONS)])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: list[tuple[Session, int]] = []
        self._thread = threading.Thread(target=self._run, name="out-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                arrived = int(time.time() * 1000)
                with self._lock:
                    self._seen.extend((s, arrived) for s in results_of([msg]))

    def seen(self) -> list[tuple[Session, int]]:
        """Every final result read so far with the wall-clock time it was read."""
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

"""Readers we do not control, over the runtime's final session results: Kafka Streams itself and
the Spark streaming job, each run on the runtime's output as written (with its ticks) and on a
copy without a single control record, so that their results can be compared
(``test_promise_readers.py``).

The runtime's results are records keyed by user with a JSON value ``{"start", "end", "count"}``
stamped with the session's end. Both readers run *after* the runtime finished, on what it wrote:

- **Kafka Streams** (``results-tumbling-sum`` in the conformance app): per user, tumbling windows
  over the results' timestamps, suppressed until they close. One task per input partition, so
  its stream time is the largest timestamp read so far on that partition, in offset order: its
  results depend on each partition's order alone, never on when records arrived, and a replay is
  exactly what a live reader gets.
- **The Spark streaming job** (:class:`progress_control_apps.spark.SessionizationStream`): its
watermark
  is one per query, the largest timestamp read in earlier micro-batches on *any* partition, so what
  is late depends on when records became readable and which share a micro-batch; a replay in one
  micro-batch could never drop anything. So an :class:`ArrivalRecorder` notes, while the runtime
  runs, the order in which its records became readable, and the job is fed in micro-batches cut
  from that order (:func:`live_batches`).

A tick here is any record carrying the ``progress-control`` header; "data" is everything else.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from progress_control.protocol import CONTROL_HEADER
from tests.conformance.broker_runs import ProcessedCheck
from tests.conformance.compare import OutputRecord
from tests.conformance.kstreams import KafkaStreamsApps
from tests.helpers import unique_name, wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from progress_control_apps.spark import SessionizationStream

__all__ = [
    "FLUSH_USER",
    "SENTINEL",
    "Arrival",
    "ArrivalRecorder",
    "Mode",
    "ReaderResults",
    "WindowResult",
    "behind_earlier_ticks",
    "copy_records",
    "flush_records",
    "is_tick",
    "kafka_streams_results",
    "live_batches",
    "read_committed",
    "session_clicks",
    "spark_results",
    "without_ticks",
]

SENTINEL = "__progress_control__"
"""The key a tick carries: Kafka Streams aggregates ticks under it like any key."""
FLUSH_USER = "~flush"
"""The user of the final far-future data record on every partition, which closes every window
in both runs (its own window is not a result)."""

Mode = str
"""``"ticks"`` (the runtime's output as written) or ``"clean"`` (no control record)."""
MODES: tuple[Mode, Mode] = ("ticks", "clean")

KAFKA_STREAMS_TIMEOUT_S = 60.0
SPARK_TIMEOUT_S = 120.0
"""How long a Spark job's watermark may take to reach what it was fed: a few micro-batches, which
took over 60 s once with four test workers on two cores."""


@dataclass(frozen=True, slots=True, order=True)
class WindowResult:
    """One final result of a reader: a user's window (start inclusive, end exclusive, epoch ms),
    the runtime results in it and their counts summed."""

    user: str
    start: int
    end: int
    results: int
    events: int


@dataclass(frozen=True, slots=True)
class ReaderResults:
    """A reader's final results before the flush records (time moved by what the runtime wrote
    alone) and after them (every window closed)."""

    before_flush: frozenset[WindowResult]
    final: frozenset[WindowResult]


# -- the runtime's output and its copies ---------------------------------------------------------


def read_committed(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[OutputRecord]:
    """Every committed record of ``topic`` (no writer may have a transaction open), in offset
    order per partition, timestamps as written.

    A partition is read when its end-of-partition event comes: under exactly-once the last
    offset of a partition is often a transaction marker, which no consumer ever receives, so
    "the record before the high watermark" may never arrive.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("promise-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        remaining = set(partitions)
        records: list[OutputRecord] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition() or 0)
                continue
            records.append(
                OutputRecord(
                    msg.partition() or 0,
                    msg.key(),
                    msg.value(),
                    msg.timestamp()[1],
                    _headers(msg),
                )
            )
        return records
    finally:
        consumer.close()


def _headers(msg: Message) -> tuple[tuple[str, bytes | None], ...]:
    # A consumed record's headers are a list of (name, bytes) pairs (or None).
    return tuple(cast("list[tuple[str, bytes | None]]", msg.headers() or []))


def is_tick(record: OutputRecord) -> bool:
    """Whether ``record`` carries the control header at all (valid or not: never data)."""
    return any(name == CONTROL_HEADER for name, _ in record.headers)


def without_ticks(records: Iterable[OutputRecord]) -> list[OutputRecord]:
    return [r for r in records if not is_tick(r)]


def behind_earlier_ticks(records: Iterable[OutputRecord]) -> list[tuple[int, str, int, int]]:
    """Data records older than a tick written before them to their partition (the broken
    promise): (partition, key, timestamp, latest earlier tick)."""
    latest: dict[int, int] = {}
    behind = []
    for r in records:  # offset order per partition
        if is_tick(r):
            latest[r.partition] = max(latest.get(r.partition, r.timestamp), r.timestamp)
        elif r.timestamp < latest.get(r.partition, r.timestamp):
            key = (r.key or b"").decode()
            behind.append((r.partition, key, r.timestamp, latest[r.partition]))
    return behind


def copy_records(bootstrap: str, topic: str, records: Sequence[OutputRecord]) -> None:
    """Write ``records`` to ``topic`` as they are (partition, key, value, timestamp, headers),
    in order per partition (an idempotent producer never reorders a partition on retries)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    failures: list[str] = []

    def on_delivery(error: object, _msg: object) -> None:
        if error is not None:
            failures.append(str(error))

    for r in records:
        producer.produce(
            topic,
            r.value,
            r.key,
            r.partition,
            timestamp=r.timestamp,
            headers=list(r.headers),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0, f"{topic}: records not delivered within 30 s"
    assert not failures, failures[:3]


def flush_records(partitions: int, timestamp: int, value: bytes) -> list[OutputRecord]:
    """One data record of :data:`FLUSH_USER` at ``timestamp`` on every partition."""
    return [OutputRecord(p, FLUSH_USER.encode(), value, timestamp) for p in range(partitions)]


def session_clicks(records: Iterable[OutputRecord]) -> list[OutputRecord]:
    """The runtime's results as the click events the Spark job reads.

    The job takes ``{"user": str, "page": str, "ts": int}`` values and nothing else: the
    runtime's ``{"start", "end", "count"}`` would all be malformed for it (no ``user``), neither
    data nor time. Each result becomes the click ``{"user": key, "page": "session", "ts": end}``
    (its count and start kept as extra fields, which the job ignores); partition, key, timestamp,
    headers and order stay as they are, and ticks are copied untouched. So the job sessionizes
    each user's *session ends* (its event time is the Kafka timestamp, the session's end), and
    every record it sees sits where the runtime wrote the result it stands for.
    """
    clicks = []
    for r in records:
        if is_tick(r) or r.value is None:
            clicks.append(r)
            continue
        result = json.loads(r.value)
        user = (r.key or b"").decode()
        click = {"user": user, "page": "session", "ts": result["end"]}
        click |= {"start": result["start"], "count": result["count"]}
        clicks.append(replace(r, value=json.dumps(click).encode()))
    return clicks


@dataclass(frozen=True, slots=True)
class Arrival:
    """A record and when it became readable (monotonic seconds)."""

    at: float
    record: OutputRecord


class ArrivalRecorder:
    """Reads ``topic`` from its beginning (read_committed, every partition) in a thread while it
    is written, noting when each record became readable: the order a live reader gets records
    in across partitions (within one, offset order). :meth:`finish` once no writer is left.

    Only the thread touches the consumer: a confluent-kafka client serializes calls on one
    handle, and a call from another thread waits for a gap between polls that may never come.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_name("promise-arrivals"),
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 50,
            }
        )
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._partitions = sorted(partitions)
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._arrivals: list[Arrival] = []
        self._finishing = threading.Event()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="arrivals", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # reported by finish()
            self._failure = exc
        finally:
            self._consumer.close()

    def _read(self) -> None:
        eof_at: dict[int, int] = {}  # partition -> end offset reached (while still there)
        ends: dict[int, int] | None = None
        while not self._stop.is_set():
            if ends is None and self._finishing.is_set():
                ends = {
                    p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), 10)[1]
                    for p in self._partitions
                }
            if ends is not None and all(eof_at.get(p, -1) >= end for p, end in ends.items()):
                return
            msg = self._consumer.poll(0.05)
            if msg is None:
                continue
            partition, error = msg.partition() or 0, msg.error()
            if error is None:
                eof_at.pop(partition, None)
                record = OutputRecord(
                    partition, msg.key(), msg.value(), msg.timestamp()[1], _headers(msg)
                )
                self._arrivals.append(Arrival(time.monotonic(), record))
            elif error.code() == KafkaError._PARTITION_EOF:
                eof_at[partition] = msg.offset() or 0

    def finish(self, timeout_s: float = 60.0) -> list[Arrival]:
        """Read on to the end of every partition (its writers are gone), stop, and return
        every record in the order read."""
        self._finishing.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.close()
            raise AssertionError(f"{self.topic} not read to its end within {timeout_s}s")
        if self._failure is not None:
            raise AssertionError(f"reading {self.topic} failed") from self._failure
        return list(self._arrivals)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def live_batches(arrivals: Sequence[Arrival], settle_s: float) -> list[list[OutputRecord]]:
    """Micro-batches of ``arrivals`` a live Spark job could have read, cut where ticks matter
    most: right before each data record that became readable behind a tick, while that tick was
    ahead of every readable data record (older than the latest tick on any partition readable
    ``settle_s`` before it, which was newer than all data readable then). Such a record meets a
    higher watermark with ticks than without, as high as any trigger schedule could make it:
    if the ticks can make the job drop it (its session window behind the watermark), they do.
    No cut elsewhere: where data alone is as far ahead, the watermark is the same in both runs,
    and a cut would only make records late in both (data alone, no cut at all: one batch).
    A batch is every record readable since the previous cut, so each partition stays in offset
    order. The run without ticks gets the same batches without the ticks: the same data in the
    same micro-batches.
    """
    if not arrivals:
        return []
    cuts: list[float] = []
    latest_any = latest_data = -1
    seen = 0  # arrivals[:seen] were readable settle_s before the record looked at
    for arrival in arrivals:
        while seen < len(arrivals) and arrivals[seen].at <= arrival.at - settle_s:
            earlier = arrivals[seen].record
            latest_any = max(latest_any, earlier.timestamp)
            if not is_tick(earlier):
                latest_data = max(latest_data, earlier.timestamp)
            seen += 1
        behind_a_tick = latest_data < latest_any and arrival.record.timestamp < latest_any
        if behind_a_tick and not is_tick(arrival.record):
            cuts.append(arrival.at - settle_s)
    batches: list[list[OutputRecord]] = [[] for _ in range(len(cuts) + 1)]
    batch = 0
    for arrival in arrivals:
        while batch < len(cuts) and arrival.at > cuts[batch]:
            batch += 1
        batches[batch].append(arrival.record)
    return [b for b in batches if b]


# -- Kafka Streams ------------------------------------------------------------------------------


def _kafka_streams_windows(bootstrap: str, topic: str, window_ms: int) -> frozenset[WindowResult]:
    found = set()
    for r in read_committed(bootstrap, topic):
        if r.key is None or r.value is None:
            continue
        user = r.key[:-8].decode()
        if user in (SENTINEL, FLUSH_USER):
            # Kafka Streams' windows of the ticks it read as records, and of the flush records:
            # ours to drop, not results.
            continue
        start = int.from_bytes(r.key[-8:], "big")
        results, events = (int(n) for n in r.value.decode().split(":"))
        found.add(WindowResult(user, start, start + window_ms, results, events))
    return frozenset(found)


def kafka_streams_results(
    kafka_streams: KafkaStreamsApps,
    bootstrap: str,
    inputs: dict[Mode, str],
    outputs: dict[Mode, str],
    flush: dict[Mode, list[OutputRecord]],
    *,
    window_ms: int,
    state_dir: Path,
) -> dict[Mode, ReaderResults]:
    """Run the conformance app's ``results-tumbling-sum`` (tumbling ``window_ms``, no grace) on
    each input, to its output: its results once it processed the input, then once it processed
    the ``flush`` records (written to each input here)."""
    app_id = unique_name("promise-reader-kstreams")
    spec = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": str(state_dir),
        "topologies": ",".join(inputs),
        # Every update forwarded as it happens, and only committed runtime output read: the
        # runtime runs exactly-once, and a killed instance's aborted writes stay in the log.
        "config.statestore.cache.max.bytes": "0",
        "config.commit.interval.ms": "100",
        "config.consumer.isolation.level": "read_committed",
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
    }
    for mode, topic in inputs.items():
        spec |= {
            f"{mode}.type": "results-tumbling-sum",
            f"{mode}.gap.ms": str(window_ms),
            f"{mode}.grace.ms": "0",
            f"{mode}.in": topic,
            f"{mode}.out": outputs[mode],
        }
    kafka_streams.start(spec)
    check = ProcessedCheck(bootstrap, app_id, list(inputs.values()))
    try:

        def processed() -> bool:
            kafka_streams.check(app_id)
            return check()

        before: dict[Mode, frozenset[WindowResult]] = {}
        for stage in ("before", "after"):
            wait_for(
                processed,
                timeout_s=KAFKA_STREAMS_TIMEOUT_S,
                interval_s=0.3,
                message=f"Kafka Streams processed its inputs ({stage} the flush)",
            )
            found = {m: _kafka_streams_windows(bootstrap, t, window_ms) for m, t in outputs.items()}
            if stage == "before":
                before = found
                for mode, topic in inputs.items():
                    copy_records(bootstrap, topic, flush[mode])
    finally:
        check.close()
        kafka_streams.stop(app_id)
    return {m: ReaderResults(before[m], found[m]) for m in inputs}


# -- the Spark streaming job --------------------------------------------------------------------


def _spark_windows(job: SessionizationStream) -> frozenset[WindowResult]:
    return frozenset(
        WindowResult(s.user, s.start_ms, s.window_end_ms, s.events, s.events)
        for s in job.sessions()
        if s.user != FLUSH_USER
    )


def _watermark_reached(job: SessionizationStream, at_ms: int) -> bool:
    job.raise_if_failed()
    return (job.metrics().watermark_ms or 0) >= at_ms


def spark_results(
    spark: SparkSession,
    bootstrap: str,
    topics: dict[Mode, str],
    batches: dict[Mode, list[list[OutputRecord]]],
    flush: dict[Mode, list[OutputRecord]],
    *,
    gap_ms: int,
    work: Path,
) -> dict[Mode, ReaderResults]:
    """Run the Spark streaming job (session gap ``gap_ms``, no watermark delay) on each topic,
    fed batch by batch: each batch is written, then processed by both jobs, before the next.
    Its sessions once the watermark reached the largest timestamp fed, then once it reached
    the ``flush`` records' (a session here is a :class:`WindowResult` whose results and events
    both are its click count; its end is the window end, last click + gap)."""
    from progress_control_apps.spark import KafkaSource, SessionizationStream, StreamConfig

    jobs = {
        mode: SessionizationStream(
            spark,
            StreamConfig(
                source=KafkaSource(bootstrap, topic),
                gap_ms=gap_ms,
                output_dir=str(work / mode / "out"),
                checkpoint_dir=str(work / mode / "checkpoints"),
                trigger_interval_ms=100,
            ),
        )
        for mode, topic in topics.items()
    }
    rounds = max(len(mode_batches) for mode_batches in batches.values())
    found: dict[str, dict[Mode, frozenset[WindowResult]]] = {}
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            for k in range(rounds):
                for mode, mode_batches in batches.items():
                    if k < len(mode_batches):
                        copy_records(bootstrap, topics[mode], mode_batches[k])
                if k == 0:  # the first batch is there when the jobs start
                    for job in jobs.values():
                        job.start()
                if k < rounds - 1:  # both jobs at once; each query blocks its caller
                    list(pool.map(lambda job: job.process_all_available(), jobs.values()))
        for stage in ("before", "after"):
            for mode, job in jobs.items():
                fed = [r for b in batches[mode] for r in b] if stage == "before" else flush[mode]
                latest = max(r.timestamp for r in fed)
                wait_for(
                    partial(_watermark_reached, job, latest),
                    timeout_s=SPARK_TIMEOUT_S,
                    interval_s=0.2,
                    message=f"the Spark job's watermark at {latest} ({mode}, {stage} the flush)",
                )
            found[stage] = {mode: _spark_windows(job) for mode, job in jobs.items()}
            if stage == "before":
                for mode, topic in topics.items():
                    copy_records(bootstrap, topic, flush[mode])
    finally:
        for job in jobs.values():
            job.stop()
    return {m: ReaderResults(found["before"][m], found["after"][m]) for m in topics}

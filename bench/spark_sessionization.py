"""Spark sessionization: the job's session function vs a plain Spark SQL ``session_window`` query.

Part 1, batch, on ``local[2]``: ``BENCH_EVENTS`` (default 10,000,000) click events generated in
Spark (``spark.range`` with derived columns, shaped like the job's parsed records: one row in
1,000 a control record, one in 10,000 malformed), 100 events per user in 10 sessions of 10.
Two variants, measured in the same run in interleaved (rotating) order, each repeated
``BENCH_REPEATS`` times (default 3, median taken), after an untimed warm-up of both:

(a) ``progress_control_apps.spark.sessionize_events`` on that DataFrame (drop control and malformed
rows,
    per-user ``session_window``, first/last event, count);
(b) the same aggregation written as plain Spark SQL:
    ``... WHERE NOT is_control AND error IS NULL GROUP BY session_window(event_time, ...), user``.

Each run executes the whole plan into Spark's ``noop`` sink (every output column computed, none
written). Both results are checked equal (a checksum over every column) outside the clock. The
goal is (a)/(b) <= 1.1: the job's sessionization costs at most 10% over hand-written SQL.

Part 2, control-record validation: :mod:`bench.spark_validation` (``BENCH_VALIDATION_EVENTS``,
``BENCH_VALIDATION_TICKS``; 0 skips).
Part 3, streaming, against the embedded broker (``BENCH_LATENCY_ROUNDS``, default 5; 0 skips):
per round, a user's clicks are produced and processed, then one control record per partition at
the session's window end; the delay is measured from the tick's ``flush()`` to the session
appearing (a) in the Parquet output (the micro-batch that wrote it committed, from the query
listener) and (b) to a consumer of the Kafka output topic; each output is then verified.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from bench._kafka import create_topic, unique_name
from bench._timing import interleaved
from progress_control.protocol import ControlMarker, ControlRecord
from progress_control_apps.dev.broker import EmbeddedKafkaBroker
from progress_control_apps.spark import (
    KafkaSource,
    SessionizationStream,
    StreamConfig,
    sessionize_events,
    spark_session,
)

MASTER = "local[2]"
GAP_MS = 30_000
EVENTS_PER_USER = 100
EVENTS_PER_SESSION = 10
STEP_MS = 10_000  # between a user's events within a session (plus up to 5 s of jitter)
PAUSE_MS = 60_000  # extra pause between a user's sessions
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PARTITIONS = 2

VARIANTS = {
    "a": "progress_control_apps.spark.sessionize_events",
    "b": "plain Spark SQL session_window GROUP BY",
}


def generate_events(spark: SparkSession, events: int) -> DataFrame:
    """Parsed-record-shaped click events, generated lazily by Spark (no Kafka involved)."""
    users = max(1, events // EVENTS_PER_USER)
    nth = sf.floor(sf.col("id") / users)  # the user's n-th event
    jitter = sf.pmod(sf.xxhash64("id"), sf.lit(5_000))
    millis = (
        sf.lit(BASE_MS) + nth * STEP_MS + sf.floor(nth / EVENTS_PER_SESSION) * PAUSE_MS + jitter
    )
    # Spread over all users by hash (a modulus would hit the same users every time).
    is_control = sf.pmod(sf.xxhash64(sf.col("id"), sf.lit("control")), sf.lit(1_000)) == 0
    malformed = sf.pmod(sf.xxhash64(sf.col("id"), sf.lit("malformed")), sf.lit(10_000)) == 0
    error = sf.when(malformed & ~is_control, sf.lit("value is not valid JSON"))
    is_data = ~is_control & error.isNull()
    return spark.range(events).select(
        sf.timestamp_millis(millis).alias("event_time"),
        is_control.alias("is_control"),
        sf.when(is_data, sf.concat(sf.lit("user-"), sf.col("id") % users)).alias("user"),
        sf.when(is_data, sf.concat(sf.lit("/page-"), sf.col("id") % 50)).alias("page"),
        error.alias("error"),
    )


def plain_sql(spark: SparkSession, events: DataFrame) -> DataFrame:
    """The baseline: the same sessions as a hand-written Spark SQL query."""
    events.createOrReplaceTempView("bench_events")
    return spark.sql(
        """
        SELECT user,
               min(event_time) AS session_start,
               max(event_time) AS session_end,
               session_window.start AS window_start,
               session_window.end AS window_end,
               count(*) AS events
        FROM bench_events
        WHERE NOT is_control AND error IS NULL
        GROUP BY session_window(event_time, :gap), user
        """,
        args={"gap": f"{GAP_MS} milliseconds"},
    )


def _variant(spark: SparkSession, name: str, events: int) -> DataFrame:
    frame = generate_events(spark, events)
    return sessionize_events(frame, GAP_MS) if name == "a" else plain_sql(spark, frame)


def _timed_run(spark: SparkSession, name: str, events: int) -> float:
    sessions = _variant(spark, name, events)
    started = time.perf_counter()
    sessions.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def _checksum(spark: SparkSession, name: str, events: int) -> tuple[int, ...]:
    sessions = _variant(spark, name, events)
    row = sessions.agg(
        sf.count(sf.lit(1)),
        sf.sum("events"),
        sf.sum(sf.unix_millis("session_start")),
        sf.sum(sf.unix_millis("session_end")),
        sf.sum(sf.unix_millis("window_start")),
        sf.sum(sf.unix_millis("window_end")),
        sf.sum(sf.xxhash64("user", "session_start") % 1_000_003),
    ).first()
    assert row is not None
    return tuple(int(value) for value in row)


def batch_benchmark(spark: SparkSession, events: int, repeats: int) -> None:
    names = list(VARIANTS)
    # Warmed up at full size first: JIT, class loading, heap growth.
    times = interleaved(lambda name: _timed_run(spark, name, events), names, repeats, warm_up=True)
    sums = {name: _checksum(spark, name, events) for name in names}
    if sums["a"] != sums["b"]:
        raise RuntimeError(f"the variants disagree: {sums}")
    sessions, data_events = sums["a"][0], sums["a"][1]
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"{events:,} generated events ({data_events:,} data, the rest control/malformed), "
        f"{max(1, events // EVENTS_PER_USER):,} users -> {sessions:,} sessions "
        f"(both variants checked equal), gap {GAP_MS // 1000} s, {MASTER}, "
        f"median of {repeats} (interleaved)"
    )
    for name in names:
        runs = [round(t, 2) for t in times[name]]
        rate = events / median[name]
        print(
            f"({name}) {VARIANTS[name]:<40} {median[name]:>7.2f} s  {rate:>11,.0f} events/s  {runs}"
        )
    print(f"(a)/(b): {median['a'] / median['b']:.3f}  (goal <= 1.1)")


class _Commits(StreamingQueryListener):
    """When each micro-batch of the sessions query committed, and how many sessions it wrote."""

    def __init__(self) -> None:
        self.query_id: str | None = None
        self.batches: list[tuple[float, int, int]] = []  # (monotonic time, rows, duration ms)
        self._lock = threading.Lock()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 (Spark's API)
        """Not needed."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802 (Spark's API)
        """Note a committed micro-batch of the watched query."""
        progress = event.progress
        if str(progress.id) == self.query_id:
            # The file sink reports no row count; in append mode a session window's output
            # rows are the sessions its state evicted.
            rows = sum(op.numRowsRemoved for op in progress.stateOperators)
            took = int(progress.durationMs.get("triggerExecution", 0))
            with self._lock:
                self.batches.append((time.monotonic(), rows, took))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802 (Spark's API)
        """Not needed."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802 (Spark's API)
        """Not needed."""

    def first_output_after(self, since: float) -> float | None:
        with self._lock:
            return next((t for t, rows, _ in self.batches if t > since and rows > 0), None)

    def durations_ms(self) -> list[int]:
        with self._lock:
            return [took for _, _, took in self.batches]


class _KafkaArrivals(threading.Thread):
    """Consumes the sessions output topic in the background, noting when each user's session
    first arrived (so the Parquet polling in the main thread does not delay the reading)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("b")})
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self._closing = threading.Event()
        self.arrived: dict[str, float] = {}

    def run(self) -> None:
        while not self._closing.is_set():
            msg = self._consumer.poll(0.01)
            value = None if msg is None or msg.error() is not None else msg.value()
            if value:
                self.arrived.setdefault(json.loads(value)["user"], time.monotonic())
        self._consumer.close()

    def close(self) -> None:
        self._closing.set()
        self.join()


def _wait(condition: Callable[[], float | None], timeout_s: float, what: str) -> float:
    """Poll until ``condition()`` returns a time, and return it."""
    deadline = time.monotonic() + timeout_s
    while (found := condition()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)
    return found


def latency_benchmark(spark: SparkSession, rounds: int) -> None:
    trigger_ms = int(os.environ.get("BENCH_TRIGGER_MS", "1000"))
    parquet: list[float] = []
    kafka: list[float] = []
    commits = _Commits()
    spark.streams.addListener(commits)
    with EmbeddedKafkaBroker() as broker, tempfile.TemporaryDirectory() as work:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique_name("bench-clicks"), PARTITIONS)
        out_topic = create_topic(bootstrap, unique_name("bench-sessions"), 1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        arrivals = _KafkaArrivals(bootstrap, out_topic)
        arrivals.start()
        config = StreamConfig(
            KafkaSource(bootstrap, topic),
            GAP_MS,
            str(Path(work) / "out"),
            str(Path(work) / "checkpoints"),
            trigger_interval_ms=trigger_ms,
            output_topic=out_topic,
        )
        # Event time runs behind wall-clock, as for a producer whose ticks are extrapolated.
        start_ms = int(time.time() * 1000) - rounds * 2 * GAP_MS - 60_000
        try:
            with SessionizationStream(spark, config) as job:
                commits.query_id = str(job.queries["sessions"].id)
                for n in range(rounds):
                    user = f"bench-user-{n}"
                    first = start_ms + n * 2 * GAP_MS
                    for i in range(3):
                        at = first + i * 1_000
                        value = json.dumps({"user": user, "page": "/", "ts": at})
                        producer.produce(topic, key=user, value=value, timestamp=at)
                    producer.flush(30)
                    job.process_all_available()  # the clicks are in the job's state; silence
                    window_end = first + 2_000 + GAP_MS  # the session is over from here on
                    for partition in range(PARTITIONS):
                        marker = ControlMarker("bench", n * PARTITIONS + partition)
                        tick = ControlRecord(topic, partition, window_end, marker)
                        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
                    producer.flush(30)
                    ticked = time.monotonic()

                    def committed(ticked: float = ticked) -> float | None:
                        return commits.first_output_after(ticked)

                    def on_kafka(user: str = user) -> float | None:
                        return arrivals.arrived.get(user)

                    parquet.append(_wait(committed, 60, f"{user} in Parquet") - ticked)
                    kafka.append(_wait(on_kafka, 60, f"{user} on the Kafka topic") - ticked)
                    # Off the clock: the committed batch holds exactly this session.
                    found = [s for s in job.sessions() if s.user == user]
                    if [(s.start_ms, s.end_ms, s.events) for s in found] != [
                        (first, first + 2_000, 3)
                    ]:
                        raise RuntimeError(f"unexpected output for {user}: {found}")
        finally:
            arrivals.close()
            spark.streams.removeListener(commits)
    batch_ms = statistics.median(commits.durations_ms())
    print(
        f"streaming, tick sent -> session out ({rounds} sessions, trigger {trigger_ms} ms, "
        f"{PARTITIONS} partitions, embedded broker; sessions micro-batch median {batch_ms:.0f} ms; "
        "a tick needs two: one moves the watermark, the next evicts):"
    )
    for label, values in (("Parquet (batch committed)", parquet), ("Kafka output topic", kafka)):
        runs = [round(v, 2) for v in values]
        print(f"  {label:<26} median {statistics.median(values):.2f} s  {runs}")


def main() -> None:
    events = int(os.environ.get("BENCH_EVENTS", "10000000"))
    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    rounds = int(os.environ.get("BENCH_LATENCY_ROUNDS", "5"))
    validation = int(os.environ.get("BENCH_VALIDATION_EVENTS", "2000000"))
    ticks = int(os.environ.get("BENCH_VALIDATION_TICKS", "1000000"))
    spark = spark_session(MASTER, "bench-spark-sessionization")
    try:
        if events > 0:
            batch_benchmark(spark, events, repeats)
        if validation > 0:
            from bench.spark_validation import validation_benchmark  # imports this module

            validation_benchmark(spark, validation, ticks, repeats)
        if rounds > 0:
            latency_benchmark(spark, rounds)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

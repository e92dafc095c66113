"""The Flink companion (``readers/flink``, docs/readers/flink.md) against the real thing: a Flink
2.2 job on a MiniCluster with the real Kafka connector reads topics on the test broker.

One JVM runs the example job (``TickedSessionsJob``: per-user event-time session windows, gap
1 s, parallelism 2 over 3 partitions, so one source reader holds two partitions and its
watermark is their minimum) with two pipelines on two topics holding the same clicks:

- **ticks**: the clicks come from ``interceptor.Producer``, which ticks each partition once it
  goes idle; nothing but ticks follows the last click.
- **clean**: the same clicks from a plain producer, then one click per partition a minute later,
  which closes every session the way data does (those sessions never close themselves).
- **none**: the same clicks from a plain producer and nothing after them, the control: its last
  sessions can never close, so the ticks run's are the ticks' doing.

Asserted: in the ticks run every session closes on ticks alone, and both runs' sessions equal
the ones computed here from the clicks; the control run closed fewer; the job never failed (its
deserializer and functions throw on anything but a click, so a tick reaching user code fails it).

The header and trust checks the companion shares with the Kafka Streams one
(``progress-control-core``) are pinned to the Python protocol's by test_control_vectors.py; the
JUnit tests of every module run under Maven (``mvn -f readers/pom.xml test``, in .ci/run).

CI runs one seed; ``PROGRESS_CONTROL_LONG_TESTS=1`` adds seeds and 6 partitions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer

from interceptor import Producer as TickingProducer
from progress_control.protocol import is_control_record
from streams_runtime.murmur2 import partition_for_key
from tests.helpers import TopicReader, wait_for
from tests.readers.clicks import (
    Clicks,
    session_clicks,
    session_windows,
    users_on_every_partition,
)
from tests.readers.flink_job import TickedSessionsJob, build_flink_companion

LONG = os.environ.get("PROGRESS_CONTROL_LONG_TESTS") == "1"
CASES = [(1, 3), (2, 6), (3, 3)] if LONG else [(30, 3)]  # (seed, partitions)
GAP_MS = 1_000
PARALLELISM = 2
TICKS = {
    "progress.control.start.ms": 300,
    "progress.control.backoff.ms": 300,
    "progress.control.backoff.exponential": False,
    "progress.control.max.records": 60,  # 18 s of ticks at most; 2 s close everything
}
FLUSH_AFTER_MS = 60_000


def _produce(producer: Producer, topic: str, clicks: Clicks, partitions: int) -> None:
    for user, ts in clicks:
        partition = partition_for_key(user.encode(), partitions)
        producer.produce(topic, key=user, value=f"{user}:click", partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def _ticks(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    reader = TopicReader(bootstrap, topic, partitions)
    try:
        return [m for m in reader.read() if is_control_record(m)]
    finally:
        reader.close()


@pytest.fixture(scope="module")
def flink_jars() -> Path:
    return build_flink_companion()


@pytest.mark.broker
@pytest.mark.network
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c[0]}-{c[1]}partitions")
def test_flink_closes_every_session_on_ticks_alone_as_data_would(
    case: tuple[int, int],
    *,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    flink_jars: Path,
    tmp_path: Path,
) -> None:
    seed, partitions = case
    topics = {
        mode: create_topic(f"flink-{mode}", partitions=partitions)
        for mode in ("ticks", "clean", "none")
    }
    # Clicks dated a minute back, so the interceptor's extrapolated ticks (last click + time
    # since its ack, never above wall-clock now) move time on from the last click.
    base_ms = int(time.time() * 1000) - 60_000
    clicks = session_clicks(
        seed,
        base_ms,
        users_on_every_partition(partitions),
        start_spread_ms=2000,
        click_gap_ms=(200, 400),
        session_gap_ms=(2500, 4000),
    )
    expected = session_windows(clicks, GAP_MS)
    last_ms = clicks[-1][1]

    plain = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    _produce(plain, topics["clean"], clicks, partitions)
    _produce(plain, topics["none"], clicks, partitions)
    for partition in range(partitions):  # a click per partition a minute later: data closes all
        plain.produce(
            topics["clean"],
            key=f"flush-{partition}",
            value=b"flush",
            partition=partition,
            timestamp=last_ms + FLUSH_AFTER_MS,
        )
    assert plain.flush(30) == 0

    ticking = TickingProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, **TICKS})
    try:
        _produce(ticking, topics["ticks"], clicks, partitions)
        with TickedSessionsJob(
            flink_jars,
            tmp_path / "jvm",
            bootstrap=kafka_bootstrap,
            gap_ms=GAP_MS,
            parallelism=PARALLELISM,
            topics=topics,
        ) as job:

            def every_session_out() -> bool:
                job.poll()
                return job.sessions["ticks"] >= expected and job.sessions["clean"] >= expected

            wait_for(
                every_session_out,
                timeout_s=120,
                interval_s=0.2,
                message=f"every session out in both runs: {job.sessions}",
            )
            job.poll()
        ticks = _ticks(kafka_bootstrap, topics["ticks"], partitions)
    finally:
        ticking.close()

    assert {m.partition() for m in ticks} == set(range(partitions)), "every partition ticked"
    assert job.sessions["ticks"] == expected
    assert job.sessions["clean"] == expected
    # Deterministic, not timed: without ticks or later data a last session can never close.
    assert job.sessions["none"] < expected, "the control run closed every session"

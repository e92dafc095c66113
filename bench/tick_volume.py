"""Control records per idle partition-hour: ``interceptor.Producer`` vs a naive heartbeat.

A naive heartbeat sends one tick every ``start.ms`` for as long as a partition is idle
(3600 s / 10 s = 360 per hour). The interceptor's default schedule sends the first tick after
``start.ms``, then backs off exponentially and stops after ``max.records``.

Time is scaled by ``BENCH_TIME_SCALE`` (default 100): start.ms = 10000/scale, backoff.ms =
1000/scale, other settings at their defaults, and one "hour" lasts 3600/scale seconds. One record
goes to each of 4 partitions, the producer then idles for the scaled hour calling ``poll(0.1)``,
and the control records actually on the broker are counted per partition. Goal: ratio <= 0.05.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench._kafka import create_topic, end_offsets, unique_name
from interceptor import InterceptorSettings
from interceptor import Producer as InterceptorProducer
from progress_control import is_control_record
from progress_control.dev.broker import EmbeddedKafkaBroker

PARTITIONS = 4
HOUR_MS = 3_600_000
DEFAULT_START_MS = 10_000
DEFAULT_BACKOFF_MS = 1_000
CONSUME_TIMEOUT_S = 60.0


def _count_on_broker(bootstrap_servers: str, topic: str) -> tuple[list[int], list[int]]:
    """(control records, data records) per partition, read from the beginning to the end."""
    ends = end_offsets(bootstrap_servers, topic, PARTITIONS)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": unique_name("bench-tick-volume"),
            "enable.auto.commit": False,
        }
    )
    control = [0] * PARTITIONS
    data = [0] * PARTITIONS
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        pending = {p for p in range(PARTITIONS) if ends[p] > 0}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"partitions {sorted(pending)} not read to the end in time")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise RuntimeError(f"consumer error: {msg.error()}")
            partition = msg.partition() or 0
            if is_control_record(msg):
                control[partition] += 1
            else:
                data[partition] += 1
            offset = msg.offset()
            if offset is not None and offset + 1 >= ends[partition]:
                pending.discard(partition)
    finally:
        consumer.close()
    return control, data


def main() -> None:
    scale = float(os.environ.get("BENCH_TIME_SCALE", "100"))
    start_ms = max(1, round(DEFAULT_START_MS / scale))
    backoff_ms = max(1, round(DEFAULT_BACKOFF_MS / scale))
    hour_s = HOUR_MS / scale / 1000
    settings = InterceptorSettings.from_config(
        {"progress.control.start.ms": start_ms, "progress.control.backoff.ms": backoff_ms}
    )
    schedule = settings.tick_schedule()
    expected = 0
    while (offset := schedule.offset_ms(expected)) is not None and offset <= hour_s * 1000:
        expected += 1

    with EmbeddedKafkaBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topic = create_topic(bootstrap, unique_name("bench-tick-volume"), PARTITIONS)
        producer = InterceptorProducer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "progress.control.start.ms": start_ms,
                "progress.control.backoff.ms": backoff_ms,
            }
        )
        try:
            for partition in range(PARTITIONS):
                producer.produce(topic, b"data", partition=partition)
            if producer.flush(30):
                raise RuntimeError("data records not delivered")
            idle_until = time.monotonic() + hour_s
            while time.monotonic() < idle_until:
                producer.poll(0.1)
            producer.flush(30)
            snapshot = producer.progress_metrics()
        finally:
            producer.close()
        control, data = _count_on_broker(bootstrap, topic)

    if data != [1] * PARTITIONS:
        raise RuntimeError(f"expected one data record per partition, found {data}")
    naive = HOUR_MS / DEFAULT_START_MS  # = hour / start.ms, the same in scaled time
    per_partition_hour = sum(control) / PARTITIONS
    print(
        f"time scale 1/{scale:g}: start.ms={start_ms}, backoff.ms={backoff_ms}, "
        f"exponential={settings.backoff_exponential}, multiplier={settings.backoff_multiplier:g}, "
        f"max.records={settings.max_records}; 1 h = {hour_s:g} s"
    )
    print(f"control records on broker per partition: {control}  (schedule predicts {expected})")
    print(f"ticks per idle partition-hour: {per_partition_hour:8.2f}")
    print(f"naive heartbeat per hour:      {naive:8.2f}")
    print(f"ratio: {per_partition_hour / naive:.4f}  (goal <= 0.05)")
    if snapshot is not None:
        print(
            f"MetricsSnapshot: ticks_sent={snapshot.ticks_sent}"
            f" ticks_failed={snapshot.ticks_failed} ticks_skipped={snapshot.ticks_skipped}"
            f" partitions_idle={snapshot.partitions_idle}"
        )


if __name__ == "__main__":
    main()

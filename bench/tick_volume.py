"""Control records per idle partition-hour: ``interceptor.Producer``'s schedules vs a naive
heartbeat.

A naive heartbeat sends one tick every 10 s for as long as a partition is idle (360 per hour).
Two schedules are measured side by side in the same (scaled) hour:

- **defaults**: a tick each second from the first second of idleness, for up to an hour (windows
  close within about a second; one tick per idle partition-second);
- **economy**: ``start.ms=10000``, ``backoff.exponential=true``, ``max.records=10`` (the
  previous defaults: ten ticks spread over ~17 minutes, windows close up to twice their idle
  time late).

Time is scaled by ``BENCH_TIME_SCALE`` (default 100): every ``*.ms`` setting is divided by it, and
one "hour" lasts 3600/scale seconds. One record goes to each of 4 partitions per schedule, the
producers then idle for the scaled hour calling ``poll(0.1)``, and the control records actually
on the broker are counted per partition.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench._kafka import create_topic, end_offsets, unique_name
from interceptor import InterceptorSettings
from interceptor import Producer as InterceptorProducer
from progress_control import is_control_record
from progress_control_apps.dev.broker import EmbeddedKafkaBroker

PARTITIONS = 4
HOUR_MS = 3_600_000
NAIVE_INTERVAL_MS = 10_000
SCHEDULES: dict[str, dict[str, object]] = {
    "defaults": {},
    "economy": {
        "progress.control.start.ms": 10_000,
        "progress.control.backoff.exponential": True,
        "progress.control.max.records": 10,
        "progress.control.end.ms": None,
    },
}
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


def _scaled(config: dict[str, object], scale: float) -> dict[str, object]:
    """``config`` over the defaults, every ``*.ms`` setting divided by ``scale``."""
    defaults = InterceptorSettings.from_config({})
    full: dict[str, object] = {
        "progress.control.start.ms": defaults.start_ms,
        "progress.control.backoff.ms": defaults.backoff_ms,
        "progress.control.end.ms": defaults.end_ms,
        **config,
    }
    return {
        key: max(1, round(value / scale))
        if key.endswith(".ms") and isinstance(value, int)
        else value
        for key, value in full.items()
    }


def _predicted(settings: InterceptorSettings, hour_ms: float) -> int:
    schedule = settings.tick_schedule()
    count = 0
    while (offset := schedule.offset_ms(count)) is not None and offset <= hour_ms:
        count += 1
    return count


def main() -> None:
    scale = float(os.environ.get("BENCH_TIME_SCALE", "100"))
    hour_s = HOUR_MS / scale / 1000
    configs = {name: _scaled(config, scale) for name, config in SCHEDULES.items()}

    with EmbeddedKafkaBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topics = {
            name: create_topic(bootstrap, unique_name(f"bench-tick-volume-{name}"), PARTITIONS)
            for name in configs
        }
        producers = {
            name: InterceptorProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
            for name, config in configs.items()
        }
        try:
            for name, producer in producers.items():
                for partition in range(PARTITIONS):
                    producer.produce(topics[name], b"data", partition=partition)
                if producer.flush(30):
                    raise RuntimeError("data records not delivered")
            idle_until = time.monotonic() + hour_s
            while time.monotonic() < idle_until:
                for producer in producers.values():
                    producer.poll(0.05)
            for producer in producers.values():
                producer.flush(30)
        finally:
            for producer in producers.values():
                producer.close()
        counts = {name: _count_on_broker(bootstrap, topic) for name, topic in topics.items()}

    naive = HOUR_MS / NAIVE_INTERVAL_MS
    print(f"time scale 1/{scale:g}: 1 h = {hour_s:g} s; naive heartbeat every 10 s: {naive:g}/h")
    for name, (control, data) in counts.items():
        if data != [1] * PARTITIONS:
            raise RuntimeError(f"{name}: expected one data record per partition, found {data}")
        settings = InterceptorSettings.from_config(configs[name])
        per_partition_hour = sum(control) / PARTITIONS
        print(
            f"{name:9s} start.ms={settings.start_ms} backoff.ms={settings.backoff_ms} "
            f"exponential={settings.backoff_exponential} max.records={settings.max_records} "
            f"end.ms={settings.end_ms}: per partition {control} "
            f"(schedule predicts {_predicted(settings, HOUR_MS / scale)}), "
            f"{per_partition_hour:.1f} per idle partition-hour, "
            f"ratio to naive {per_partition_hour / naive:.4f}"
        )


if __name__ == "__main__":
    main()

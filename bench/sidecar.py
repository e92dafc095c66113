"""Sidecar benchmarks on the real broker.

1. Ticks with 3 replicas watching the same idle topic ÷ ticks with 1 replica (goal <= 1.1), with
   the replicas' real random jitter.
2. Rollout: ticks a restarted sidecar sends to ``BENCH_ROLLOUT_PARTITIONS`` (default 1,000)
   partitions whose schedule its predecessor completed (goal 0; a sidecar that restarts every
   schedule sends ``partitions x max.records``), and how long its first look takes.
3. RSS and CPU of one ``progress-control sidecar`` process watching ``BENCH_PARTITIONS`` (default
   10,000) idle partitions (goal <= 150 MB), against the same process watching 10 partitions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as PlainProducer

from bench._kafka import create_topic, end_offsets, unique_name
from progress_control.protocol import is_control_record
from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker
from sidecar.service import ProgressControlSidecar
from sidecar.settings import SidecarSettings

REPLICA_PARTITIONS = 8
SCHEDULE = {"start.ms": 1_000, "backoff.ms": 300, "backoff.exponential": False, "max.records": 3}
MEASURE_S = float(os.environ.get("BENCH_MEASURE_S", "60"))


def _count_ticks(bootstrap: str, topic: str, partitions: int) -> int:
    ends = end_offsets(bootstrap, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("count"),
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    ticks, done = 0, set[int | None]()
    while len(done) < partitions:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error() is not None:
            done.add(msg.partition())
            continue
        ticks += is_control_record(msg)
        if (msg.offset() or 0) >= ends[msg.partition() or 0] - 1:
            done.add(msg.partition())
    consumer.close()
    return ticks


def _settings(bootstrap: str, topic: str, **extra: object) -> SidecarSettings:
    return SidecarSettings.from_config(
        {
            "progress.control.kafka": {"bootstrap.servers": bootstrap},
            "progress.control.topics.include": topic,
            "progress.control.watch.interval.ms": 500,
            "progress.control.http.port": 0,
            "progress.control.report.listen": "",
            **{f"progress.control.{k}": v for k, v in {**SCHEDULE, **extra}.items()},
        }
    )


def _produce_one_each(bootstrap: str, topic: str, partitions: int) -> None:
    producer = PlainProducer({"bootstrap.servers": bootstrap})
    for partition in range(partitions):
        producer.produce(topic, b"v", b"k", partition=partition)
    producer.flush(30)


def _wait_ready(sidecars: list[ProgressControlSidecar]) -> None:
    while not all(sidecar.is_ready() for sidecar in sidecars):
        time.sleep(0.05)


def _replica_run(bootstrap: str, replicas: int) -> int:
    topic = create_topic(bootstrap, unique_name("replicas"), REPLICA_PARTITIONS)
    with ExitStack() as stack:
        sidecars = [
            stack.enter_context(ProgressControlSidecar(_settings(bootstrap, topic)))
            for _ in range(replicas)
        ]
        _wait_ready(sidecars)  # every replica sees the idle period start
        _produce_one_each(bootstrap, topic, REPLICA_PARTITIONS)
        time.sleep(1.0 + 2.0 + 0.3 * 3 + 2.0)  # start + max jitter + schedule + margin
    return _count_ticks(bootstrap, topic, REPLICA_PARTITIONS)


def _rollout_run(bootstrap: str, partitions: int) -> tuple[int, int, float]:
    """(ticks of the first sidecar, ticks of its replacement, seconds to its first look)."""
    topic = create_topic(bootstrap, unique_name("rollout"), partitions)
    full = partitions * int(SCHEDULE["max.records"])
    with ProgressControlSidecar(_settings(bootstrap, topic)) as first:
        _wait_ready([first])
        _produce_one_each(bootstrap, topic, partitions)
        while _count_ticks(bootstrap, topic, partitions) < full:
            time.sleep(0.5)
    before = _count_ticks(bootstrap, topic, partitions)
    started = time.monotonic()
    with ProgressControlSidecar(_settings(bootstrap, topic)) as second:
        _wait_ready([second])
        first_look_s = time.monotonic() - started
        time.sleep(1.0 + 1.0 + 0.3 * 3 + 2.0)  # a whole schedule, had it restarted it
    return before, _count_ticks(bootstrap, topic, partitions) - before, first_look_s


def _resources(bootstrap: str, topic_prefix: str) -> tuple[float, float]:
    """(RSS MB at the end, CPU seconds used) of a sidecar process over MEASURE_S."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "PROGRESS_CONTROL_TOPICS_INCLUDE": f"{topic_prefix}.*",
        "PROGRESS_CONTROL_HTTP_PORT": "0",
        "PROGRESS_CONTROL_REPORT_LISTEN": "",
        "PROGRESS_CONTROL_LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "progress_control_apps.cli", "sidecar"],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(MEASURE_S)
        status = Path(f"/proc/{process.pid}/status").read_text()
        rss_kb = int(
            next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]
        )
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        process.terminate()
        process.wait(30)
    return rss_kb / 1024, cpu_s


def main() -> None:
    partitions = int(os.environ.get("BENCH_PARTITIONS", "10000"))
    settings = BrokerSettings(heap="2g", server_properties={"num.partitions": "1"})
    with EmbeddedKafkaBroker(settings) as broker:
        bootstrap = broker.bootstrap_servers
        one = _replica_run(bootstrap, 1)
        three = _replica_run(bootstrap, 3)
        print(f"ticks, 1 replica:  {one}   ({REPLICA_PARTITIONS} idle partitions, max.records 3)")
        print(f"ticks, 3 replicas: {three}")
        print(f"3 replicas / 1 replica: {three / one:.2f}  (goal <= 1.1)")

        rollout = int(os.environ.get("BENCH_ROLLOUT_PARTITIONS", "1000"))
        before, after, first_look_s = _rollout_run(bootstrap, rollout)
        print(f"rollout, {rollout} partitions: first sidecar {before} ticks (whole schedules)")
        print(f"rollout, its replacement: {after} ticks  (goal 0; restarting schedules: {before})")
        print(f"rollout, replacement's first look (resume from the broker): {first_look_s:.1f} s")

        create_topic(bootstrap, "small-watch", 10)
        per_topic = 1_000
        for index in range(max(1, partitions // per_topic)):
            create_topic(bootstrap, f"large-watch-{index}", min(per_topic, partitions))
        small_rss, small_cpu = _resources(bootstrap, "small-watch")
        large_rss, large_cpu = _resources(bootstrap, "large-watch-")
        for label, rss, cpu in (
            ("10 partitions", small_rss, small_cpu),
            (f"{partitions} partitions", large_rss, large_cpu),
        ):
            print(f"sidecar watching {label:>17}: RSS {rss:6.1f} MB, CPU {cpu:5.1f} s", end="")
            print(f" in {MEASURE_S:.0f} s")
        print("goal: RSS <= 150 MB with 10,000 partitions")
        print(f"RSS ratio large / small: {large_rss / small_rss:.2f}")


if __name__ == "__main__":
    main()

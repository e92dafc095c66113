"""Producer throughput on a real broker: plain confluent-kafka vs ``interceptor.Producer``.

Four variants, measured in the same run in interleaved (rotating) order, each repeated
``BENCH_REPEATS`` times (default 3, median taken):

(a) plain ``confluent_kafka.Producer``, no delivery callback;
(b) plain ``confluent_kafka.Producer`` with a trivial config-level ``on_delivery`` (a counter);
(c) ``interceptor.Producer`` with the same ``on_delivery`` and default progress-control settings;
(d) ``interceptor.Producer`` with no callback: against (a), what a producer that never asked for a
    callback pays.

The interceptor records acks natively (a librdkafka plugin) when it loads; set
``PROGRESS_CONTROL_ACK_RECORDING=python`` to measure the Python fallback. The path used is printed.

Each run sends ``BENCH_RECORDS`` (default 1,000,000) 100-byte records to a fresh 4-partition topic;
time runs from the first ``produce()`` until ``flush()`` returns. The connection and metadata are
set up before the clock starts. The goal is (c)/(b) >= 0.95: the interceptor's per-ack bookkeeping
costs at most 5% over an application that already has a delivery callback.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message
from confluent_kafka import Producer as KafkaProducer

from bench._kafka import create_topic, end_offsets, unique_name
from bench._timing import interleaved
from interceptor import Producer as InterceptorProducer
from progress_control_apps.dev.broker import EmbeddedKafkaBroker

PARTITIONS = 4
RECORD_SIZE = 100
POLL_EVERY = 1_000  # serve delivery reports as a typical produce loop does
FLUSH_TIMEOUT_S = 120.0

VARIANTS = {
    "a": "plain Producer, no callback",
    "b": "plain Producer + on_delivery",
    "c": "interceptor.Producer + on_delivery",
    "d": "interceptor.Producer, no callback",
}
_ack_recording: set[str] = set()  # the interceptor's path in (c) and (d), printed at the end
# CPU time of the whole process (all threads: librdkafka's too) per record, per variant: on a
# loaded machine wall-clock rates swing with the neighbours, CPU per record much less.
_cpu_us: dict[str, list[float]] = {name: [] for name in VARIANTS}


class DeliveryCounter:
    """The trivial application callback: counts reports (and errors, to verify the run)."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0

    def __call__(self, error: KafkaError | None, _msg: Message) -> None:
        self.count += 1
        if error is not None:
            self.errors += 1


def _producer_config(bootstrap_servers: str) -> dict[str, Any]:
    """Identical tuning for every variant."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "none",
        "acks": "all",
    }


def _run(variant: str, bootstrap_servers: str, records: int) -> float:
    """Send ``records`` records with one variant; return records per second."""
    topic = create_topic(bootstrap_servers, unique_name(f"bench-throughput-{variant}"), PARTITIONS)
    config = _producer_config(bootstrap_servers)
    counter: DeliveryCounter | None = None
    producer: KafkaProducer
    if variant == "a":
        producer = KafkaProducer(config)
    elif variant == "d":
        producer = InterceptorProducer(config)
    else:
        counter = DeliveryCounter()
        config["on_delivery"] = counter
        producer = (KafkaProducer if variant == "b" else InterceptorProducer)(config)
    if isinstance(producer, InterceptorProducer) and producer.progress_control is not None:
        _ack_recording.add(producer.progress_control.ack_recording)
    try:
        producer.list_topics(topic, timeout=30)  # connect and fetch metadata off the clock
        value = b"x" * RECORD_SIZE
        produce: Callable[..., None] = producer.produce
        poll = producer.poll
        started = time.perf_counter()
        cpu_started = time.process_time()
        for i in range(records):
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    poll(0.01)
            if i % POLL_EVERY == 0:
                poll(0)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        elapsed = time.perf_counter() - started
        _cpu_us[variant].append((time.process_time() - cpu_started) / records * 1e6)
    finally:
        producer.close()  # the interceptor's also stops its scheduler thread
    if remaining:
        raise RuntimeError(f"({variant}) {remaining} records still queued after flush")
    if counter is not None and (counter.count != records or counter.errors):
        raise RuntimeError(
            f"({variant}) on_delivery ran {counter.count} times for {records} records, "
            f"{counter.errors} errors"
        )
    on_broker = sum(end_offsets(bootstrap_servers, topic, PARTITIONS))
    if on_broker != records:
        raise RuntimeError(f"({variant}) {on_broker} records on the broker, expected {records}")
    return records / elapsed


def main() -> None:
    records = int(os.environ.get("BENCH_RECORDS", "1000000"))
    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    names = list(VARIANTS)
    with EmbeddedKafkaBroker() as broker:
        rates = interleaved(
            lambda name: _run(name, broker.bootstrap_servers, records), names, repeats
        )
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"{records:,} x {RECORD_SIZE}-byte records, {PARTITIONS} partitions, "
        f"median of {repeats} (interleaved); callback counts verified = {records:,}; "
        f"interceptor ack recording: {', '.join(sorted(_ack_recording))}"
    )
    for name in names:
        runs = [round(r) for r in rates[name]]
        print(f"({name}) {VARIANTS[name]:<36} {median[name]:>11,.0f} records/s  {runs}")
    cpu = {name: statistics.median(values) for name, values in _cpu_us.items()}
    print(
        "CPU per record, median (all threads): "
        + ", ".join(f"({name}) {cpu[name]:.3f} us" for name in names)
        + f"; (b)/(c) {cpu['b'] / cpu['c']:.3f}, (a)/(d) {cpu['a'] / cpu['d']:.3f}"
    )
    print(f"(c)/(b): {median['c'] / median['b']:.3f}  (goal >= 0.95)")
    print(f"(c)/(a): {median['c'] / median['a']:.3f}")
    print(f"(d)/(a): {median['d'] / median['a']:.3f}  (no callback: goal ~1)")
    # The same ratios per round (runs next to each other): steadier when the machine's load drifts.
    for top, bottom in (("c", "b"), ("d", "a")):
        paired = [t / b for t, b in zip(rates[top], rates[bottom], strict=True)]
        print(
            f"({top})/({bottom}) per round: median {statistics.median(paired):.3f}  "
            f"{[round(r, 3) for r in paired]}"
        )


if __name__ == "__main__":
    main()

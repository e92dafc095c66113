"""The producer and runtime apps, each run in a process of its own (``__main__``'s roles)."""

from __future__ import annotations

import json
import signal
import threading
import time

from progress_control_apps.tools.dashboard_picture.config import (
    BURST_AT,
    BURST_RECORDS,
    CLICK_PARTITIONS,
    PARTITION_PLAN,
    RANDOM,
    SESSION_GAP_MS,
    TIMEOUT_S,
    USERS,
)


def producer_app(bootstrap: str, topic: str, port: int, duration_s: float) -> None:
    """Clicks on the schedule of :data:`PARTITION_PLAN`, under ``progress-control run``."""
    from confluent_kafka import Producer
    from prometheus_client import REGISTRY, start_http_server

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    collector_of = getattr(producer, "progress_collector", None)
    collector = collector_of() if collector_of is not None else None
    if collector is None:
        raise SystemExit("the producer has no progress control: run it under progress-control run")
    REGISTRY.register(collector)
    start_http_server(port, addr="127.0.0.1")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    started = time.monotonic()
    owed = dict.fromkeys(range(CLICK_PARTITIONS), 0.0)
    burst_done = False
    tick_s = 0.1
    n = 0

    def click(partition: int) -> None:
        nonlocal n
        n += 1
        user = f"user-{RANDOM.randrange(USERS)}"
        value = json.dumps({"user": user, "page": f"/p/{n % 17}"}).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=user.encode(), partition=partition)
                return
            except BufferError:
                producer.poll(0.05)

    last = started
    while not stopping.is_set():
        now = time.monotonic()
        fraction, since_last, last = (now - started) / duration_s, now - last, now
        if fraction >= 1.0:
            break
        for partition, rate, spans in PARTITION_PLAN:
            if any(start <= fraction < end for start, end in spans):
                owed[partition] += rate * since_last
                while owed[partition] >= 1.0:
                    owed[partition] -= 1.0
                    click(partition)
        if not burst_done and fraction >= BURST_AT:
            burst_done = True
            for i in range(BURST_RECORDS):
                click(i % 2)
        producer.poll(tick_s)
    producer.flush(TIMEOUT_S)
    stopping.wait()  # keep /metrics (and the ticks) up until the run stops this process
    producer.close()


def runtime_app(
    bootstrap: str, source: str, sink: str, application_id: str, port: str, *, state_dir: str
) -> None:
    """Session-window click counts per user, suppressed until each session closes."""
    from progress_control.logging import configure_logging
    from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Json, String

    configure_logging("INFO", json=True)
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=SESSION_GAP_MS))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, count: (w.key, {"start": w.start, "end": w.end, "clicks": count}))
        .to(sink, key_serde=String(), value_serde=Json())
    )
    App(
        builder,
        application_id=application_id,
        bootstrap_servers=bootstrap,
        metrics_port=int(port),
        state_dir=state_dir,
    ).run()

"""Delay from a window's close (end + grace) to its suppressed final result, record cache on.

Two topologies, with the runtime's defaults (record cache 10 MiB, commit interval 30 s unless
``BENCH_COMMIT_INTERVAL_MS``) and event time = wall clock:

- ``plain``: ``clicks -> group_by_key -> 10 s tumbling count (grace 2 s) -> suppress -> out``;
- ``join``: ``clicks join users (stream-table) -> select_key(page) -> group_by_key`` (a
  repartition topic) ``-> the same count -> suppress -> out``.

Each runs twice, on fresh topics and a fresh app:

- ``ticks``: a few clicks in one window, then nothing: ``interceptor.Producer`` ticks the idle
  input (``progress.control.start.ms`` 500, backoff 500) and the ticks close the window;
- ``data``: a click every 250 ms for over 40 s, with no ticks, so the click at or after end +
  grace closes each window while clicks go on (the app never goes quiet).

For every window with clicks that came out, the delay is the wall-clock time it was read from
``out`` minus its end + grace. ``python -m bench.window_close_delay`` (``KAFKA_BOOTSTRAP_SERVERS``
for a running broker, else an embedded one).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import Producer as KafkaProducer

from bench._kafka import bootstrap_servers, create_topic, unique_name
from interceptor import Producer as InterceptorProducer
from progress_control.protocol import is_control_record
from streams_runtime import App, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Json, String

SIZE_MS, GRACE_MS = 10_000, 2_000
COMMIT_INTERVAL_MS = int(os.environ.get("BENCH_COMMIT_INTERVAL_MS", "0")) or None
CACHE_BYTES = 10 * 1024 * 1024
USERS = ("u1", "u2", "u3")
WAIT_S = 40.0  # for the last final result after the input stopped
DATA_CLICKS = 4 * SIZE_MS // 250 + 10  # four windows, each closed by a click 2 s into the next


def _topology(kind: str, topics: dict[str, str]) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    clicks = builder.stream(topics["clicks"])
    if kind == "join":
        users = builder.table(topics["users"])
        grouped = (
            clicks.join(users, lambda click, user: {**click, "tier": user["tier"]})
            .select_key(lambda _user, click: click["page"])
            .group_by_key()
        )
    else:
        grouped = clicks.group_by_key()
    (
        grouped.windowed_by(TimeWindows.of_size(SIZE_MS, grace=GRACE_MS))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "count": n}))
        .to(topics["out"])
    )
    return builder


def _read_finals(
    bootstrap: str, topic: str, stop: threading.Event, found: list[tuple[int, float]]
) -> None:
    """Append ``(window start, wall-clock ms read)`` for every final result until ``stop``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("bench-close-reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            message = consumer.poll(0.05)
            if message is None or message.error() is not None or is_control_record(message):
                continue
            found.append((json.loads(message.value() or b"{}")["start"], time.time() * 1000))
    finally:
        consumer.close()


def _sleep_until(wall_ms: float) -> None:
    time.sleep(max(0.0, wall_ms / 1000 - time.time()))


def _click(producer: KafkaProducer, topic: str, clicks: int) -> set[int]:
    """``clicks`` clicks 250 ms apart, from just after a window boundary; the windows clicked."""
    start = (time.time() * 1000 // SIZE_MS + 1) * SIZE_MS + 300
    _sleep_until(start)
    windows = set()
    for n in range(clicks):
        windows.add(int(time.time() * 1000 // SIZE_MS * SIZE_MS))
        producer.produce(topic, b'{"page": "home"}', USERS[n % len(USERS)].encode())
        producer.poll(0)
        _sleep_until(start + (n + 1) * 250)
    producer.flush(10)
    return windows


def _run(kind: str, mode: str, bootstrap: str, state_dir: Path) -> list[float]:
    """One app, one input mode; the close delays (s) of the windows with clicks."""
    topics = {
        role: create_topic(bootstrap, unique_name(f"bench-close-{role}"), 1)
        for role in ("clicks", "users", "out")
    }
    settings: dict[str, Any] = {"statestore_cache_max_bytes": CACHE_BYTES}
    if COMMIT_INTERVAL_MS is not None:
        settings["commit_interval_ms"] = COMMIT_INTERVAL_MS
    app_id = unique_name(f"bench-close-{kind}-{mode}")
    app = App(
        _topology(kind, topics),
        application_id=app_id,
        bootstrap_servers=bootstrap,
        state_dir=state_dir / app_id,
        **settings,
    )
    found: list[tuple[int, float]] = []
    stop = threading.Event()
    reader = threading.Thread(target=_read_finals, args=(bootstrap, topics["out"], stop, found))
    reader.start()
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 1}
    producer: KafkaProducer
    if mode == "ticks":
        producer = InterceptorProducer(
            {**config, "progress.control.start.ms": 500, "progress.control.backoff.ms": 500}
        )
    else:
        producer = KafkaProducer(config)

    windows: set[int] = set()
    try:
        app.start()
        if not app.wait_until("RUNNING", 60):
            raise RuntimeError(f"app did not start: {app.error!r}")
        for n, user in enumerate(USERS):
            producer.produce(topics["users"], json.dumps({"tier": n}).encode(), user.encode())
        producer.flush(10)
        windows = _click(producer, topics["clicks"], 6 if mode == "ticks" else DATA_CLICKS)
        if mode == "data":  # the last window has no click after its close
            windows.discard(max(windows))
        deadline = time.time() + WAIT_S
        while time.time() < deadline and not windows <= {start for start, _ in found}:
            if app.error is not None:
                raise RuntimeError(f"app failed: {app.error!r}")
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join()
        producer.flush(10)
        app.close()
    delays = []
    for window in sorted(windows):
        read = [at for start, at in found if start == window]
        delays.append((read[0] - (window + SIZE_MS + GRACE_MS)) / 1000 if read else float("inf"))
    return delays


def main() -> None:
    interval = f"{COMMIT_INTERVAL_MS} ms" if COMMIT_INTERVAL_MS else "30000 ms (default)"
    print(f"record cache {CACHE_BYTES} bytes, commit interval {interval}", flush=True)
    with bootstrap_servers() as bootstrap, tempfile.TemporaryDirectory() as state_dir:
        for kind in ("plain", "join"):
            for mode in ("ticks", "data"):
                delays = _run(kind, mode, bootstrap, Path(state_dir))
                shown = ", ".join("never" if d == float("inf") else f"{d:.2f} s" for d in delays)
                print(
                    f"  {kind:5} closed by {mode:5}: window end + grace -> final: {shown}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""Quix Streams 3.28 closes its windows on our ticks (progress_control/readers/quix.py), against
the real broker and the real Quix Streams, in its own virtualenv
(progress_control_apps/dev/quix.py).

Two runs of one app (tests/readers/quix_windows_app.py) over the same data, side by side:
- ticked: our ``Application``; the data is produced by our interceptor, which ticks the idle
  partitions (wall-clock ticks) once the data stops; nothing else arrives;
- closed by data: Quix's own ``Application``; after the same data, one late record per key at
  "now" closes every window the way Quix users do today.
Both must emit the same final windows; the ticked run's user functions (filter, apply, reducer,
initializer) fail the app if a tick reaches them; a forged far-future tick is skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from interceptor import Producer as TickingProducer
from progress_control.trust import ControlRecordSource
from progress_control_apps.dev.quix import quix_python
from tests.helpers import unique_name, wait_for
from tests.paths import ROOT

pytestmark = pytest.mark.broker

APP = Path(__file__).with_name("quix_windows_app.py")
TUMBLING_MS = 10_000
GAP_MS = 5_000
KEYS = {"a": 0, "b": 1, "c": 0}
"""Key -> partition (explicit, so both runs place every record alike)."""
OFFSETS_S = {"a": (1, 3, 12, 31), "b": (2, 9, 25), "c": (4, 30, 33, 47)}
"""Each key's records, seconds after the base time (sessions and tumbling windows of several
sizes; with a 5 s gap, a's 1 s and 3 s share a session, 12 s and 31 s do not)."""

Window = tuple[str, int, int, int]


def _records(base_ms: int) -> list[tuple[str, int, int, int]]:
    """(key, partition, timestamp, n) in timestamp order per partition."""
    rows = [
        (key, KEYS[key], base_ms + offset * 1000, index + 1)
        for key, offsets in OFFSETS_S.items()
        for index, offset in enumerate(offsets)
    ]
    return sorted(rows, key=lambda row: row[2])


def _produce(producer: Any, topic: str, rows: list[tuple[str, int, int, int]]) -> None:
    for key, partition, timestamp, n in rows:
        producer.produce(
            topic,
            json.dumps({"n": n}).encode(),
            key.encode(),
            partition=partition,
            timestamp=timestamp,
        )
    producer.flush(10)


def _windows(bootstrap: str, topic: str, partitions: int) -> list[Window]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("quix-out"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Window] = []
    try:
        while (msg := consumer.poll(0.5)) is not None:
            if msg.error() is None:
                value = json.loads(msg.value() or b"null")
                key = (msg.key() or b"").decode()
                found.append((key, value["start"], value["end"], value["value"]))
    finally:
        consumer.close()
    return sorted(found)


class QuixApp:
    """One run of the Quix app, in its own process."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path, stats: Path) -> None:
        self.process, self.log, self.stats = process, log, stats

    def stop(self) -> None:
        """SIGTERM, then wait for a clean exit (Quix commits and returns from ``run()``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the Quix app ignored SIGTERM:\n{self.log.read_text()[-3000:]}")
        assert code in (0, -signal.SIGTERM), f"the Quix app failed:\n{self.log.read_text()[-3000:]}"

    def assert_running(self) -> None:
        assert self.process.poll() is None, f"the Quix app died:\n{self.log.read_text()[-3000:]}"


@pytest.fixture
def quix_app(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., QuixApp]]:
    """Start the Quix app in its own virtualenv: ``start(name, **spec)``; every app is stopped
    at teardown."""
    python = quix_python()
    running: list[QuixApp] = []

    def start(name: str, **spec: Any) -> QuixApp:
        spec_path = tmp_path / f"{name}.json"
        stats = tmp_path / f"{name}-stats.json"
        spec_path.write_text(
            json.dumps(
                {
                    "bootstrap_servers": kafka_bootstrap,
                    "group": unique_name(f"quix-{name}"),
                    "state_dir": str(tmp_path / f"{name}-state"),
                    "stats": str(stats),
                    "tumbling_ms": TUMBLING_MS,
                    "gap_ms": GAP_MS,
                    **spec,
                }
            )
        )
        log = tmp_path / f"{name}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(python), str(APP), str(spec_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        running.append(QuixApp(process, log, stats))
        return running[-1]

    yield start
    for app in running:
        if app.process.poll() is None:
            app.process.send_signal(signal.SIGTERM)
    for app in running:
        app.stop()


def test_quix_windows_close_on_ticks_alone_as_they_do_on_data(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    quix_app: Callable[..., QuixApp],
    tmp_path: Path,
) -> None:
    topics = {
        run: {kind: create_topic(f"quix-{run}-{kind}", partitions=2) for kind in ("in", "t", "s")}
        for run in ("ticked", "data")
    }
    # Data a few minutes old, so a tick at wall-clock "now" is past every window; windows are
    # aligned to the epoch, so the base is too.
    base = (time.time_ns() // 1_000_000 - 300_000) // TUMBLING_MS * TUMBLING_MS
    rows = _records(base)

    # A forged tick half an hour ahead on partition 0 (past our 5 min skew, within the broker's
    # 1 h message.timestamp.after.max.ms): skipped, or it would close windows too early.
    ahead = time.time_ns() // 1_000_000 + 1_800_000
    forged = ControlRecordSource("forger").record(topics["ticked"]["in"], 0, ahead)
    plain = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    plain.produce(**forged.produce_kwargs())  # type: ignore[arg-type]
    plain.flush(10)

    ticking = TickingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "linger.ms": 0,
            "progress.control.start.ms": 300,
            "progress.control.backoff.ms": 300,
            "progress.control.max.records": 3,
            "progress.control.timestamp.mode": "wall-clock",
        }
    )
    try:
        _produce(ticking, topics["ticked"]["in"], rows)
        _run_both_and_compare(kafka_bootstrap, topics, rows, quix_app)
    finally:
        ticking.close()


def _run_both_and_compare(
    kafka_bootstrap: str,
    topics: dict[str, dict[str, str]],
    rows: list[tuple[str, int, int, int]],
    quix_app: Callable[..., QuixApp],
) -> None:
    plain = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    now = time.time_ns() // 1_000_000
    closers = [(key, partition, now, 0) for key, partition in KEYS.items()]
    _produce(plain, topics["data"]["in"], [*rows, *closers])

    ticked = quix_app(
        "ticked",
        helper=True,
        source=topics["ticked"]["in"],
        tumbling_sink=topics["ticked"]["t"],
        session_sink=topics["ticked"]["s"],
    )
    closed_by_data = quix_app(
        "data",
        helper=False,
        source=topics["data"]["in"],
        tumbling_sink=topics["data"]["t"],
        session_sink=topics["data"]["s"],
    )

    expected_tumbling = _expected_tumbling(rows)
    expected_sessions = _expected_sessions(rows)
    for run in ("data", "ticked"):
        tumbling = wait_for(
            lambda run=run: (
                (w := _windows(kafka_bootstrap, topics[run]["t"], 2))  # type: ignore[misc]
                and len(w) >= len(expected_tumbling)
                and w
            ),
            timeout_s=45,
            message=f"{run}: the tumbling windows",
        )
        sessions = wait_for(
            lambda run=run: (
                (w := _windows(kafka_bootstrap, topics[run]["s"], 2))  # type: ignore[misc]
                and len(w) >= len(expected_sessions)
                and w
            ),
            timeout_s=20,
            message=f"{run}: the sessions",
        )
        assert tumbling == expected_tumbling, run
        assert sessions == expected_sessions, run

    ticked.assert_running()  # no user function was handed a tick
    closed_by_data.assert_running()
    ticked.stop()
    counts = json.loads(ticked.stats.read_text())
    assert counts["ticks"] >= 2  # at least one per partition closed the windows above
    assert counts["rejected"] == {"future-timestamp": 1}


def _expected_tumbling(rows: list[tuple[str, int, int, int]]) -> list[Window]:
    sums: dict[tuple[str, int], int] = {}
    for key, _partition, timestamp, n in rows:
        start = timestamp // TUMBLING_MS * TUMBLING_MS
        sums[(key, start)] = sums.get((key, start), 0) + n
    return sorted((key, start, start + TUMBLING_MS, total) for (key, start), total in sums.items())


def _expected_sessions(rows: list[tuple[str, int, int, int]]) -> list[Window]:
    """Quix's sessions: ``[first, last + 1)``, joined while records are within one gap."""
    sessions: list[Window] = []
    for key in KEYS:
        times = sorted(timestamp for k, _p, timestamp, _n in rows if k == key)
        start = last = times[0]
        count = 1
        for timestamp in times[1:]:
            if timestamp - last <= GAP_MS:
                last, count = timestamp, count + 1
                continue
            sessions.append((key, start, last + 1, count))
            start = last = timestamp
            count = 1
        sessions.append((key, start, last + 1, count))
    return sorted(sessions)

"""Crash safety against the real broker: the app process is SIGKILLed mid-stream several times.
With exactly_once the output equals the ground truth; with at_least_once nothing is lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord
from tests.helpers import TopicReader, unique_name, wait_for
from tests.paths import APPS, ROOT

pytestmark = pytest.mark.broker

APP = APPS / "sessions_app.py"
GAP_MS = 1000
BASE = 1_700_000_000_000
PARTITIONS = 2
KEYS = [f"user-{i}" for i in range(12)]

Session = tuple[str, int, int, int]  # key, start, end, count


def generate_events(n: int, seed: int) -> list[tuple[str, int]]:
    """(key, timestamp) in timestamp order, one event every 20 ms; now and then a key goes quiet
    for longer than the gap, so every key has several sessions."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    quiet_until = dict.fromkeys(KEYS, 0)
    events = []
    now = BASE
    while len(events) < n:
        now += 20
        awake = [k for k in KEYS if quiet_until[k] <= now]
        if not awake:
            continue
        key = rng.choice(awake)
        events.append((key, now))
        if rng.random() < 0.03:
            quiet_until[key] = now + 3 * GAP_MS
    return events


def expected_sessions(events: list[tuple[str, int]]) -> Counter[Session]:
    by_key: dict[str, list[int]] = {}
    for key, ts in events:
        by_key.setdefault(key, []).append(ts)
    sessions: Counter[Session] = Counter()
    for key, stamps in by_key.items():
        start = prev = stamps[0]
        count = 1
        for ts in stamps[1:]:
            if ts - prev > GAP_MS:
                sessions[(key, start, prev, count)] += 1
                start, count = ts, 0
            prev = ts
            count += 1
        sessions[(key, start, prev, count)] += 1
    return sessions


class KilledRepeatedly:
    """Runs the app process, SIGKILLs it ``kills`` times at random points, then keeps it up."""

    def __init__(self, env: dict[str, str], args: list[str]) -> None:
        self._env, self._args = env, args
        self.log = open(os.environ.get("RESTART_TEST_LOG", os.devnull), "ab")  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(APP), *self._args],
            env=self._env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.kills += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def app_env(kafka_bootstrap: str, tmp_path: Path) -> Callable[[str, str], dict[str, str]]:
    def make(guarantee: str, engine: str) -> dict[str, str]:
        root = ROOT
        return {
            **os.environ,
            "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": unique_name("restart"),
            "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "PROGRESS_CONTROL_RUNTIME_PROCESSING_GUARANTEE": guarantee,
            "PROGRESS_CONTROL_RUNTIME_STATE_ENGINE": engine,
            "PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS": "100",
            "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(tmp_path / "state"),
            # A restarted process takes over its predecessor's membership at once.
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__GROUP_INSTANCE_ID": "restart-test-instance",
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        }

    return make


def produce_in_background(
    bootstrap: str, topic: str, events: list[tuple[str, int]], pause_s: float = 0.05
) -> threading.Thread:
    """Write ``events`` in bursts of 200 ``pause_s`` apart (so the app is killed mid-stream),
    then close every session with a control record far past the last event on each
    partition."""

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i, (key, ts) in enumerate(events):
            producer.produce(topic, key=key, value=i.to_bytes(8, "big"), timestamp=ts)
            if i % 200 == 199:
                producer.flush(10)
                time.sleep(pause_s)
        end = max(ts for _, ts in events) + 10 * GAP_MS
        for partition in range(PARTITIONS):
            tick = ControlRecord(topic, partition, end, ControlMarker("test", partition))
            producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        producer.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    return writer


def read_sessions(reader: TopicReader) -> Counter[Session]:
    found: Counter[Session] = Counter()
    for m in reader.read(max_s=3):
        if m.value() is not None:
            v = json.loads(m.value() or b"")
            found[((m.key() or b"").decode(), v["start"], v["end"], v["count"])] += 1
    return found


def wait_for_every_session(reader: TopicReader, expected: Counter[Session]) -> None:
    wait_for(
        lambda: set(read_sessions(reader)) >= set(expected),
        timeout_s=90,
        interval_s=0.5,
        message="every session in the output",
    )


@pytest.mark.parametrize(
    "mode",
    [
        "exactly_once/memory",
        "at_least_once/memory",
        "exactly_once/sqlite",
        "exactly_once/rocksdb/cached",  # the record cache on: its flushes are crash safe too
    ],
)
def test_sigkill_mid_stream(
    mode: str,
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
    app_env: Callable[[str, str], dict[str, str]],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    guarantee, engine, *cached = mode.split("/")
    source, sink = create_topic("events", partitions=PARTITIONS), create_topic("sessions")
    events = generate_events(6000, seed=7)
    expected = expected_sessions(events)
    env = app_env(guarantee, engine)
    if cached:
        env["PROGRESS_CONTROL_RUNTIME_STATESTORE_CACHE_MAX_BYTES"] = str(10 * 1024 * 1024)
    runner = KilledRepeatedly(env, [source, sink, str(GAP_MS)])
    runner.start()
    writer = produce_in_background(kafka_bootstrap, source, events)
    rng = random.Random(11)  # noqa: S311 - reproducible kill times
    reader = reader_for(sink, 1)
    try:
        for _ in range(4):
            time.sleep(rng.uniform(1.0, 2.5))
            runner.kill()
            runner.start()
        writer.join(60)
        wait_for_every_session(reader, expected)
    finally:
        runner.stop()
    found = read_sessions(reader)
    assert runner.kills == 4
    if guarantee == "exactly_once":
        assert found == expected  # no loss, no duplicates
    else:
        assert set(found) == set(expected)  # no loss; duplicates allowed


def test_a_fenced_producer_rejoins_and_loses_nothing(
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
    app_env: Callable[[str, str], dict[str, str]],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    """Exactly-once, the instance's transactional id taken over three times mid-stream (what a
    pause past ``transaction.timeout.ms`` does too): each time the instance closes its tasks
    without a commit, starts a new producer and rejoins; it never stops, and every session comes
    out exactly once."""
    source, sink = create_topic("events", partitions=PARTITIONS), create_topic("sessions")
    events = generate_events(6000, seed=5)
    expected = expected_sessions(events)
    env = app_env("exactly_once", "memory")
    log = tmp_path / "app.log"
    process = subprocess.Popen(
        [sys.executable, str(APP), source, sink, str(GAP_MS)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    reader = reader_for(sink, 1)
    try:
        id_file = Path(env["PROGRESS_CONTROL_RUNTIME_STATE_DIR"]) / (
            env["PROGRESS_CONTROL_RUNTIME_APPLICATION_ID"] + "/instance.id"
        )
        wait_for(id_file.exists, timeout_s=30, message="the instance's id")
        transactional_id = f"{env['PROGRESS_CONTROL_RUNTIME_APPLICATION_ID']}-"
        transactional_id += id_file.read_text().strip()
        # Once the app runs: taken over before its producer's own init_transactions, the id
        # would simply be taken back (an app slow to start under CI's load did so).
        wait_for(lambda: ": RUNNING" in log.read_text(), timeout_s=60, message="RUNNING")
        # About 7.5 s of input: every takeover lands mid-stream, however fast the app is (an
        # app with nothing to commit finds out it was fenced only at its next commit).
        writer = produce_in_background(kafka_bootstrap, source, events, pause_s=0.25)
        for _ in range(3):
            time.sleep(1.5)
            usurper = Producer(
                {"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id}
            )
            usurper.init_transactions(30)
            usurper.close()
        writer.join(60)
        wait_for_every_session(reader, expected)
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        process.terminate()
        process.wait(30)
    assert read_sessions(reader) == expected
    assert "rejoining the group" in log.read_text()

"""Operations against the real broker, with app processes (``harness/ops_app.py``) signalled
as an orchestrator would: SIGTERM in every phase (running, rebalancing, restoring, mid-transaction
under exactly_once) exits within a bound with code 0 and no uncaught exception in any thread;
``/health/ready`` is false while an active task restores and true after, ``/health/live`` true
while the loop turns."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams_runtime.state import changelog_topic
from tests.helpers import TopicReader, unique_name, wait_for
from tests.paths import APPS, ROOT

pytestmark = pytest.mark.broker

APP = APPS / "ops_app.py"
PARTITIONS = 4
STORE = "table"
STOP_BOUND_S = 30.0
"""How long a SIGTERMed instance may take to commit, leave the group and exit."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(port: int, which: str) -> tuple[int, dict[str, object]] | None:
    """``(status, body)`` of ``/health/{which}`` on the metrics port; None while not serving."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/health/{which}", timeout=5
        ) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return None


class OpsApp:
    """One app process: its stderr in a file, its metrics port (and probes) known up front."""

    def __init__(self, env: dict[str, str], args: list[str], log: Path) -> None:
        self.port = free_port()
        self.log_path = log
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(APP), *args],
            env={**env, "PROGRESS_CONTROL_RUNTIME_METRICS_PORT": str(self.port)},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def probe(self, which: str) -> tuple[int, dict[str, object]] | None:
        return probe(self.port, which)

    def state(self) -> str | None:
        answer = self.probe("ready")
        return None if answer is None else str(answer[1]["state"])

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        wait_for(
            lambda: self.check_alive() and (self.probe("ready") or (0, {}))[0] == 200,
            timeout_s=timeout_s,
            message=f"{self.log_path.name} ready",
        )

    def check_alive(self) -> bool:
        code = self.process.poll()
        if code is not None:
            raise AssertionError(
                f"{self.log_path.name} exited with {code}: {self.stderr()[-2000:]}"
            )
        return True

    def terminate_and_wait(self) -> tuple[int, float]:
        """SIGTERM; the exit code and the seconds it took (killed, and -1, past the bound)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)  # stack dump into the log
            time.sleep(1)
            self.process.kill()
            self.process.wait(10)
            code = -1
        self._log.close()
        return code, time.monotonic() - started

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def assert_clean_exit(app: OpsApp, code: int, took_s: float) -> None:
    log = app.stderr()
    assert code == 0, f"exit code {code} after {took_s:.1f}s: {log[-3000:]}"
    assert took_s < STOP_BOUND_S
    assert "Traceback" not in log, log[-3000:]
    assert "Exception in thread" not in log, log[-3000:]
    assert "PENDING_SHUTDOWN" in log
    assert "NOT_RUNNING" in log


@pytest.fixture
def topics(kafka_bootstrap: str, create_topic: Callable[..., str]) -> tuple[str, str, str]:
    """(application id, input, output)."""
    return (
        unique_name("ops"),
        create_topic("ops-in", partitions=PARTITIONS),
        create_topic("ops-out", partitions=PARTITIONS),
    )


@pytest.fixture
def launch(
    kafka_bootstrap: str, topics: tuple[str, str, str], tmp_path: Path
) -> Iterator[Callable[..., OpsApp]]:
    application_id, source, sink = topics
    started: list[OpsApp] = []

    def start(slot: int = 0, guarantee: str = "at_least_once", **settings: str) -> OpsApp:
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": application_id,
            "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "PROGRESS_CONTROL_RUNTIME_PROCESSING_GUARANTEE": guarantee,
            "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(tmp_path / f"state-{slot}"),
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__SESSION_TIMEOUT_MS": "6000",
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__HEARTBEAT_INTERVAL_MS": "500",
            **{f"PROGRESS_CONTROL_RUNTIME_{k.upper()}": v for k, v in settings.items()},
        }
        log = tmp_path / f"app-{slot}-{len(started)}.log"
        started.append(OpsApp(env, [source, sink, STORE], log))
        return started[-1]

    yield start
    for app in started:
        app.kill()


def produce(bootstrap: str, topic: str, count: int, *, prefix: str = "k") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(topic, key=f"{prefix}{i}", value=f"v{i}", partition=i % PARTITIONS)
        if i % 10_000 == 9_999:
            producer.flush(30)
    assert producer.flush(30) == 0


def big_changelog(bootstrap: str, application_id: str, records: int) -> None:
    """The store's changelog, created as the runtime would and filled before the first start:
    the app's tasks restore ``records`` records (no source header: restore applies them)."""
    topic = changelog_topic(application_id, STORE)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(30)
    produce(bootstrap, topic, records, prefix="restored-")


def test_sigterm_while_running(
    kafka_bootstrap: str, topics: tuple[str, str, str], launch: Callable[..., OpsApp]
) -> None:
    app = launch()
    app.wait_ready()
    produce(kafka_bootstrap, topics[1], 2000)
    time.sleep(1)
    live = app.probe("live")
    assert live is not None
    assert live[0] == 200
    assert live[1]["state"] == "RUNNING"
    assert_clean_exit(app, *app.terminate_and_wait())


def test_sigterm_while_the_group_rebalances(
    kafka_bootstrap: str, topics: tuple[str, str, str], launch: Callable[..., OpsApp]
) -> None:
    """The reported case: a member joins, and the first one is stopped right when its group
    rebalances (its rebalance callbacks then run inside ``close()``)."""
    first = launch(0)
    first.wait_ready()
    produce(kafka_bootstrap, topics[1], 2000)
    second = launch(1)
    # The log, not the probe: with restoration beside the poll loop a rebalance can be over
    # between two probes. The second REBALANCING line is this rebalance's.
    wait_for(
        lambda: first.check_alive() and first.stderr().count(": REBALANCING") >= 2,
        timeout_s=60,
        interval_s=0.005,
        message="the first instance rebalancing",
    )
    assert_clean_exit(first, *first.terminate_and_wait())
    second.wait_ready()
    assert_clean_exit(second, *second.terminate_and_wait())


def test_sigterm_during_restore(
    kafka_bootstrap: str, topics: tuple[str, str, str], launch: Callable[..., OpsApp]
) -> None:
    big_changelog(kafka_bootstrap, topics[0], 200_000)
    app = launch()
    wait_for(
        lambda: app.check_alive() and (app.probe("ready") or (0, {}))[1].get("restoring_tasks"),
        timeout_s=60,
        interval_s=0.02,
        message="a task restoring",
    )
    assert_clean_exit(app, *app.terminate_and_wait())


def test_ready_only_once_every_active_task_is_restored(
    kafka_bootstrap: str, topics: tuple[str, str, str], launch: Callable[..., OpsApp]
) -> None:
    big_changelog(kafka_bootstrap, topics[0], 200_000)
    app = launch()
    seen: list[tuple[int, dict[str, object], int]] = []

    def restored() -> bool:
        app.check_alive()
        ready, live = app.probe("ready"), app.probe("live")
        if ready is None or live is None:
            return False
        seen.append((ready[0], ready[1], live[0]))
        return ready[0] == 200

    wait_for(restored, timeout_s=120, interval_s=0.05, message="ready")
    restoring = [s for s in seen if s[1]["restoring_tasks"]]
    assert restoring, f"never saw a task restoring: {seen[:5]}"
    # Not ready while restoring (REBALANCING, as Kafka Streams says), live all along.
    assert all(status == 503 and body["state"] == "REBALANCING" for status, body, _ in restoring)
    assert all(live == 200 for _, _, live in seen)
    body = seen[-1][1]
    assert body == {"status": "ok", "state": "RUNNING", "active_tasks": 4, "restoring_tasks": 0}
    assert_clean_exit(app, *app.terminate_and_wait())


def test_sigterm_mid_transaction_under_exactly_once(
    kafka_bootstrap: str, topics: tuple[str, str, str], launch: Callable[..., OpsApp]
) -> None:
    # A long commit interval: SIGTERM lands while a transaction holds uncommitted output.
    app = launch(guarantee="exactly_once", commit_interval_ms="10000")
    app.wait_ready()
    writer = threading.Thread(target=produce, args=(kafka_bootstrap, topics[1], 20_000))
    writer.start()
    time.sleep(2)
    code, took_s = app.terminate_and_wait()
    writer.join()
    assert_clean_exit(app, code, took_s)


RESTORED_RECORDS = 200_000
"""The changelog partition one task restores, in batches of ``RESTORE_BATCH`` records that the
instances fetch one per ``fetch.wait.max.ms`` (10 ms): about 50 s, long enough for a second
instance to start and join however fast the machine applies them (12 s was not, with four
test workers on two cores, nor once 30 s with three)."""
RESTORE_BATCH = 40


def test_a_restore_runs_beside_the_poll_loop(
    kafka_bootstrap: str,
    topics: tuple[str, str, str],
    launch: Callable[..., OpsApp],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    """While task 0_0 restores a big changelog partition, the instance processes its other
    tasks, and a second instance joins the group and gets to work: the rebalance does not wait
    for the restore."""
    application_id, source, sink = topics
    changelog = changelog_topic(application_id, STORE)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    new = NewTopic(changelog, PARTITIONS, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(30)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 50, "batch.num.messages": RESTORE_BATCH}
    )
    for i in range(RESTORED_RECORDS):
        producer.produce(changelog, key=f"r{i}", value=b"v", partition=0)
        if i % 100_000 == 99_999:
            producer.flush(60)
    assert producer.flush(60) == 0
    # A fetch returns one producer batch, after the broker waited for more bytes than it may
    # return: the restore is paced by the clock, not by the CPU.
    throttled = {
        "consumer__max_partition_fetch_bytes": "1024",
        "consumer__fetch_min_bytes": "1048576",
    }
    first = launch(0, state_engine="sqlite", **throttled)
    wait_for(
        lambda: first.check_alive() and (first.probe("ready") or (0, {}))[1].get("active_tasks"),
        timeout_s=60,
        interval_s=0.02,
        message="the other tasks active",
    )
    # The other partitions are processed while 0_0 restores.
    producer.produce(source, key="a", value="1", partition=1)
    producer.flush(10)
    reader = reader_for(sink, PARTITIONS)
    wait_for(
        lambda: any(m.key() == b"a" for m in reader.read()),
        timeout_s=30,
        message="output of another task during the restore",
    )
    ready = first.probe("ready")
    assert ready is not None
    assert ready[1]["restoring_tasks"] == 1, ready
    # A second instance joins: the group rebalances at once (0_0 may move with it and start
    # over there), and the newcomer runs tasks while 0_0 still restores.
    second = launch(1, **throttled)

    def tasks(app: OpsApp, kind: str) -> int:
        answer = app.probe("ready")
        return 0 if answer is None else int(str(answer[1].get(kind, 0)))

    wait_for(
        lambda: first.check_alive() and second.check_alive() and tasks(second, "active_tasks"),
        timeout_s=60,
        message="the second instance running tasks",
    )
    # At least 0_0 still restores, on either instance. Both may report a restore for a moment:
    # the newcomer's new tasks restore their (empty) changelog partitions too.
    restoring = tasks(first, "restoring_tasks") + tasks(second, "restoring_tasks")
    assert restoring >= 1, "the restore ended before the rebalance: make it longer"
    first.wait_ready(timeout_s=300)
    second.wait_ready(timeout_s=300)
    for app in (first, second):
        log = app.stderr()
        restored = [line for line in log.splitlines() if "task 0_0 restored" in line]
        print(f"\n{app.log_path.name}: {log.count('assigned ')} assignments, 0_0 {restored}")
    for app in (first, second):
        assert_clean_exit(app, *app.terminate_and_wait())

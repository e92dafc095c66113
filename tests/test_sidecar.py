"""The sidecar against a real broker: broker watch, reports, replicas, HTTP, signals, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as PlainProducer

from progress_control.broker import BrokerSettings, EmbeddedKafkaBroker
from progress_control.protocol import parse_control_headers
from progress_control.settings import ConfigurationError
from sidecar.service import ProgressControlSidecar
from sidecar.settings import SidecarSettings
from tests.helpers import TopicReader, ticks_by_partition, wait_for
from tests.test_interceptor_e2e import APP, CLI

FAST = {
    "start.ms": 600,
    "backoff.ms": 200,
    "backoff.exponential": False,
    "max.records": 3,
    "watch.interval.ms": 200,
    "jitter.ms": 0,
    "http.port": 0,
    "report.listen": "127.0.0.1:0",
}


def sidecar_settings(bootstrap: str, **overrides: Any) -> SidecarSettings:
    values = {**FAST, **overrides}
    return SidecarSettings.from_config(
        {"progress.control.kafka": {"bootstrap.servers": bootstrap}}
        | {f"progress.control.{key}": value for key, value in values.items()}
    )


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def keep_writing(bootstrap: str, topic: str, partitions: tuple[int, ...]) -> Callable[[], None]:
    """A plain (uninstrumented) producer writing to ``partitions`` until the returned stop()."""
    producer = PlainProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for partition in partitions:
                producer.produce(topic, b"busy", b"k", partition=partition)
            producer.poll(0)
            stop.wait(0.05)
        producer.flush(10)

    thread = threading.Thread(target=run)
    thread.start()

    def stop_writing() -> None:
        stop.set()
        thread.join()

    return stop_writing


def test_broker_watch_ticks_exactly_the_idle_partitions(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("watch", partitions=4)
    reader = reader_for(topic, 4)
    stop_writing = keep_writing(kafka_bootstrap, topic, (0, 1))
    try:
        settings = sidecar_settings(  # start.ms well above any stall of the busy writer
            kafka_bootstrap, **{"topics.include": topic, "source.id": "watcher", "start.ms": 1500}
        )
        with ProgressControlSidecar(settings) as sidecar:
            # Data after the sidecar's first look: a new idle period, seen as it starts.
            wait_for(sidecar.is_ready, message="the sidecar's first look at the broker")
            first = PlainProducer({"bootstrap.servers": kafka_bootstrap})
            for partition in (2, 3):
                first.produce(topic, b"first", b"k", partition=partition)
            first.flush(10)
            wait_for(
                lambda: ticks_by_partition(reader.ticks()) == {2: 3, 3: 3},
                timeout_s=30,
                message="three ticks on each idle partition",
            )
            reader.read(quiet_s=1.0)
            assert ticks_by_partition(reader.ticks()) == {2: 3, 3: 3}
            assert sidecar.is_ready()
    finally:
        stop_writing()
    markers = [parse_control_headers(t.headers()) for t in reader.ticks()]
    assert {m.source_id for m in markers if m} == {"watcher"}


def test_report_mode_app_gets_ticks_from_the_sidecar_only(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("reported", partitions=2)
    reader = reader_for(topic, 2)
    settings = sidecar_settings(
        kafka_bootstrap, **{"watch.enabled": False, "source.id": "sidecar-1"}
    )
    with ProgressControlSidecar(settings) as sidecar:
        host, port = sidecar.report_address or ("", 0)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
        env |= {
            "PROGRESS_CONTROL_MODE": "report",
            "PROGRESS_CONTROL_REPORT_ADDRESS": f"{host}:{port}",
            "PROGRESS_CONTROL_REPORT_INTERVAL_MS": "100",
            "PROGRESS_CONTROL_START_MS": "300",
            "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")]),
        }
        app = [*CLI, "run", "--", sys.executable, str(APP), kafka_bootstrap, topic]
        result = subprocess.run(
            [*app, "--partitions", "0,1", "--records", "10", "--linger-s", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["ticks_sent"] == 0  # the app never ticks
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 3, 1: 3},
            timeout_s=30,
            message="the sidecar's ticks",
        )
    markers = [parse_control_headers(t.headers()) for t in reader.ticks()]
    assert {m.source_id for m in markers if m} == {"sidecar-1"}


def test_three_replicas_send_about_as_many_ticks_as_one(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    def run(replicas: int) -> int:
        topic = create_topic("replicas", partitions=4)
        reader = reader_for(topic, 4)
        with ExitStack() as stack:
            sidecars = []
            for replica in range(replicas):
                # Replicas draw a random jitter; here they are spread deterministically (300 ms
                # apart) so the test does not depend on the draw.
                settings = sidecar_settings(
                    kafka_bootstrap,
                    **{"topics.include": topic, "start.ms": 600 + 300 * replica},
                )
                sidecars.append(stack.enter_context(ProgressControlSidecar(settings)))
            # The data comes once every replica has looked: all see its idle period start.
            wait_for(lambda: all(s.is_ready() for s in sidecars), message="replicas ready")
            producer = PlainProducer({"bootstrap.servers": kafka_bootstrap})
            for partition in range(4):
                producer.produce(topic, b"v", b"k", partition=partition)
            producer.flush(10)
            wait_for(lambda: len(reader.ticks()) >= 12, timeout_s=30, message="ticks")
            reader.read(quiet_s=2.0)  # every replica's schedule is over by now
        return len(reader.ticks())

    one, three = run(1), run(3)
    assert one == 12
    assert three <= 1.1 * one


def test_http_endpoints_readiness_and_sigterm(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port with no broker behind it yet
        sock.bind(("127.0.0.1", 0))
        broker_port = int(sock.getsockname()[1])
    dead = f"127.0.0.1:{broker_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": dead,
        "PROGRESS_CONTROL_HTTP_PORT": "0",
        "PROGRESS_CONTROL_REPORT_LISTEN": "127.0.0.1:0",
        "PROGRESS_CONTROL_LOG_FORMAT": "json",
    }
    process = subprocess.Popen(
        [*CLI, "sidecar"], stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stderr is not None
        port = 0
        while not port:
            line = process.stderr.readline()
            assert line, "sidecar exited before serving HTTP"
            if "http on port" in line:
                port = int(line.rsplit(" ", 1)[1])
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/readyz") == (503, "not ready\n")  # broker unreachable: not ready
        status, metrics = get(port, "/metrics")
        assert status == 200
        assert "progress_control_ready 0.0" in metrics
        assert "progress_control_ticks_sent_total" in metrics
        assert process.poll() is None  # retrying, not crash-looping
        # The broker comes up on that port: the sidecar connects and becomes ready.
        with EmbeddedKafkaBroker(BrokerSettings(port=broker_port)) as broker:
            assert broker.bootstrap_servers == dead
            wait_for(
                lambda: get(port, "/readyz") == (200, "ready\n"), timeout_s=60, message="ready"
            )
            assert "progress_control_ready 1.0" in get(port, "/metrics")[1]
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_readyz_once_connected_and_malformed_reports_counted(kafka_bootstrap: str) -> None:
    settings = sidecar_settings(kafka_bootstrap)
    with ProgressControlSidecar(settings) as sidecar:
        port = sidecar.http.port
        wait_for(lambda: get(port, "/readyz") == (200, "ready\n"), message="ready")
        host, report_port = sidecar.report_address or ("", 0)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for garbage in (b"not json", b'{"v": 1}', b"[" * 5000):
                sender.sendto(garbage, (host, report_port))
        wait_for(
            lambda: "progress_control_reports_malformed_total 3.0" in get(port, "/metrics")[1],
            message="three malformed reports counted",
        )
        assert sidecar.is_healthy()


def test_invalid_env_config_names_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": "x:1",
        "PROGRESS_CONTROL_WATCH_INTERVAL_MS": "often",
    }
    result = subprocess.run(
        [*CLI, "sidecar"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 2
    assert "PROGRESS_CONTROL_WATCH_INTERVAL_MS" in result.stderr
    with pytest.raises(ConfigurationError, match="PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS"):
        SidecarSettings.from_config({})

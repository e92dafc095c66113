"""The run's topics and processes: the sidecar, the apps, the batch writer and the stall."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from progress_control_apps.dev.ports import free_port
from progress_control_apps.tools.dashboard_picture.config import (
    BURST_AT,
    CLICK_PARTITIONS,
    NAMESPACE,
    ORDER_BATCH_RECORDS,
    ORDER_BATCHES_AT,
    ORDER_PARTITIONS,
    PRODUCER_POD,
    PRODUCER_SOURCE,
    RANDOM,
    RUNTIME_POD,
    SIDECAR_POD,
    SIDECAR_SOURCE,
    STALL_S,
    TIMEOUT_S,
)
from progress_control_apps.tools.dashboard_picture.prometheus import Processes, wait_for_log


@dataclass
class Topics:
    clicks: str
    orders: str
    sessions: str
    application_id: str

    @classmethod
    def fresh(cls) -> Topics:
        run = uuid.uuid4().hex[:8]
        return cls(f"clicks-{run}", f"orders-{run}", f"click-sessions-{run}", f"sessions-{run}")


def create_topics(bootstrap: str, topics: Topics) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topics.clicks, num_partitions=CLICK_PARTITIONS, replication_factor=1),
            NewTopic(topics.orders, num_partitions=ORDER_PARTITIONS, replication_factor=1),
            NewTopic(topics.sessions, num_partitions=CLICK_PARTITIONS, replication_factor=1),
        ],
        operation_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def delete_topics(bootstrap: str, topics: Topics) -> None:
    """The run's topics, the runtime's internal ones and its consumer group."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ours = (topics.clicks, topics.orders, topics.sessions)
    names = [
        name
        for name in admin.list_topics(timeout=TIMEOUT_S).topics
        if name in ours or name.startswith(f"{topics.application_id}-")
    ]
    futures = {
        **(admin.delete_topics(names, operation_timeout=TIMEOUT_S) if names else {}),
        **admin.delete_consumer_groups([topics.application_id], request_timeout=TIMEOUT_S),
    }
    for future in futures.values():
        with contextlib.suppress(Exception):  # best effort: a leftover is only disk
            future.result(timeout=TIMEOUT_S)


def _role_command(role: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "progress_control_apps.tools.dashboard_picture", role, *args]


def _progress_control_cli() -> str:
    beside = Path(sys.executable).with_name("progress-control")
    return str(beside) if beside.exists() else "progress-control"


@dataclass
class Pipeline:
    bootstrap: str
    duration_s: float
    workdir: Path
    topics: Topics = field(default_factory=Topics.fresh)
    sidecar_port: int = 0
    producer_port: int = 0
    runtime_port: int = 0

    def start_sidecar(self, processes: Processes) -> None:
        log = self.workdir / "sidecar.log"
        env = {
            "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "PROGRESS_CONTROL_TOPICS_INCLUDE": f"{self.topics.clicks},{self.topics.orders}",
            "PROGRESS_CONTROL_SOURCE_ID": SIDECAR_SOURCE,
            "PROGRESS_CONTROL_HTTP_PORT": "0",
            "PROGRESS_CONTROL_REPORT_LISTEN": "",
            "PROGRESS_CONTROL_LOG_FORMAT": "json",
        }
        process = processes.start("sidecar", [_progress_control_cli(), "sidecar"], log, env)
        port = wait_for_log(log, re.compile(r"serving HTTP on port (\d+)"), process)
        self.sidecar_port = int(port)

    def choose_ports(self) -> None:
        """Ports for the apps' /metrics, chosen before Prometheus' config is written."""
        self.runtime_port = free_port("127.0.0.1", 0, quiet=True)
        self.producer_port = free_port("127.0.0.1", 0, quiet=True, avoid={self.runtime_port})

    def start_apps(self, processes: Processes) -> subprocess.Popen[bytes]:
        """The runtime (returned) and the producer under the interceptor."""
        runtime = processes.start(
            "runtime",
            _role_command(
                "_runtime",
                self.bootstrap,
                self.topics.clicks,
                self.topics.sessions,
                self.topics.application_id,
                str(self.runtime_port),
                str(self.workdir / "state"),
            ),
            self.workdir / "runtime.log",
        )
        env = {
            "PROGRESS_CONTROL_TOPICS_INCLUDE": self.topics.clicks,
            "PROGRESS_CONTROL_SOURCE_ID": PRODUCER_SOURCE,
        }
        command = [
            _progress_control_cli(),
            "run",
            "--",
            *_role_command(
                "_producer",
                self.bootstrap,
                self.topics.clicks,
                str(self.producer_port),
                str(self.duration_s),
            ),
        ]
        processes.start("producer", command, self.workdir / "producer.log", env)
        return runtime

    def targets(self) -> dict[str, tuple[int, dict[str, str]]]:
        """Jobs to scrape, labelled as a ServiceMonitor's targets are (before runtime ports)."""

        def labels(pod: str, container: str) -> dict[str, str]:
            return {"namespace": NAMESPACE, "pod": pod, "container": container}

        return {
            "progress-control-sidecar": (
                self.sidecar_port,
                labels(SIDECAR_POD, "progress-control"),
            ),
            "clicks-producer": (self.producer_port, labels(PRODUCER_POD, "app")),
            "click-sessions": (self.runtime_port, labels(RUNTIME_POD, "streams-runtime")),
        }

    def stall(
        self, runtime: subprocess.Popen[bytes], stop: threading.Event, started: float
    ) -> None:
        """:data:`STALL_S` around the burst: SIGSTOP the runtime, then SIGCONT it."""
        pause, resume = (started + BURST_AT * self.duration_s + at for at in STALL_S)
        if stop.wait(max(0.0, pause - time.monotonic())) or runtime.poll() is not None:
            return
        runtime.send_signal(signal.SIGSTOP)
        try:
            stop.wait(max(0.0, resume - time.monotonic()))
        finally:
            runtime.send_signal(signal.SIGCONT)

    def write_orders(self, stop: threading.Event, started: float) -> None:
        """The batch job: plain confluent-kafka (no interceptor), twice; only the sidecar ticks
        its partitions once it is gone."""
        from confluent_kafka import Producer

        for at in ORDER_BATCHES_AT:
            if stop.wait(max(0.0, started + at * self.duration_s - time.monotonic())):
                return
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
            for i in range(ORDER_BATCH_RECORDS):
                producer.produce(
                    self.topics.orders,
                    value=json.dumps({"order": i, "amount": RANDOM.randint(1, 500)}).encode(),
                    key=f"customer-{RANDOM.randrange(100)}".encode(),
                    partition=i % ORDER_PARTITIONS,
                )
                producer.poll(0)
            producer.flush(TIMEOUT_S)

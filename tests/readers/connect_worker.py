"""A Kafka Connect standalone worker for the reader tests (``connect-runtime``, ``connect-file``,
``connect-transforms`` from Maven Central, cached like the broker's jars), in its own process on
the real broker, with its REST API on a free loopback port.

Plugins beyond the worker's own (e.g. Apicurio's converters) go in through ``plugin.path``, as in
a deployment: each jar directory becomes a plugin of its own, loaded in isolation.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from progress_control_apps.dev.jars import classpath, fetch_jars, find_java, kafka_connect_jars
from progress_control_apps.dev.ports import free_port
from tests.helpers import wait_for
from tests.jvms import TEST_JVM_OPTIONS

__all__ = ["STRING_CONVERTERS", "ConnectWorker", "committed_offsets", "end_offsets", "file_sink"]

STRING_CONVERTERS = {
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
}
"""The worker's default converters unless a test gives others (a connector may override them)."""


def _properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


class ConnectWorker:
    """A Connect standalone worker in its own process (one per test)."""

    def __init__(self, bootstrap: str, directory: Path) -> None:
        self.bootstrap = bootstrap
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "connect.log"
        self.rest_url = ""

    def start(
        self,
        *connectors: dict[str, str],
        converters: dict[str, str] | None = None,
        plugins: dict[str, Path] | None = None,
    ) -> None:
        """Run the worker with these connectors (their properties, as dicts), the worker-wide
        ``converters`` (default :data:`STRING_CONVERTERS`) and ``plugins`` (name: a directory of
        jars), each linked into the worker's ``plugin.path``."""
        jars = fetch_jars(kafka_connect_jars())
        port = free_port("127.0.0.1", 0, quiet=True)
        self.rest_url = f"http://127.0.0.1:{port}"
        settings = {
            "bootstrap.servers": self.bootstrap,
            **(STRING_CONVERTERS if converters is None else converters),
            "offset.storage.file.filename": str(self.directory / "connect.offsets"),
            "offset.flush.interval.ms": "300",
            "listeners": self.rest_url,
        }
        if plugins:
            plugin_path = self.directory / "plugins"
            plugin_path.mkdir()
            for name, jar_dir in plugins.items():
                (plugin_path / name).symlink_to(jar_dir, target_is_directory=True)
            settings["plugin.path"] = str(plugin_path)
        worker = _properties(self.directory / "worker.properties", settings)
        configs = [
            str(_properties(self.directory / f"{c['name']}.properties", c)) for c in connectors
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    *(str(find_java()), *TEST_JVM_OPTIONS, "-cp", classpath(jars)),
                    *("org.apache.kafka.connect.cli.ConnectStandalone", str(worker), *configs),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def add(self, connector: dict[str, str], timeout_s: float = 180.0) -> None:
        """Create (or reconfigure) a connector through the REST API (``PUT
        /connectors/<name>/config``), once the worker answers: its start scans every plugin
        and takes a minute on a loaded machine."""
        body = json.dumps(connector).encode()
        request = urllib.request.Request(  # noqa: S310 - the test's own loopback worker
            f"{self.rest_url}/connectors/{connector['name']}/config",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/json"},
        )

        def put() -> bool:
            self._check_alive()
            try:
                with urllib.request.urlopen(request, timeout=10):  # noqa: S310
                    return True
            except urllib.error.HTTPError as exc:
                if exc.code in (404, 409, 503):  # REST up before the herder: ask again
                    return False
                raise AssertionError(f"{connector['name']}: {exc.code} {exc.read()!r}") from exc
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False

        wait_for(put, timeout_s=timeout_s, interval_s=0.5, message=f"{connector['name']} added")

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"the Connect worker exited ({self.process.returncode}):\n"
                f"{self.log.read_text()[-3000:]}"
            )

    def status(self, connector: str) -> dict[str, Any] | None:
        """The connector's status from the REST API (``GET /connectors/<name>/status``: its
        state and each task's, with a failed task's ``trace``); None until the worker answers."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - the test's own loopback worker
                f"{self.rest_url}/connectors/{connector}/status", timeout=5
            ) as response:
                status: dict[str, Any] = json.load(response)
                return status
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def task_states(self, connector: str) -> list[str]:
        """Each task's state (``RUNNING``, ``FAILED``, ...); empty until the worker has them."""
        status = self.status(connector)
        return [task["state"] for task in (status or {}).get("tasks", [])]

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the Connect worker ignored SIGTERM:\n{self.log.read_text()[-3000:]}")


def file_sink(name: str, topic: str, file: Path, **settings: str) -> dict[str, str]:
    """A ``FileStreamSinkConnector`` writing each record's value of ``topic`` as a line."""
    return {
        "name": name,
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "file": str(file),
        **settings,
    }


def end_offsets(admin: AdminClient, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    result = admin.list_offsets({TopicPartition(topic, p): latest for p in range(partitions)})
    return {tp.partition: int(f.result(30).offset) for tp, f in result.items()}


def committed_offsets(
    admin: AdminClient, group: str, topic: str, partitions: int
) -> dict[int, int]:
    """The consumer group's committed offsets on ``topic`` (empty while it has none)."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    try:
        result = admin.list_consumer_group_offsets([request])[group].result(30)
    except KafkaException:
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions or []}

"""The jar cache and the embedded broker's start-up paths, against real Maven and a real JVM."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control_apps.dev.broker import BrokerSettings, BrokerStartError, EmbeddedKafkaBroker
from progress_control_apps.dev.jars import (
    MissingToolError,
    fetch_jars,
    find_maven,
    kafka_broker_jars,
    spark_kafka_connector_jars,
)
from tests.helpers import wait_for


def _fake_mvn(directory: Path) -> Path:
    """An ``mvn`` that records it was called and fails: proves the cache path needs no Maven."""
    script = directory / "mvn"
    script.write_text(f'#!/bin/sh\ntouch "{directory}/mvn-was-called"\nexit 99\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def warm_broker(
    busy_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EmbeddedKafkaBroker, Path]]:
    """A second broker started from the warm cache, with Maven unusable and its port taken."""
    bin_dir = tmp_path_factory.mktemp("no-maven")
    _fake_mvn(bin_dir)
    fetch_jars(kafka_broker_jars())  # warm, whichever broker the session uses
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROGRESS_CONTROL_MVN", str(bin_dir / "mvn"))
        broker = EmbeddedKafkaBroker(BrokerSettings(port=busy_port)).start()
    try:
        yield broker, bin_dir
    finally:
        broker.stop()


@pytest.mark.broker
def test_warm_start_reuses_the_cache_without_maven(
    warm_broker: tuple[EmbeddedKafkaBroker, Path],
) -> None:
    broker, bin_dir = warm_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert admin.list_topics(timeout=10).brokers
    assert not (bin_dir / "mvn-was-called").exists()


@pytest.mark.broker
def test_busy_port_picks_another(
    warm_broker: tuple[EmbeddedKafkaBroker, Path], busy_port: int
) -> None:
    broker, _ = warm_broker
    assert not broker.bootstrap_servers.endswith(f":{busy_port}")


@pytest.mark.network
def test_spark_connector_jars_resolve() -> None:
    spark_version = metadata.version("pyspark")
    directory = fetch_jars(spark_kafka_connector_jars())
    jars = {jar.name for jar in directory.glob("*.jar")}
    assert f"spark-sql-kafka-0-10_2.13-{spark_version}.jar" in jars
    assert f"spark-token-provider-kafka-0-10_2.13-{spark_version}.jar" in jars
    assert any(name.startswith("kafka-clients-") for name in jars)
    assert any(name.startswith("commons-pool2-") for name in jars)


@pytest.mark.network
def test_corrupt_cache_is_fetched_again(tmp_path: Path) -> None:
    jar_set = kafka_broker_jars()
    directory = tmp_path / "cache" / "jars" / jar_set.directory_name
    shutil.copytree(fetch_jars(jar_set), directory)
    victim = directory / f"kafka-clients-{jar_set.version}.jar"
    good_size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: good_size // 2])  # a torn download

    assert fetch_jars(jar_set, tmp_path / "cache", quiet=True) == directory
    assert victim.stat().st_size == good_size

    (directory / "MANIFEST.json").unlink()  # an interrupted fetch never wrote its manifest
    assert fetch_jars(jar_set, tmp_path / "cache", quiet=True) == directory
    assert (directory / "MANIFEST.json").is_file()


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError, match=r"Java was not found.*JAVA_HOME"):
        EmbeddedKafkaBroker(BrokerSettings()).start()


def test_missing_maven_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PROGRESS_CONTROL_MVN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError, match=r"Maven was not found"):
        find_maven()
    with pytest.raises(MissingToolError, match=r"Maven was not found"):
        fetch_jars(kafka_broker_jars(), tmp_path / "empty-cache", quiet=True)
    assert not (tmp_path / "empty-cache" / "jars" / kafka_broker_jars().directory_name).exists()


# ---------------------------------------------------------------------------------------------
# restarting on a data dir (issue 16 item 2)

CLI = [sys.executable, "-m", "progress_control_apps.cli"]


def _start_cli_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """``progress-control broker --data-dir`` as a user runs it; its process and address."""
    process = subprocess.Popen(
        [*CLI, "broker", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until the broker is ready (or the CLI exits)
    match = re.search(r"bootstrap\.servers=(\S+)", line)
    if not match:
        process.kill()
        _, stderr = process.communicate(timeout=60)
        pytest.fail(f"no bootstrap address in {line!r}; stderr:\n{stderr}")
    return process, match.group(1)


def _ctrl_c(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr


def _read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, int, bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"restart-reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records: list[tuple[int, int, bytes, bytes]] = []

    def everything() -> bool:
        for msg in consumer.consume(500, timeout=0.5):
            if msg.error() is None:
                records.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return len(records) >= expected

    try:
        wait_for(everything, timeout_s=60, message=f"{expected} records of {topic}")
    finally:
        consumer.close()
    return sorted(records)


@pytest.mark.broker
def test_broker_restarts_on_its_data_dir_with_every_topic_and_record(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    topic = "kept"
    process, bootstrap = _start_cli_broker(data_dir)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[
            topic
        ].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(300):
            producer.produce(topic, key=f"k{i % 7}".encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        written = _read_all(bootstrap, topic, 300)
        # A second broker on a data dir in use is refused before it starts a JVM.
        with pytest.raises(BrokerStartError, match="in use by another running Kafka broker"):
            EmbeddedKafkaBroker(BrokerSettings(data_dir=data_dir)).start()
        _ctrl_c(process)
        cluster_id = (data_dir / "data" / "meta.properties").read_text()

        # The same command again: the "Invalid cluster.id ... exit 2".
        process, second_bootstrap = _start_cli_broker(data_dir)
        first_port = int(bootstrap.rpartition(":")[2])
        # The previous address is kept when its port is still free.
        assert second_bootstrap == bootstrap or not _port_is_free(first_port)
        assert (data_dir / "data" / "meta.properties").read_text() == cluster_id
        admin = AdminClient({"bootstrap.servers": second_bootstrap})
        topics = admin.list_topics(timeout=30).topics
        assert len(topics[topic].partitions) == 3
        assert _read_all(second_bootstrap, topic, 300) == written
        _ctrl_c(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.broker
def test_data_dir_of_another_broker_is_a_clear_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    (data_dir / "data").mkdir(parents=True)
    # What Kafka's StorageTool writes for node 2 of another cluster.
    (data_dir / "data" / "meta.properties").write_text(
        "#\n#Wed Nov 25 02:03:23 UTC 2026\nnode.id=2\ndirectory.id=viRnc2860o8kVJpH00tOUw\n"
        "version=1\ncluster.id=ImbiV06mSaCpcqp9RZOuhg\n"
    )
    result = subprocess.run(
        [*CLI, "broker", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "progress-control: error:" in result.stderr
    assert f"{data_dir.resolve() / 'data'} belongs to another broker" in result.stderr
    assert "node.id=2, this broker is node.id=1" in result.stderr
    assert "Exception" not in result.stderr
    assert "\tat " not in result.stderr  # no Java stack trace

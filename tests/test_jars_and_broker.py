"""The jar cache and the embedded broker's start-up paths, against real Maven and a real JVM."""

from __future__ import annotations

import shutil
import socket
import stat
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from progress_control.broker import BrokerSettings, EmbeddedKafkaBroker
from progress_control.jars import (
    MissingToolError,
    fetch_jars,
    find_maven,
    kafka_broker_jars,
    spark_kafka_connector_jars,
)


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


def test_warm_start_reuses_the_cache_without_maven(
    warm_broker: tuple[EmbeddedKafkaBroker, Path],
) -> None:
    broker, bin_dir = warm_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert admin.list_topics(timeout=10).brokers
    assert not (bin_dir / "mvn-was-called").exists()


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

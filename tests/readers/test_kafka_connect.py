"""The Kafka Connect recipe (progress_control/readers/kafka_connect.py) against a real Connect
standalone worker (connect-runtime, connect-file, connect-transforms from Maven Central, cached
like the broker's jars) on the real broker.

One worker runs two FileStreamSink connectors over one ticked topic: one with the recipe, one
without. Once both have committed every offset of the topic, the first file holds every data
record and nothing else; the second holds the ticks too (``null`` lines), so the ticks did reach
the sink and the recipe is what dropped them.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from interceptor import Producer as TickingProducer
from progress_control.dev.jars import classpath, fetch_jars, find_java, kafka_connect_jars
from progress_control.dev.ports import free_port
from progress_control.readers.kafka_connect import SINK_DROP_TICKS, sink_drop_ticks
from progress_control.trust import ControlRecordSource
from tests.helpers import TopicReader, ticks_by_partition, wait_for
from tests.paths import ROOT

pytestmark = [pytest.mark.broker, pytest.mark.network]

PARTITIONS = 2
DOCS_PAGE = ROOT / "docs" / "readers" / "kafka-connect.md"


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

    def start(self, *connectors: dict[str, str]) -> None:
        """Run the worker with these connectors (their properties, as dicts)."""
        jars = fetch_jars(kafka_connect_jars())
        worker = _properties(
            self.directory / "worker.properties",
            {
                "bootstrap.servers": self.bootstrap,
                "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                "offset.storage.file.filename": str(self.directory / "connect.offsets"),
                "offset.flush.interval.ms": "300",
                "listeners": f"http://127.0.0.1:{free_port('127.0.0.1', 0, quiet=True)}",
            },
        )
        configs = [
            str(_properties(self.directory / f"{c['name']}.properties", c)) for c in connectors
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    *(str(find_java()), "-cp", classpath(jars)),
                    *("org.apache.kafka.connect.cli.ConnectStandalone", str(worker), *configs),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

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


@pytest.fixture
def connect_worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ConnectWorker]:
    worker = ConnectWorker(kafka_bootstrap, tmp_path)
    yield worker
    worker.stop()


def _file_sink(name: str, topic: str, file: Path) -> dict[str, str]:
    return {
        "name": name,
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "file": str(file),
    }


def test_a_sink_with_the_recipe_writes_every_data_record_and_no_tick(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    connect_worker: ConnectWorker,
) -> None:
    topic = create_topic("connect", partitions=PARTITIONS)
    data = [f"data-{i}" for i in range(20)]
    ticking = TickingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "linger.ms": 0,
            "progress.control.start.ms": 200,
            "progress.control.backoff.ms": 200,
            "progress.control.max.records": 2,
        }
    )
    try:
        for i, value in enumerate(data):
            ticking.produce(topic, value.encode(), f"k{i}".encode(), partition=i % PARTITIONS)
        ticking.flush(10)
        reader = reader_for(topic, PARTITIONS)
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 2, 1: 2},
            timeout_s=20,
            message="the interceptor's ticks on both partitions",
        )
    finally:
        ticking.close()
    # A tick with a null key (the protocol's option) is dropped all the same: the header decides.
    null_key = ControlRecordSource("null-key", key=None).record(topic, 0, 1_000)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    plain.produce(**null_key.produce_kwargs())  # type: ignore[arg-type]
    plain.flush(10)
    ticks = 5

    filtered, raw = connect_worker.directory / "filtered.txt", connect_worker.directory / "raw.txt"
    connect_worker.start(
        sink_drop_ticks(_file_sink("with-recipe", topic, filtered)),
        _file_sink("without-recipe", topic, raw),
    )
    ends = {p: kafka_admin_high(kafka_admin, topic, p) for p in range(PARTITIONS)}
    for connector in ("with-recipe", "without-recipe"):
        wait_for(
            lambda connector=connector: (
                _committed(kafka_admin, f"connect-{connector}", topic)  # type: ignore[misc]
                == ends
            ),
            timeout_s=45,
            message=f"{connector} to commit every offset of the topic",
        )

    assert Counter(filtered.read_text().splitlines()) == Counter(data)
    assert Counter(raw.read_text().splitlines()) == Counter([*data, *["null"] * ticks])


def kafka_admin_high(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's end offset."""
    from confluent_kafka.admin import OffsetSpec

    result = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()})
    return int(next(iter(result.values())).result(30).offset)


def _committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    try:
        result = admin.list_consumer_group_offsets([request])[group].result(30)
    except KafkaException:
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions or []}


def test_the_docs_page_shows_the_recipe_line_for_line() -> None:
    """The page users copy from states exactly what the test above runs."""
    page = DOCS_PAGE.read_text()
    for key, value in SINK_DROP_TICKS.items():
        assert f"{key}={value}\n" in page, key
    assert json.dumps(SINK_DROP_TICKS, indent=2) in page


def test_the_recipe_runs_first_and_keeps_the_connectors_own_transforms() -> None:
    own = {"transforms": "mask", "transforms.mask.type": "x", "predicates": "p"}
    merged = sink_drop_ticks(own)
    assert merged["transforms"] == "dropTicks,mask"
    assert merged["predicates"] == "isTick,p"
    assert merged["transforms.mask.type"] == "x"
    assert merged["predicates.isTick.name"] == "progress-control"
    with pytest.raises(ValueError, match="dropTicks"):
        sink_drop_ticks({"transforms": "dropTicks"})

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
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from interceptor import Producer as TickingProducer
from progress_control.readers.kafka_connect import SINK_DROP_TICKS, sink_drop_ticks
from progress_control.trust import ControlRecordSource
from tests.helpers import TopicReader, ticks_by_partition, wait_for
from tests.paths import ROOT
from tests.readers.connect_worker import ConnectWorker, committed_offsets, end_offsets, file_sink

pytestmark = [pytest.mark.broker, pytest.mark.network]

PARTITIONS = 2
DOCS_PAGE = ROOT / "docs" / "readers" / "kafka-connect.md"


@pytest.fixture
def connect_worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ConnectWorker]:
    worker = ConnectWorker(kafka_bootstrap, tmp_path)
    yield worker
    worker.stop()


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
        sink_drop_ticks(file_sink("with-recipe", topic, filtered)),
        file_sink("without-recipe", topic, raw),
    )
    ends = end_offsets(kafka_admin, topic, PARTITIONS)
    for connector in ("with-recipe", "without-recipe"):
        wait_for(
            lambda connector=connector: (  # type: ignore[misc]
                committed_offsets(kafka_admin, f"connect-{connector}", topic, PARTITIONS) == ends
            ),
            timeout_s=120,  # the worker scans every plugin first: a minute on a loaded machine
            message=f"{connector} to commit every offset of the topic",
        )

    assert Counter(filtered.read_text().splitlines()) == Counter(data)
    assert Counter(raw.read_text().splitlines()) == Counter([*data, *["null"] * ticks])


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

"""``flat_map``, ``split``, ``group_by`` and ``to_table`` with a suppression until a time limit,
end to end against the real broker: words of sentences on two partitions are split by length,
the long ones counted after a repartition by word, the short ones read as a table (repartitioned
first, the key having changed) whose suppressed updates come out on ticks alone, carried across
the repartition topic by the runtime's own ticks. What each operator outputs is
tests/streams_runtime/topologies/test_stream_operators_driver.py (the driver)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from streams_runtime import App, Branched, BufferConfig, StreamsBuilder, until_time_limit
from streams_runtime.serdes import Integer, String
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker

BASE_MS = (int(time.time()) - 3600) * 1000  # an hour back: ticks are not ahead of the clock


def _topology(sentences: str, long_counts: str, short_last: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    words = builder.stream(sentences).flat_map(
        lambda doc, text: [(word, doc) for word in text.split()]
    )
    branches = (
        words.split(name="len-")
        .branch(lambda word, _doc: len(word) > 3, Branched.with_name("long"))
        .default_branch(Branched.with_name("short"))
    )
    (
        branches["len-long"]
        .group_by(lambda word, _doc: word.upper(), name="long-words")
        .count(name="long-counts")
        .to_stream()
        .to(long_counts, value_serde=Integer())
    )
    (
        branches["len-short"]
        .to_table(name="short-table", store_name="short-last")
        .suppress(until_time_limit(1_000, BufferConfig.max_records(1_000)), name="short-calm")
        .to_stream()
        .to(short_last)
    )
    return builder


def _data(reader: TopicReader) -> list[tuple[str, str | int, int]]:
    out: list[tuple[str, str | int, int]] = []
    for message in reader.read():
        if is_control_record(message):
            continue
        key = (message.key() or b"").decode()
        raw = message.value() or b""
        value: str | int = raw.decode() if len(raw) != 8 else int.from_bytes(raw, "big")
        out.append((key, value, message.timestamp()[1] - BASE_MS))
    return out


def test_flat_map_split_group_by_and_a_suppressed_table_through_repartitions(
    *,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    sentences = create_topic("sentences", partitions=2)
    long_counts, short_last = create_topic("long-counts"), create_topic("short-last")
    app = run_app(_topology(sentences, long_counts, short_last), progress_interval_ms=100)
    application_id = app.settings.application_id
    assert {
        f"{application_id}-long-words-repartition",
        f"{application_id}-short-table-repartition",
    } <= set(app.topology.repartition_topics)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, doc, text, at in (
        (0, "d1", "the quick brown fox", 1_000),
        (1, "d2", "a lazy brown dog", 1_100),
        (0, "d3", "the end", 1_200),  # "the" again, after d1 on its partition
    ):
        producer.produce(sentences, text.encode(), doc.encode(), partition, timestamp=BASE_MS + at)
    assert producer.flush(10) == 0

    counts = reader_for(long_counts, 1)
    wait_for(lambda: len(_data(counts)) >= 4, timeout_s=60, message="the long words counted")
    assert sorted((word, n) for word, n, _ in _data(counts)) == [
        ("BROWN", 1),
        ("BROWN", 2),
        ("LAZY", 1),
        ("QUICK", 1),
    ]

    # The short words wait in the suppression; only stream time releases them, and no data
    # comes any more: ticks on both input partitions move it, across the repartition topic.
    last = reader_for(short_last, 1)
    assert _data(last) == []
    for partition in (0, 1):
        marker = ControlMarker("stream-operators-test", partition)
        tick = ControlRecord(sentences, partition, BASE_MS + 5_000, marker)
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(10) == 0
    wait_for(lambda: len(_data(last)) >= 5, timeout_s=60, message="the suppressed short words")
    # One update per word, its latest: "the" was buffered at 1 000 and updated at 1 200.
    assert sorted(_data(last)) == [
        ("a", "d2", 1_100),
        ("dog", "d2", 1_100),
        ("end", "d3", 1_200),
        ("fox", "d1", 1_000),
        ("the", "d3", 1_200),
    ]

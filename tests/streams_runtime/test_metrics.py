"""The runtime's Prometheus metrics: names and units (Kafka Streams' metrics mapped to Prometheus
style), the per-batch observations of a task without a broker, and ``/metrics`` of a running
app that restored its stores."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from typing import cast

import pytest
from confluent_kafka import Producer

from streams_runtime import App, StreamsBuilder
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.task import StreamTask
from streams_runtime.record import SourceRecord, TaskId, TopicPartitionId
from streams_runtime.serdes import String
from streams_runtime.settings import BadRecordPolicy, RuntimeSettings
from streams_runtime.state.restore import _RestoreProgress
from tests.helpers import exposed_metrics, undocumented_metrics, unique_name, wait_for


def _sample(metrics: RuntimeMetrics, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` (``None``: absent)."""
    return metrics.registry.get_sample_value(name, labels)


class _Collector:
    """What a stateless task uses of :class:`RecordCollector`."""

    def __init__(self) -> None:
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self.sent: list[tuple[str, bytes | None]] = []

    def send(self, topic: str, key: bytes | None, *_args: object, **_kwargs: object) -> None:
        self.sent.append((topic, key))


def _task(metrics: RuntimeMetrics) -> StreamTask:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream("in").to("out")
    topology = builder.build("metrics")
    settings = RuntimeSettings(
        application_id="metrics", bootstrap_servers="unused:9092", max_task_idle_ms=-1
    )
    collector = _Collector()
    task = StreamTask(
        TaskId(0, 1),
        topology.subtopologies[0],
        settings=settings,
        collector=cast("RecordCollector", collector),
        metrics=metrics,
        bad_records=BadRecordHandler(BadRecordPolicy.FAIL, "dlq", lambda *_: None, metrics),
        lag=lambda _tp: 0,
    )
    task.initialize({})
    return task


def test_a_task_observes_latencies_once_per_batch_and_stream_time_in_seconds() -> None:
    metrics = RuntimeMetrics("metrics")
    task = _task(metrics)
    now_ms = int(time.time() * 1000)
    records = [
        SourceRecord("in", 1, offset, now_ms - 2000 + offset, b"k", b"v", None)
        for offset in range(10)
    ]
    task.add_records(TopicPartitionId("in", 1), records)
    assert task.process(100) == 10
    labels = {"task": "0_1"}
    assert _sample(metrics, "streams_records_processed_total", **labels) == 10
    # One observation for the batch of ten, not ten.
    assert _sample(metrics, "streams_process_latency_seconds_count", **labels) == 1
    latency = _sample(metrics, "streams_process_latency_seconds_sum", **labels)
    assert latency is not None
    assert 0 < latency < 1
    assert _sample(metrics, "streams_record_e2e_latency_seconds_count", **labels) == 1
    e2e = _sample(metrics, "streams_record_e2e_latency_seconds_sum", **labels)
    assert e2e is not None
    assert 1.9 < e2e < 60  # the last record: 1.991 s old when taken
    assert _sample(metrics, "streams_stream_time_seconds", **labels) == (now_ms - 1991) / 1000
    # A batch of control records only: processing time, but no end-to-end latency.
    task.add_records(
        TopicPartitionId("in", 1),
        [SourceRecord("in", 1, 10, now_ms, None, None, None, is_control=True)],
    )
    assert task.process(100) == 1
    assert _sample(metrics, "streams_process_latency_seconds_count", **labels) == 2
    assert _sample(metrics, "streams_record_e2e_latency_seconds_count", **labels) == 1
    assert _sample(metrics, "streams_stream_time_seconds", **labels) == now_ms / 1000
    task.close()


def test_restore_progress_counts_the_records_left_to_read() -> None:
    a, b = TopicPartitionId("c", 0), TopicPartitionId("c", 1)
    progress = _RestoreProgress(ends={a: 10, b: 5}, next_offsets={a: 2, b: 5})
    progress.remaining = {a}
    assert progress.left() == 8
    progress.next_offsets[a] = 7
    assert progress.left() == 3
    progress.reached(a, 10)
    assert progress.left() == 0


def test_no_metric_is_in_milliseconds_and_counters_end_in_total() -> None:
    metrics = RuntimeMetrics("metrics")
    for metric in metrics.registry.collect():
        assert metric.name.startswith("streams_"), metric.name
        assert not re.search(r"_ms$|_millis", metric.name), metric.name
        if metric.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in metric.samples)


# ------------------------------------------------------------------------------------------
# real broker


def _scrape(app: App) -> dict[str, float]:
    """``/metrics`` of ``app``: sample (name and labels, as written) -> value. Each metric there
    is named in docs/operations/metrics.md, and none has a ``_created`` sample."""
    url = f"http://127.0.0.1:{app.metrics_port}/metrics"
    with urllib.request.urlopen(url) as response:
        text = response.read().decode()
    assert undocumented_metrics(exposed_metrics(text)) == []
    assert "_created" not in text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            sample, value = line.rsplit(" ", 1)
            samples[sample] = float(value)
    return samples


def _values(samples: dict[str, float], name: str) -> dict[str, float]:
    """The samples of ``name``, by their labels as written (``{...}``)."""
    return {
        sample[len(name) :]: value
        for sample, value in samples.items()
        if sample.startswith(name + "{") or sample == name
    }


@pytest.mark.broker
def test_metrics_of_a_running_app_after_a_restore(
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("words", partitions=2), create_topic("counts")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(200):
        producer.produce(source, key=f"k{n % 20}", value=b"x", partition=n % 2)
    producer.flush(10)

    def builder() -> StreamsBuilder:
        b = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
        b.stream(source).group_by_key().count(name="counts").to_stream().map(
            lambda k, n: (k, str(n))
        ).to(sink)
        return b

    application_id = unique_name("metrics-app")
    first = run_app(builder(), application_id=application_id)
    wait_for(lambda: first.metrics.total("streams_records_processed") == 200, timeout_s=30)
    first.close()  # commits

    # A new instance with empty state restores both tasks' stores from their changelogs.
    second = run_app(builder(), application_id=application_id, metrics_port=0)
    wait_for(lambda: second.metrics.total("streams_restored_records", source="changelog") > 0)
    producer.produce(source, key="k0", value=b"x", partition=0)
    producer.flush(10)
    wait_for(lambda: second.metrics.total("streams_records_processed") >= 1, timeout_s=30)
    time.sleep(1.5)  # consumer lag is published at most once a second
    samples = _scrape(second)

    remaining = _values(samples, "streams_restore_remaining_records")
    assert remaining == {'{task="0_0"}': 0.0, '{task="0_1"}': 0.0}
    lag = _values(samples, "streams_consumer_lag_records")
    assert set(lag) == {f'{{partition="{p}",topic="{source}"}}' for p in range(2)}, (
        lag
    )  # one series per input partition, no instance id
    assert all(value == 0 for value in lag.values())
    assert samples['streams_record_e2e_latency_seconds_count{task="0_0"}'] >= 1
    e2e_sum = samples['streams_record_e2e_latency_seconds_sum{task="0_0"}']
    assert 0 <= e2e_sum < 60
    assert samples['streams_process_latency_seconds_count{task="0_0"}'] >= 1
    stream_time = samples['streams_stream_time_seconds{task="0_0"}']
    assert time.time() - 120 < stream_time <= time.time() + 1
    assert "streams_stream_time_ms" not in "".join(samples)

"""The progress-control collector's series: per topic by default (bounded by the topics a writer
ticks), per partition when asked."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from progress_control.ticks.metrics import ProgressControlMetrics, PrometheusCollector


def _exposition(metrics: ProgressControlMetrics, *, per_partition: bool) -> str:
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(metrics, "w1", per_partition=per_partition))
    return generate_latest(registry).decode()


def test_last_tick_per_topic_unless_per_partition_is_asked_for() -> None:
    metrics = ProgressControlMetrics(lambda: 0)
    for partition in range(1_000):
        metrics.tick_acked("clicks", partition, 1_700_000_000_000 + partition)
    metrics.tick_acked("views", 3, 1_700_000_100_000)
    text = _exposition(metrics, per_partition=False)
    prefix = "progress_control_last_tick_timestamp_seconds"
    lines = [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]
    assert lines == [
        '{source="w1",topic="clicks"} 1.700000000999e+09',
        '{source="w1",topic="views"} 1.7000001e+09',
    ]
    per_partition = _exposition(metrics, per_partition=True)
    assert per_partition.count("progress_control_last_tick_timestamp_seconds{") == 1_001
    assert 'partition="999",source="w1",topic="clicks"' in per_partition

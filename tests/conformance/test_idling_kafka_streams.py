"""KIP-695 on a windowed stream-stream join, in Kafka Streams itself: the deterministic scenarios
of ``tests/streams_runtime/processing/test_idling.py`` give there what they give in the runtime.
(With ``max.task.idle.ms`` -1 the outcome depends on fetch timing in either engine, so it is not run
here.) The conformance app's ``stream-stream-join`` writes the left join to ``out2``, with the
time difference and grace taken from ``gap.ms`` and ``grace.ms``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.conformance.broker_runs import ProcessedCheck
from tests.conformance.kstreams import KafkaStreamsApps
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.processing.test_idling import (
    ORDERS,
    SLOW_FETCH,
    click_results,
    produce_clicks,
    produce_views,
)

pytestmark = [pytest.mark.broker, pytest.mark.network]


def _topics(create_topic: Callable[..., str]) -> tuple[str, str, dict[str, str]]:
    outs = {role: create_topic(role) for role in ("out", "out2", "out3")}
    return create_topic("clicks"), create_topic("views"), outs


def _start(
    kafka_streams: KafkaStreamsApps,
    bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    topics: tuple[str, str, dict[str, str]],
    idle_ms: int,
) -> str:
    """Start the join in Kafka Streams; its application id."""
    clicks, views, outs = topics
    app_id = unique_name("idling-kstreams")
    spec = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": str(tmp_path_factory.mktemp("idling-kstreams")),
        "topologies": "j",
        "j.type": "stream-stream-join",
        "j.gap.ms": "1000",
        "j.grace.ms": "0",
        "j.in": clicks,
        "j.in2": views,
        **{f"j.{role}": topic for role, topic in outs.items()},
        "config.max.task.idle.ms": str(idle_ms),
        "config.commit.interval.ms": "100",
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        **{f"config.{key}": value for key, value in SLOW_FETCH.items()},
    }
    kafka_streams.start(spec)
    return app_id


def _joined() -> dict[str, str]:
    return {f"k{j}": f"c{j}|v{j}" for j in range(ORDERS)}


def test_idle_zero_waits_for_the_lagging_input(
    kafka_streams: KafkaStreamsApps,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    topics = _topics(create_topic)
    clicks, views, outs = topics
    produce_views(kafka_bootstrap, views)
    produce_clicks(kafka_bootstrap, clicks)
    app_id = _start(kafka_streams, kafka_bootstrap, tmp_path_factory, topics, idle_ms=0)
    try:
        reader = reader_for(outs["out2"], 1)
        assert wait_for(lambda: click_results(reader), timeout_s=90) == _joined()
    finally:
        kafka_streams.stop(app_id)


@pytest.mark.parametrize("idle_ms", [0, 3000])
def test_positive_idle_waits_for_an_empty_input(
    idle_ms: int,
    *,
    kafka_streams: KafkaStreamsApps,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    topics = _topics(create_topic)
    clicks, views, outs = topics
    app_id = _start(kafka_streams, kafka_bootstrap, tmp_path_factory, topics, idle_ms=idle_ms)
    try:
        reader = reader_for(outs["out2"], 1)
        produce_clicks(kafka_bootstrap, clicks)  # the views input is empty (caught up, lag 0)
        if idle_ms:
            time.sleep(1.0)
            produce_views(kafka_bootstrap, views, fillers=0)
            assert wait_for(lambda: click_results(reader), timeout_s=90) == _joined()
        else:
            unjoined = {f"k{j}": f"c{j}|null" for j in range(ORDERS)}
            check = ProcessedCheck(kafka_bootstrap, app_id, [clicks])
            try:
                wait_for(check, timeout_s=90, interval_s=0.2, message="the clicks processed")
            finally:
                check.close()
            assert wait_for(lambda: click_results(reader), timeout_s=30) == unjoined
            produce_views(kafka_bootstrap, views, fillers=0)
            time.sleep(2.0)
            assert click_results(reader) == unjoined
    finally:
        kafka_streams.stop(app_id)

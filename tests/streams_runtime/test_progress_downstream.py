"""The progress promise, seen from downstream: a runtime writes final session results twice, with
and without its own ticks, and readers of both (a second runtime, Kafka Streams itself, and the
Spark streaming job, whose watermark the ticks move) sessionize them again. With ticks, each
reader's results equal its results without them, except that windows close earlier: nothing is
dropped as late that would not be without ticks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, String
from streams_runtime.windowed import Windowed
from tests.conformance.broker_runs import ProcessedCheck, read_to_end
from tests.conformance.inputs import SENTINEL_KEY
from tests.conformance.kstreams import KafkaStreamsApps, build_conformance_app
from tests.helpers import unique_name, wait_for
from tests.streams_runtime.test_progress import BASE_MS, In, produce, session_app, tick

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.broker, pytest.mark.network]

UPSTREAM = SessionWindows(gap_ms=3_000, grace_ms=1_000)
# A reader with a short gap and no grace: a result behind a tick it read is late for it.
DOWNSTREAM = SessionWindows(gap_ms=1_000, grace_ms=0)
PARTITIONS = 2  # of the finals topics: one upstream task writes them, in order

Session = tuple[str, int, int, int]  # user, start, end, count (relative to BASE_MS)


@pytest.fixture(scope="module")
def kafka_streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStreamsApps]:
    with KafkaStreamsApps(build_conformance_app(), tmp_path_factory.mktemp("kstreams")) as apps:
        yield apps


def session_as_click(window: Windowed[str], count: int) -> tuple[str | None, dict[str, Any]]:
    """A final session result as a click-like event stamped with the session's end (so any
    sessionizer can read it again), with its start and count."""
    return window.key, {
        "user": window.key,
        "page": "session",
        "ts": window.end,
        "start": window.start,
        "count": count,
    }


def _final_sessions(source: str, sink: str, windows: SessionWindows) -> StreamsBuilder:
    """Per-user final session counts, written as click-like events stamped with the session's
    end (so any sessionizer can read them again)."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .filter(lambda _k, v: not v.get("bot"))
        .group_by_key()
        .windowed_by(windows)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(session_as_click)
        .to(sink)
    )
    return builder


def _clicks() -> list[In]:
    """In-order clicks of five users, in rounds with idle spells that only the input's ticks
    fill; the last spell is long enough for every window downstream to close."""
    users = ["a", "b", "c", "d", "e"]
    records, at = [], 0
    for round_ in range(5):
        for n in range(10):
            at += 500 if n % 3 else 2_500
            user = users[(round_ * 3 + n) % len(users)]
            records.append(In(0, user, {"user": user, "bot": n % 7 == 6}, at))
        at += 12_000 if round_ < 4 else 40_000
        records.append(tick(0, at))
    return records


def _runtime_sessions(topic: str, bootstrap: str) -> list[Session]:
    found = []
    for r in read_to_end(bootstrap, topic, BASE_MS):
        if r.control or r.value is None:
            continue
        value = json.loads(r.value)
        end = value.get("end", value.get("ts"))
        user = (r.key or b"").decode()
        found.append((user, value["start"] - BASE_MS, end - BASE_MS, value["count"]))
    return sorted(found)


def _kstreams_sessions(topic: str, bootstrap: str) -> list[Session]:
    found = []
    for r in read_to_end(bootstrap, topic, BASE_MS):
        if r.control or r.key is None or r.value is None:
            continue
        user, end, start = r.key[:-16], r.key[-16:-8], r.key[-8:]
        if user == SENTINEL_KEY:
            continue  # Kafka Streams' sessions of the ticks it reads as records
        found.append(
            (
                user.decode(),
                int.from_bytes(start, "big") - BASE_MS,
                int.from_bytes(end, "big") - BASE_MS,
                int.from_bytes(r.value, "big"),
            )
        )
    return sorted(found)


def _spark_sessions(
    spark: SparkSession, topic: str, bootstrap: str, work: Path, expected: int
) -> list[Session]:
    """The Spark streaming job's sessions of ``topic``, once ``expected`` came out or no more
    do (without ticks the watermark stops at the last result, and its windows stay open)."""
    from progress_control_apps.spark import KafkaSource, SessionizationStream, StreamConfig

    config = StreamConfig(
        source=KafkaSource(bootstrap, topic),
        gap_ms=DOWNSTREAM.gap_ms,
        output_dir=str(work / "out"),
        checkpoint_dir=str(work / "checkpoints"),
        trigger_interval_ms=200,
    )
    with SessionizationStream(spark, config) as job:
        job.process_all_available()
        deadline = time.monotonic() + 20
        while len(found := job.sessions()) < expected and time.monotonic() < deadline:
            job.process_all_available()
            time.sleep(0.2)
    return sorted((s.user, s.start_ms - BASE_MS, s.end_ms - BASE_MS, s.events) for s in found)


def test_downstream_results_with_ticks_equal_those_without_but_come_earlier(  # noqa: PLR0917
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    clicks = create_topic("clicks")
    finals = {mode: create_topic(f"finals-{mode}", partitions=PARTITIONS) for mode in ("on", "off")}
    upstream = {
        mode: run_app(
            _final_sessions(clicks, finals[mode], UPSTREAM),
            progress_propagation=mode == "on",
            progress_interval_ms=20,
            commit_interval_ms=100,
        )
        for mode in finals
    }
    # Downstream: a runtime and Kafka Streams sessionize each finals topic again.
    again = {mode: create_topic(f"again-{mode}", partitions=PARTITIONS) for mode in finals}
    downstream = {
        mode: run_app(session_app(finals[mode], again[mode], DOWNSTREAM), commit_interval_ms=100)
        for mode in finals
    }
    kstreams_out = {
        mode: create_topic(f"kstreams-{mode}", partitions=PARTITIONS) for mode in finals
    }
    kstreams_id = unique_name("downstream-kstreams")
    spec = {
        "application.id": kstreams_id,
        "bootstrap.servers": kafka_bootstrap,
        "state.dir": str(tmp_path / "kstreams"),
        "topologies": ",".join(finals),
        "config.statestore.cache.max.bytes": "0",
        "config.commit.interval.ms": "100",
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
    }
    for mode, topic in finals.items():
        spec |= {
            f"{mode}.type": "session-count-suppressed",
            f"{mode}.gap.ms": str(DOWNSTREAM.gap_ms),
            f"{mode}.grace.ms": str(DOWNSTREAM.grace_ms),
            f"{mode}.in": topic,
            f"{mode}.out": kstreams_out[mode],
        }
    kafka_streams.start(spec)
    try:
        records = _clicks()
        for n, record in enumerate(records):
            produce(kafka_bootstrap, clicks, [record], sequence=n)
            time.sleep(0.02)  # sparse input, so ticks go out between records
        for mode, app in upstream.items():
            wait_for(
                lambda app=app: (
                    app.metrics.total("streams_records_processed")
                    + app.metrics.total("streams_control_records")
                    >= len(records)
                ),
                message=f"upstream {mode} processed",
            )
        # Ticks follow committed bounds, a moment after processing: wait for the last one (the
        # last input tick held back by the upstream session's gap + grace) on every partition.
        last_promise = records[-1].at - UPSTREAM.gap_ms - UPSTREAM.grace_ms
        wait_for(
            lambda: (
                {
                    r.partition
                    for r in read_to_end(kafka_bootstrap, finals["on"], BASE_MS)
                    if r.control and r.timestamp == last_promise - 1
                }
                == set(range(PARTITIONS))
            ),
            message="upstream ticked its last promise",
        )
        checks = [
            ProcessedCheck(kafka_bootstrap, app_id, list(finals.values()))
            for app_id in [kstreams_id]
        ] + [
            ProcessedCheck(kafka_bootstrap, app.settings.application_id, [finals[mode]])
            for mode, app in downstream.items()
        ]
        try:
            for check in checks:
                wait_for(
                    lambda check=check: kafka_streams.check(kstreams_id) or check(),
                    timeout_s=60,
                    interval_s=0.3,
                    message="downstream caught up",
                )
        finally:
            for check in checks:
                check.close()
    finally:
        kafka_streams.stop(kstreams_id)

    written = read_to_end(kafka_bootstrap, finals["on"], BASE_MS)
    behind = [
        (
            r.partition,
            r.timestamp,
            max(
                (t.timestamp for t in written[:i] if t.control and t.partition == r.partition),
                default=-1,
            ),
        )
        for i, r in enumerate(written)
        if not r.control
    ]
    assert [b for b in behind if b[1] < b[2]] == [], written
    upstream_on = _runtime_sessions(finals["on"], kafka_bootstrap)
    assert upstream_on == _runtime_sessions(finals["off"], kafka_bootstrap)  # input ticks alone
    results = {
        engine: {mode: read(outputs[mode], kafka_bootstrap) for mode in finals}
        for engine, read, outputs in (
            ("runtime", _runtime_sessions, again),
            ("kafka-streams", _kstreams_sessions, kstreams_out),
        )
    }
    expected = len(results["runtime"]["on"])
    results["spark"] = {
        mode: _spark_sessions(spark, topic, kafka_bootstrap, tmp_path / f"spark-{mode}", expected)
        for mode, topic in finals.items()
    }
    for engine, by_mode in results.items():
        with_ticks, without = by_mode["on"], by_mode["off"]
        assert set(without) <= set(with_ticks), (
            f"{engine}: a result lost to ticks: {sorted(set(without) - set(with_ticks))} "
            f"{sorted(set(with_ticks) - set(without))} upstream {upstream_on}"
        )
        assert len(with_ticks) > len(without), f"{engine}: ticks closed no window earlier"
        # Every extra result is a window still open without ticks: its key's last window.
        for user, start, _end, _count in set(with_ticks) - set(without):
            assert all(s < start for u, s, _e, _c in without if u == user), (engine, user)
        # All of it: every upstream result is counted once, with ticks.
        assert sum(c for *_rest, c in with_ticks) == len(upstream_on), engine
    for app in downstream.values():
        assert app.metrics.total("streams_dropped_records", reason="late") == 0

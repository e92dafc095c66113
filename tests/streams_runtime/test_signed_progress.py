"""Signed progress, end to end (issue 24, "Signed end to end"; docs/concepts/trust.md;
docs/concepts/promise.md, "One tick writer"): a producer signs its ticks with ``ops-1``; a runtime
that verifies them and signs its own (``runtime-1``) sessionizes through a repartition topic; a
second runtime and the Spark streaming job read its output verifying ``runtime-1`` only. After the
data stops, ticks alone close every session at every hop, and no reader rejects a tick of ours.

Before the runtime signed its own ticks, it rejected them on its own repartition topic as
``unsigned``, and no session closed after the data stopped (the issue's point 4).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Message

from interceptor import Producer
from progress_control.protocol import is_control_record, parse_control_headers
from progress_control.trust import ControlRecordValidator, TrustPolicy, Verdict
from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, wait_for
from tests.streams_runtime.test_progress_downstream import session_as_click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from progress_control_apps.spark.stream_config import StreamMetrics

pytestmark = [pytest.mark.broker, pytest.mark.network]  # network: Spark's connector jars

OPS_SECRET = "ops-signing-secret-0123456789"  # noqa: S105 - a test value
RUNTIME_SECRET = "runtime-signing-secret-0123456789"  # noqa: S105 - a test value
USERS = ["ann", "bo", "cy", "di", "ed", "flo"]
CLICKS_PER_USER = 3
STEP_MS = 50  # between clicks, all users interleaved: every user's clicks are one session
UPSTREAM = SessionWindows(gap_ms=2_000, grace_ms=1_000)
DOWNSTREAM_GAP_MS = 1_000  # the second runtime's and Spark's gap (no grace)

Session = tuple[str, int, int, int]  # user, start, end, count (relative to the first click)


def _upstream(clicks: str, out: str) -> StreamsBuilder:
    """Clicks keyed by page, re-keyed by user (a repartition), final session counts written
    as click-like events stamped with the session's end, so any sessionizer reads them."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(clicks)
        .select_key(lambda _page, click: click["user"])
        .group_by_key()
        .windowed_by(UPSTREAM)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(session_as_click)
        .to(out)
    )
    return builder


def _downstream(out: str, again: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(out)
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=DOWNSTREAM_GAP_MS, grace_ms=0))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(again)
    )
    return builder


def _produce_clicks(bootstrap: str, clicks: str) -> tuple[int, Producer]:
    """Every user's clicks, then nothing: the producer (signing with ``ops-1``) keeps running,
    so its ticks are the only thing that moves time afterwards. Returns the first click's
    timestamp and the producer (to close)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "progress.control.start.ms": 500,
            "progress.control.backoff.ms": 500,
            "progress.control.backoff.exponential": False,
            "progress.control.max.records": 40,  # 20 s of ticks after the last click
            "progress.control.signing.key.id": "ops-1",
            "progress.control.signing.key.secret": OPS_SECRET,
        }
    )
    base = int(time.time() * 1000)
    for n in range(CLICKS_PER_USER * len(USERS)):
        user, at = USERS[n % len(USERS)], base + n * STEP_MS
        time.sleep(max(0.0, at / 1000 - time.time()))  # event time = wall clock
        # Keyed by page, on both partitions: a user's clicks come from both upstream tasks.
        page = f"/page-{n % 4}"
        click = {"user": user, "page": page, "ts": at}
        value, partition = json.dumps(click).encode(), n % 2
        producer.produce(clicks, value, page.encode(), partition=partition, timestamp=at)
    assert producer.flush(30) == 0
    return base, producer


def _expected_upstream() -> list[Session]:
    users = len(USERS)
    last = (CLICKS_PER_USER - 1) * users
    return sorted(
        (user, j * STEP_MS, (last + j) * STEP_MS, CLICKS_PER_USER) for j, user in enumerate(USERS)
    )


def _data(records: list[Message]) -> list[Message]:
    return [m for m in records if not is_control_record(m)]


def _sessions(records: list[Message], base: int) -> list[Session]:
    found = []
    for m in _data(records):
        value = json.loads(m.value() or b"null")
        end = value.get("end", value.get("ts"))
        found.append(((m.key() or b"").decode(), value["start"] - base, end - base, value["count"]))
    return sorted(found)


def _verdicts(records: list[Message], policy: TrustPolicy) -> dict[Verdict, int]:
    validator, found = ControlRecordValidator(policy), {}
    for m in records:
        if is_control_record(m):
            verdict = validator.check(
                m.topic() or "", m.partition() or 0, m.timestamp()[1], m.headers()
            )
            found[verdict] = found.get(verdict, 0) + 1
    return found


def _wait_for_results(reader: TopicReader, app: App, where: str) -> None:
    """Wait for a result per user on ``reader``'s topic; on timeout, say which control records
    ``app`` rejected (before the runtime signed its ticks: its own, as ``unsigned``)."""
    try:
        wait_for(lambda: len(_data(reader.read())) >= len(USERS), timeout_s=60, message=where)
    except AssertionError as exc:
        rejected = {
            reason.value: app.metrics.total("streams_control_records_rejected", reason=reason.value)
            for reason in Verdict
            if reason is not Verdict.ACCEPTED
        }
        found = len(_data(reader.records))
        raise AssertionError(
            f"{exc}: {found} of {len(USERS)} sessions closed; control records rejected: "
            f"{ {r: n for r, n in rejected.items() if n} }"
        ) from None


def _spark_sessions(
    spark: SparkSession, topic: str, *, bootstrap: str, work: Path, base: int, expected: int
) -> tuple[list[Session], StreamMetrics]:
    """The Spark streaming job over ``topic``, its keys read as a deployment would (env), once
    ``expected`` sessions closed; and its metrics."""
    from progress_control_apps.spark import (
        KafkaSource,
        SessionizationStream,
        StreamConfig,
        load_job_settings,
    )

    config = StreamConfig(
        source=KafkaSource(bootstrap, topic),
        gap_ms=DOWNSTREAM_GAP_MS,
        output_dir=str(work / "out"),
        checkpoint_dir=str(work / "checkpoints"),
        trigger_interval_ms=250,
        trust=load_job_settings().trust_policy(),
    )
    assert dict(config.trust.verification_keys) == {"runtime-1": RUNTIME_SECRET.encode()}
    with SessionizationStream(spark, config) as job:
        sessions = job.wait_for_sessions(lambda s: len(s) >= expected, timeout_s=90)
        metrics = job.metrics()
        assert job.is_active
    found = sorted((s.user, s.start_ms - base, s.end_ms - base, s.events) for s in sessions)
    return found, metrics


def test_signed_ticks_close_every_session_through_a_repartition_and_downstream(  # noqa: PLR0917
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clicks = create_topic("signed-clicks", partitions=2)
    out = create_topic("signed-sessions", partitions=2)
    again = create_topic("signed-again", partitions=2)
    upstream = run_app(
        _upstream(clicks, out),
        control_verification_keys=f"ops-1:{OPS_SECRET}",
        signing_key_id="runtime-1",
        signing_key_secret=RUNTIME_SECRET,
        commit_interval_ms=100,
        progress_interval_ms=100,
        # Committed records stay on the repartition topic, so the test can read every tick.
        repartition_purge_interval_ms=600_000,
    )
    [repartition] = upstream.topology.repartition_topics
    downstream = run_app(
        _downstream(out, again),
        control_verification_keys=f"runtime-1:{RUNTIME_SECRET}",
        commit_interval_ms=100,
        progress_interval_ms=100,
    )
    out_reader, again_reader = reader_for(out, 2), reader_for(again, 2)
    expected = _expected_upstream()

    base, producer = _produce_clicks(kafka_bootstrap, clicks)
    try:
        # No click after these: every session below closes on ticks alone.
        _wait_for_results(out_reader, upstream, "upstream, after the repartition")
        _wait_for_results(again_reader, downstream, "downstream, on the runtime's ticks")
        monkeypatch.setenv(
            "PROGRESS_CONTROL_SPARK_CONTROL_VERIFICATION_KEYS", f"runtime-1:{RUNTIME_SECRET}"
        )
        spark_found, spark_metrics = _spark_sessions(
            spark,
            out,
            bootstrap=kafka_bootstrap,
            work=tmp_path / "spark",
            base=base,
            expected=len(USERS),
        )
    finally:
        producer.close()

    assert _sessions(out_reader.records, base) == expected
    # Each upstream result is one event downstream: one session of one, at the result's end.
    expected_again = sorted((user, end, end, 1) for user, _start, end, _count in expected)
    assert _sessions(again_reader.read(), base) == expected_again
    assert spark_found == expected_again
    # Closed on ticks alone: no result came after the last one, and the runtime's ticks on its
    # output went past the last result's window end for the readers downstream.
    written = out_reader.read()
    last_result = max(m.timestamp()[1] for m in _data(written))
    last_tick = max(m.timestamp()[1] for m in written if is_control_record(m))
    assert last_tick >= last_result + DOWNSTREAM_GAP_MS

    # Every tick the runtime wrote, on its repartition topic and its output, is signed with its
    # key and verifies there; nothing of ours was rejected anywhere.
    runtime_key = TrustPolicy(verification_keys={"runtime-1": RUNTIME_SECRET.encode()})
    repartition_reader = reader_for(repartition, 2)
    for records in (repartition_reader.read(max_s=5), out_reader.read()):
        verdicts = _verdicts(records, runtime_key)
        assert set(verdicts) == {Verdict.ACCEPTED}, verdicts
        markers = [parse_control_headers(m.headers()) for m in records if is_control_record(m)]
        assert {(m.version, m.key_id) for m in markers if m} == {(2, "runtime-1")}
    for app in (upstream, downstream):
        assert app.metrics.total("streams_control_records_rejected") == 0
        assert app.metrics.total("streams_control_records") > 0
        assert app.metrics.total("streams_dropped_records", reason="late") == 0
    assert not any(spark_metrics.rejected_control_records.values())
    assert spark_metrics.control_records > 0

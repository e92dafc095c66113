"""Progress as a promise, against the real broker (docs/concepts/trust.md; docs/concepts/promise.md,
"Progress flows through the topology"): the runtime's ticks never turn good data late, on its own
repartition topics or on its outputs, and control records that fail validation move nothing and stop
nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer

from progress_control.protocol import CONTROL_HEADER, ControlMarker, ControlRecord
from progress_control.trust import SigningKey, sign
from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker

# Inputs are dated an hour back, so no control record of theirs is ahead of the wall clock.
BASE_MS = (int(time.time()) - 3600) * 1000


@dataclass(frozen=True)
class In:
    """One input record: data (``key``, ``value``) or, with ``control``, a control record."""

    partition: int
    key: str | None
    value: dict[str, Any] | None
    at: int  # ms after BASE_MS
    control: bool = False


def tick(partition: int, at: int) -> In:
    return In(partition, None, None, at, control=True)


def produce(bootstrap: str, topic: str, records: Sequence[In], sequence: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for n, r in enumerate(records):
        if r.control:
            marker = ControlMarker("test-input", sequence + n)
            producer.produce(
                **ControlRecord(topic, r.partition, BASE_MS + r.at, marker).produce_kwargs()
            )
        else:
            producer.produce(
                topic,
                json.dumps(r.value).encode(),
                None if r.key is None else r.key.encode(),
                r.partition,
                timestamp=BASE_MS + r.at,
            )
    assert producer.flush(10) == 0


def behind_earlier_ticks(records: Sequence[Message]) -> list[tuple[int, int, int]]:
    """Data records older than a tick written before them to their partition:
    (partition, timestamp, tick), timestamps relative to BASE_MS."""
    latest: dict[int, int] = {}
    behind = []
    for m in records:  # in offset order per partition
        partition, ts = m.partition() or 0, m.timestamp()[1]
        if dict(m.headers() or []).get(CONTROL_HEADER) is not None:
            latest[partition] = max(latest.get(partition, -1), ts)
        elif ts < latest.get(partition, -1):
            behind.append((partition, ts - BASE_MS, latest[partition] - BASE_MS))
    return behind


def data(records: Sequence[Message]) -> list[Message]:
    return [m for m in records if dict(m.headers() or []).get(CONTROL_HEADER) is None]


def sessions(reader: TopicReader) -> list[tuple[str, int, int, int]]:
    """Final session results (user, start, end, count), start and end relative to BASE_MS."""
    found = []
    for m in data(reader.read()):
        value = json.loads(m.value() or b"null")
        user = (m.key() or b"").decode()
        found.append((user, value["start"] - BASE_MS, value["end"] - BASE_MS, value["count"]))
    return sorted(found)


def session_counts(
    builder: StreamsBuilder, stream: Any, sink: str, windows: SessionWindows
) -> StreamsBuilder:
    (
        stream.group_by_key()
        .windowed_by(windows)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(sink)
    )
    return builder


GAP_5S = SessionWindows(gap_ms=5_000)


def processed(app: App) -> float:
    return app.metrics.total("streams_records_processed")


def test_records_a_filter_drops_never_tick_the_repartition_topic(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    # The case: filter -> select_key -> group_by_key -> session count + suppress, two
    # input partitions; between two rounds of clicks, two records at 1000000 the filter drops.
    source, sink = create_topic("clicks", partitions=2), create_topic("sessions", partitions=2)
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    clicks = (
        builder.stream(source)
        .filter(lambda _k, v: not v.get("bot"))
        .select_key(lambda _k, v: v["user"])
    )
    session_counts(builder, clicks, sink, GAP_5S)
    app_id = unique_name("progress")
    # Four repartition partitions for three users: at least one gets only ticks.
    app = run_app(
        builder,
        application_id=app_id,
        num_repartition_partitions=4,
        progress_interval_ms=50,
        commit_interval_ms=100,
    )
    click = lambda p, user, at: In(p, user, {"user": user}, at)  # noqa: E731
    bot = {"user": "bot", "bot": True}
    produce(
        kafka_bootstrap,
        source,
        [
            click(0, "ua", 1000),
            click(1, "ub", 1500),
            click(0, "uc", 1200),
            In(0, "bot", bot, 1_000_000),
            In(1, "bot", bot, 1_000_000),
        ],
    )
    repartition = reader_for(_repartition_topic(kafka_bootstrap, app_id), 4)
    # The runtime ticks the partitions it did not write to once it processed all of this (the
    # five inputs; the repartitioned clicks count once more when the session tasks take them).
    wait_for(lambda: processed(app) >= 5 and repartition.ticks(), message="repartition ticks")
    produce(
        kafka_bootstrap,
        source,
        [click(0, "ua", 2500), click(1, "ub", 3000), click(0, "uc", 2700)],
    )
    # Ticks on the input close the sessions, without any further data.
    produce(kafka_bootstrap, source, [tick(0, 20_000), tick(1, 20_000)], sequence=10)
    output = reader_for(sink, 2)
    wait_for(lambda: len(sessions(output)) >= 3, message="3 sessions")
    assert sessions(output) == [
        ("ua", 1000, 2500, 2),
        ("ub", 1500, 3000, 2),
        ("uc", 1200, 2700, 2),
    ]
    assert app.metrics.total("streams_dropped_records", reason="late") == 0
    assert behind_earlier_ticks(repartition.read()) == []
    assert behind_earlier_ticks(output.read()) == []
    assert max(m.timestamp()[1] for m in repartition.ticks()) - BASE_MS < 1_000_000


def _repartition_topic(bootstrap: str, app_id: str) -> str:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("meta")})
    try:
        topics = consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    [name] = [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")]
    return name


def test_outputs_never_get_data_behind_an_earlier_tick(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    # In-order input in rounds, with idle spells only ticks fill: final session results (stamped
    # with their session's end, which trails stream time by gap + grace), every session update
    # (tombstones of merged sessions included) and the clicks passing a filter.
    source = create_topic("clicks", partitions=2)
    finals, updates, valid = (create_topic(n, partitions=2) for n in ("finals", "updates", "valid"))
    windows = SessionWindows(gap_ms=3_000, grace_ms=1_000)
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    clicks = builder.stream(source).filter(lambda _k, v: not v.get("bot"))
    clicks.to(valid)
    counts = clicks.group_by_key().windowed_by(windows).count()
    counts.to_stream().map(lambda w, n: (w.key, n)).to(updates)
    (
        counts.suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(finals)
    )
    app = run_app(builder, progress_interval_ms=20, commit_interval_ms=100)
    users = ["a", "b", "c", "d", "e"]
    at, sent = 0, 0
    for round_ in range(6):
        batch = []
        for n in range(12):
            at += 400 if n % 4 else 2_000  # bursts within the gap, pauses past it
            user = users[(round_ * 7 + n) % len(users)]
            batch.append(In(n % 2, user, {"user": user, "bot": n % 5 == 0}, at))
        at += 6_000  # an idle spell: only ticks move time
        batch += [tick(0, at), tick(1, at)]
        for n, record in enumerate(batch):
            # Sparse input, paced, so the runtime ticks its outputs between records.
            produce(kafka_bootstrap, source, [record], sequence=100 * round_ + n)
            time.sleep(0.03)
        sent += len(batch)
        wait_for(
            lambda target=sent: (
                app.metrics.total("streams_records_processed")
                + app.metrics.total("streams_control_records")
                >= target
            ),
            message=f"round {round_} processed",
        )
    final = reader_for(finals, 2)
    wait_for(lambda: len(data(final.read())) >= 6, message="final results")
    for topic in (finals, updates, valid):
        records = reader_for(topic, 2).read(quiet_s=0.5, max_s=3)
        assert len(records) > len(data(records)) > 0, f"{topic}: data and ticks"
        assert behind_earlier_ticks(records) == [], topic
    assert app.metrics.total("streams_dropped_records", reason="late") == 0


def _raw_tick(bootstrap: str, topic: str, timestamp: int, header: bytes) -> None:
    """A record carrying the control header as anyone may write it: any timestamp, any bytes."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        topic,
        None,
        b"__progress_control__",
        0,
        timestamp=timestamp,
        headers=[(CONTROL_HEADER, header)],
    )
    assert producer.flush(10) == 0


def session_app(source: str, sink: str, windows: SessionWindows) -> StreamsBuilder:
    """Final session counts per key of JSON clicks (see :func:`sessions`)."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    return session_counts(builder, builder.stream(source), sink, windows)


def test_bad_control_records_are_skipped_counted_and_never_stop_the_app(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("clicks"), create_topic("sessions")
    app_id = unique_name("trust")
    app = run_app(session_app(source, sink, GAP_5S), application_id=app_id, commit_interval_ms=100)
    produce(kafka_bootstrap, source, [In(0, "a", {}, 1000)])
    marker = ControlMarker("forger", 0).encode()
    _raw_tick(kafka_bootstrap, source, -5, marker)  # crashed the app before, at every restart
    # Well-formed and 55 minutes ahead: it closed every open session at once.
    _raw_tick(kafka_bootstrap, source, int(time.time() * 1000) + 55 * 60_000, marker)
    _raw_tick(kafka_bootstrap, source, BASE_MS + 1500, b"garbage")
    produce(kafka_bootstrap, source, [In(0, "a", {}, 2000)])
    rejected = lambda reason: app.metrics.total(  # noqa: E731
        "streams_control_records_rejected", reason=reason
    )
    wait_for(
        lambda: processed(app) == 2 and rejected("malformed") == 1,
        message="the data processed, the bad ticks skipped",
    )
    assert rejected("negative-timestamp") == 1
    assert rejected("future-timestamp") == 1
    assert app.metrics.total("streams_bad_records") == 0
    output = reader_for(sink, 1)
    assert data(output.read()) == []  # a's session is still open: nothing moved time past it
    produce(kafka_bootstrap, source, [tick(0, 20_000)])
    wait_for(lambda: sessions(output), message="a's session")
    assert sessions(output) == [("a", 1000, 2000, 2)]
    assert app.state == "RUNNING"
    # A restart reads from the committed offsets, past the bad ticks: no crash, no repeat.
    app.close()
    again = run_app(session_app(source, sink, GAP_5S), application_id=app_id)
    produce(kafka_bootstrap, source, [In(0, "b", {}, 30_000), tick(0, 40_000)], sequence=5)
    wait_for(lambda: len(sessions(output)) == 2, message="b's session")
    assert sessions(output) == [("a", 1000, 2000, 2), ("b", 30_000, 30_000, 1)]
    assert again.state == "RUNNING"
    assert again.metrics.total("streams_control_records_rejected") == 0


def test_only_signed_ticks_move_time_when_keys_are_set(
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("clicks"), create_topic("sessions")
    key = SigningKey("k1", b"0123456789abcdef0123")
    app = run_app(
        session_app(source, sink, GAP_5S),
        control_verification_keys="k1:0123456789abcdef0123",
        commit_interval_ms=100,
    )
    produce(kafka_bootstrap, source, [In(0, "a", {}, 1000), tick(0, 20_000)])
    wait_for(
        lambda: app.metrics.total("streams_control_records_rejected", reason="unsigned") == 1,
        message="the unsigned tick skipped",
    )
    output = reader_for(sink, 1)
    assert data(output.read()) == []
    signed = sign(ControlMarker("sidecar", 1), source, 0, BASE_MS + 20_000, key)
    _raw_tick(kafka_bootstrap, source, BASE_MS + 20_000, signed.encode())
    wait_for(lambda: sessions(output), message="a's session, closed by the signed tick")
    assert sessions(output) == [("a", 1000, 1000, 1)]
    # Replayed to another partition or re-dated, a signature no longer verifies.
    _raw_tick(kafka_bootstrap, source, BASE_MS + 30_000, signed.encode())
    wait_for(
        lambda: app.metrics.total("streams_control_records_rejected", reason="bad-signature"),
        message="the re-dated tick skipped",
    )

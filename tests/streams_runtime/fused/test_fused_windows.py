"""The fused windowed aggregations against the broker: the same input through the native core
and the chain processor by processor gives the same final results in
the same order per key, the same suppression buffer, and the same answers to interactive
queries; an application switched between the paths across a restart loses and repeats nothing.
For session windows and for time windows (hopping here, tumbling across the restart); counts
throughout, and a sum, a max, a user's reduce and a user's aggregate of numbers (ints, floats,
now and then a null or a string the functions refuse).

The input has what the generated tests of the cores have, end to end: several keys per
partition, out-of-order and late records, records without a key, a value the source's serde
refuses (skipped by policy), and ticks that close every session in the end."""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from streams_runtime import App, SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Float, Json, String
from streams_runtime.state.changelog import changelog_topic
from streams_runtime.windowed import Windowed
from tests.helpers import unique_name, wait_for
from tests.streams_runtime.fused.test_session_core import tally_add, tally_merge, tally_start

pytestmark = pytest.mark.broker

PARTITIONS = 2
GAP_MS, GRACE_MS = 1_000, 500
BASE_MS = 1_700_000_000_000
STORE, BUFFER = "sessions", "finals"
PATHS = ("native", "chain")


def _inputs(seed: int) -> list[tuple[int, bytes | None, bytes, int]]:
    """``(partition, key, value, timestamp)``: bursts per key, shuffled a little, some late."""
    rng = random.Random(seed)  # noqa: S311 - test data
    records = []
    for partition in range(PARTITIONS):
        t = BASE_MS
        for i in range(400):
            t += rng.choice([10, 50, 200, 1_500])
            at = t - rng.choice([0, 0, 0, 300, 2_500])  # out of order; the last is late
            key = None if i % 97 == 13 else f"user-{partition}-{rng.randrange(5)}".encode()
            value = b"{not json" if i % 151 == 7 else json.dumps({"n": i}).encode()
            records.append((partition, key, value, at))
    return records


def _produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes, int]],
    *,
    ticks: bool = True,
) -> None:
    """The records, then (``ticks``) a tick per partition far enough ahead to close every
    session."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, key, value, ts in records:
        producer.produce(topic, key=key, value=value, timestamp=ts, partition=partition)
    if ticks:
        end = max((ts for *_, ts in records), default=BASE_MS + 10_000_000)
        for partition in range(PARTITIONS):
            marker = ControlMarker("test-input", partition)
            tick = ControlRecord(topic, partition, end + 10_000, marker)
            producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    assert producer.flush(30) == 0


WINDOWS = {
    "session": SessionWindows(GAP_MS, GRACE_MS),
    "tumbling": TimeWindows(GAP_MS, grace_ms=GRACE_MS),
    "hopping": TimeWindows(GAP_MS, 400, GRACE_MS),
}


FAILING_COUNT = 2


def _as_json(window: Windowed[str], count: int) -> tuple[str, dict[str, int]]:
    return window.key, {"start": window.start, "end": window.end, "count": count}


def _failing_as_json(window: Windowed[str], count: int) -> tuple[str, dict[str, int]]:
    """:func:`_as_json`, raising for a window of 2 clicks: a user's bug below the suppression,
    which the bad-record policy takes, while every other window still comes out."""
    if count == FAILING_COUNT:
        raise ValueError("a window of 2")
    return _as_json(window, count)


def _builder(
    source: str, sink: str, kind: str = "session", *, failing: bool = False
) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(WINDOWS[kind])  # type: ignore[call-overload]
        .count(name=STORE)
        .suppress(until_window_closes(), name=BUFFER)
        .to_stream()
        .map(_failing_as_json if failing else _as_json)
        .to(sink, key_serde=String(), value_serde=Json())
    )
    return builder


@pytest.fixture
def core_path() -> Callable[[str], dict[str, Any]]:
    """The App settings for one path."""
    pytest.importorskip("streams_runtime._native", reason="the native core is not built")
    return lambda path: {"native_core": path == "native"}


def _read(bootstrap: str, topic: str) -> Iterator[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("read"),
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.subscribe([topic])
        at_end: set[int] = set()
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        while len(at_end) < partitions:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                at_end.add(msg.partition())
                continue
            yield msg
    finally:
        consumer.close()


def _results(bootstrap: str, sink: str) -> dict[str, list[tuple[Any, int]]]:
    """Per key, the final results in order (a key's results come from one task, in order; the
    tasks' results interleave in the output as they happen to run)."""
    out: dict[str, list[tuple[Any, int]]] = {}
    for msg in _read(bootstrap, sink):
        if not is_control_record(msg):
            key = msg.key().decode()
            out.setdefault(key, []).append((json.loads(msg.value()), msg.timestamp()[1]))
    return out


def _state(bootstrap: str, app_id: str, store: str) -> dict[tuple[int, bytes], bytes]:
    """A changelog topic folded: what a restore would load."""
    state: dict[tuple[int, bytes], bytes] = {}
    for msg in _read(bootstrap, changelog_topic(app_id, store)):
        key = (msg.partition(), msg.key())
        if msg.value() is None:
            state.pop(key, None)
        else:
            state[key] = msg.value()
    return state


def _wait_committed(bootstrap: str, app_id: str, topic: str, ends: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        app_id, [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
    )

    def done() -> bool:
        try:
            result = admin.list_consumer_group_offsets([request])[app_id].result(10)
        except KafkaException:
            return False
        committed = {tp.partition: tp.offset for tp in result.topic_partitions or []}
        return all(committed.get(p, -1) >= end for p, end in ends.items())

    wait_for(done, timeout_s=90, message=f"{app_id} committed {ends}")


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return {
            p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("kind", "cache_bytes"),
    # The write budget is the record cache's: written behind at commits (10 MiB), after
    # nearly every batch (300 bytes), after every batch (0).
    [("session", 10 * 1024 * 1024), ("session", 300), ("hopping", 0)],
)
def test_every_path_gives_the_same_results_buffer_and_queries(  # noqa: PLR0917 - fixtures
    kind: str,
    cache_bytes: int,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    core_path: Callable[[str], dict[str, Any]],
) -> None:
    records = _inputs(seed=7)
    source = create_topic("clicks", partitions=PARTITIONS)
    _produce(kafka_bootstrap, source, records, ticks=False)
    ends = _ends(kafka_bootstrap, source)
    results, buffers, queried = {}, {}, {}
    apps = {}
    for path in PATHS:
        sink = create_topic("sessions", partitions=PARTITIONS)
        app_id = unique_name(f"fused-{path}")
        apps[path] = (
            app_id,
            sink,
            # The fused paths with a failing mapper: they lose exactly the windows it fails on.
            run_app(
                _builder(source, sink, kind, failing=path != "chain"),
                application_id=app_id,
                bad_record_policy="log-and-skip",
                statestore_cache_max_bytes=cache_bytes,
                commit_interval_ms=500,
                **core_path(path),
            ),
        )
        _wait_committed(kafka_bootstrap, app_id, source, ends)
        # Open sessions, as processed.
        answers = [apps[path][2].get(STORE, f"user-{p}-{k}") for p in (0, 1) for k in range(5)]
        queried[path] = [(a.found, a.value) for a in answers]
    assert any(found for found, _ in queried["chain"])
    # Ticks close the rest.
    _produce(kafka_bootstrap, source, [], ticks=True)
    ends = _ends(kafka_bootstrap, source)
    for path in PATHS:
        app_id, sink, app = apps[path]
        _wait_committed(kafka_bootstrap, app_id, source, ends)
        app.close()
        results[path] = _results(kafka_bootstrap, sink)
        buffers[path] = _state(kafka_bootstrap, app_id, BUFFER)
    assert sum(len(r) for r in results["chain"].values()) > 100
    expected = {
        key: kept
        for key, found in results["chain"].items()
        if (kept := [(v, ts) for v, ts in found if v["count"] != FAILING_COUNT])
    }
    assert expected != results["chain"]  # some windows failed
    assert results["native"] == expected
    # Every session is out: the buffers are empty in the end, on every path.
    assert buffers == {path: {} for path in PATHS}
    # The fused operator answers with the open sessions; the chain's store also keeps those
    # whose final result is out until its retention purge (every 30 s) drops them.
    assert any(found for found, _ in queried["native"])
    for (found, fused), (_, chained) in zip(queried["native"], queried["chain"], strict=True):
        assert all(session in chained for session in (fused if found else []))


def _numbers(seed: int) -> list[tuple[int, bytes | None, bytes, int]]:
    """:func:`_inputs` with numbers for values (ints of any size, floats, equal ones of both
    kinds), now and then a null or a string, which a sum or max refuses once added to a number,
    and still the odd value that is not JSON."""
    rng = random.Random(seed)  # noqa: S311 - test data
    numbers = []
    for partition, key, value, at in _inputs(seed):
        if value.startswith(b"{not"):
            numbers.append((partition, key, value, at))
            continue
        number = rng.choice([1, 1.0, 0.1, -3, 2.5, 2**70, rng.randrange(100), rng.random()])
        odd = rng.random()
        chosen: object = None if odd < 0.02 else "x" if odd < 0.04 else number
        numbers.append((partition, key, json.dumps(chosen).encode(), at))
    return numbers


def _weighted(aggregate: Any, value: Any) -> Any:
    """A user's reducer: the order of every combination shows in its result."""
    return aggregate * 3 + value


def _reducing(source: str, sink: str, kind: str, builtin: str) -> StreamsBuilder:
    builder = StreamsBuilder()
    windowed = (
        builder.stream(source, key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(WINDOWS[kind])  # type: ignore[call-overload]
    )
    if builtin == "reduce":
        aggregated = windowed.reduce(_weighted, name=STORE)
    elif builtin == "aggregate":  # sessions: with their merger
        aggregated = windowed.aggregate(
            tally_start, tally_add, tally_merge, value_serde=Json(), name=STORE
        )
    else:
        aggregated = getattr(windowed, builtin)(name=STORE)
    (
        aggregated.suppress(until_window_closes(), name=BUFFER)
        .to_stream()
        .map(lambda window, value: (window.key, [window.start, window.end, value]))
        .to(sink, key_serde=String(), value_serde=Json())
    )
    return builder


@pytest.mark.parametrize(
    ("kind", "builtin"),
    [("session", "sum"), ("hopping", "max"), ("tumbling", "reduce"), ("session", "aggregate")],
)
def test_every_path_gives_the_same_sums_maxima_and_reductions(  # noqa: PLR0917 - fixtures
    kind: str,
    builtin: str,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    core_path: Callable[[str], dict[str, Any]],
) -> None:
    source = create_topic("numbers", partitions=PARTITIONS)
    _produce(kafka_bootstrap, source, _numbers(seed=5))
    ends = _ends(kafka_bootstrap, source)
    results = {}
    for path in PATHS:  # one after the other: the core is chosen as the task starts
        sink = create_topic("sums", partitions=PARTITIONS)
        app_id = unique_name(f"fused-{builtin}-{path}")
        app = run_app(
            _reducing(source, sink, kind, builtin),
            application_id=app_id,
            bad_record_policy="log-and-skip",
            commit_interval_ms=200,
            **core_path(path),
        )
        _wait_committed(kafka_bootstrap, app_id, source, ends)
        app.close()
        results[path] = _results(kafka_bootstrap, sink)
        assert _state(kafka_bootstrap, app_id, BUFFER) == {}
    values = [value for found in results["chain"].values() for (*_, value), _ in found]
    assert len(values) > 100
    if builtin in {"sum", "max"}:  # a user's function makes a string of strings only
        assert {type(v) for v in values} >= {int, float, str}
    assert results["native"] == results["chain"]


@pytest.mark.parametrize(
    ("first", "then", "kind"),
    [("native", "chain", "session"), ("chain", "native", "tumbling")],
)
def test_a_restart_on_the_other_path_loses_and_repeats_nothing(  # noqa: PLR0917 - fixtures
    first: str,
    then: str,
    kind: str,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    core_path: Callable[[str], dict[str, Any]],
    tmp_path: Path,
) -> None:
    records = _inputs(seed=11)
    per_partition = len(records) // PARTITIONS
    # The first half of each partition, no ticks: the restart comes with sessions open.
    before = [r for i, r in enumerate(records) if i % per_partition < per_partition // 2]
    after = [r for i, r in enumerate(records) if i % per_partition >= per_partition // 2]
    source = create_topic("clicks", partitions=PARTITIONS)
    _produce(kafka_bootstrap, source, before, ticks=False)
    expected_sink = create_topic("sessions", partitions=PARTITIONS)
    sink = create_topic("sessions", partitions=PARTITIONS)
    app_id = unique_name("switch")
    settings = {"bad_record_policy": "log-and-skip", "commit_interval_ms": 300}

    app = run_app(
        _builder(source, sink, kind), application_id=app_id, **settings, **core_path(first)
    )
    _wait_committed(kafka_bootstrap, app_id, source, _ends(kafka_bootstrap, source))
    app.close()
    _produce(kafka_bootstrap, source, after)
    ends = _ends(kafka_bootstrap, source)
    app = run_app(
        _builder(source, sink, kind),
        application_id=app_id,
        state_dir=tmp_path / "restarted",
        **settings,
        **core_path(then),
    )
    _wait_committed(kafka_bootstrap, app_id, source, ends)
    app.close()

    reference_id = unique_name("whole")
    run_app(_builder(source, expected_sink, kind), application_id=reference_id, **settings)
    _wait_committed(kafka_bootstrap, reference_id, source, ends)
    assert _results(kafka_bootstrap, sink) == _results(kafka_bootstrap, expected_sink)


_NAN = struct.pack(">d", math.nan)
# Quiet and signalling, either sign, other payloads: all NaN, all written as the one NaN.
_NANS = [_NAN, bytes.fromhex("fff8000000000000"), bytes.fromhex("7ff0000000000001")]
_NANS.append(bytes.fromhex("fff800000000dead"))


def test_every_path_writes_every_nan_as_one(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    core_path: Callable[[str], dict[str, Any]],
) -> None:
    """A session sum of doubles meeting NaNs of every sign and payload: each path writes the
    one NaN Kafka's ``DoubleSerializer`` writes, to its changelog and its output, and the paths'
    outputs are the same bytes."""
    source = create_topic("doubles", partitions=PARTITIONS)
    rng = random.Random(3)  # noqa: S311 - test data
    records = [
        (partition, key, rng.choice([*_NANS, struct.pack(">d", rng.random())]), at)
        for partition, key, _, at in _inputs(seed=3)
        if key is not None
    ]
    _produce(kafka_bootstrap, source, records)
    ends = _ends(kafka_bootstrap, source)
    outputs = {}
    for path in PATHS:
        sink = create_topic("sums", partitions=PARTITIONS)
        app_id = unique_name(f"nan-{path}")
        builder = StreamsBuilder()
        (
            builder.stream(source, key_serde=String(), value_serde=Float())
            .group_by_key()
            .windowed_by(WINDOWS["session"])
            .sum(name=STORE)
            .suppress(until_window_closes(), name=BUFFER)
            .to_stream()
            .select_key(lambda window, _: window.key)
            .to(sink, key_serde=String(), value_serde=Float())
        )
        app = run_app(builder, application_id=app_id, **core_path(path))
        _wait_committed(kafka_bootstrap, app_id, source, ends)
        app.close()
        changelog = [m.value() for m in _read(kafka_bootstrap, changelog_topic(app_id, STORE))]
        output = [
            m.key() + m.value() for m in _read(kafka_bootstrap, sink) if not is_control_record(m)
        ]
        outputs[path] = sorted(output)
        nans = [v for v in changelog + output if v and math.isnan(_double(v))]
        assert len(nans) > 10, path
        assert {v[-8:] for v in nans} == {_NAN}, path
    assert outputs["native"] == outputs["chain"]


def _double(value: bytes) -> float:
    """A record's value's last eight bytes, as a double."""
    return float(struct.unpack(">d", value[-8:])[0])

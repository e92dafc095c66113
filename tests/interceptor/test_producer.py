"""Producer-side progress control against a real broker."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.serialization import StringSerializer
from prometheus_client import CollectorRegistry, generate_latest

from interceptor import Producer, SerializingProducer
from progress_control.protocol import (
    CONTROL_HEADER,
    DEFAULT_SENTINEL_KEY,
    is_control_record,
    parse_control_headers,
)
from progress_control.settings import ConfigurationError
from progress_control.ticks.activity import AckEntry
from progress_control.ticks.activity_report import PartitionReport, decode_report
from progress_control.trust import ControlRecordValidator, TrustPolicy, Verdict
from progress_control_apps.dev.broker import EmbeddedKafkaBroker
from tests.helpers import (
    TopicReader,
    exposed_metrics,
    ticks_by_partition,
    undocumented_metrics,
    unique_name,
    wait_for,
)
from tests.paths import APPS

pytestmark = pytest.mark.broker

APP = APPS / "clicks_app.py"
CLI = [sys.executable, "-m", "progress_control_apps.cli"]

ACK_RECORDING = "PROGRESS_CONTROL_ACK_RECORDING"


@pytest.fixture(autouse=True, scope="module", params=["native", "python"])
def ack_recording(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs on both ack paths: the librdkafka plugin and the Python callbacks.
    ``native`` fails (not falls back) when the plugin is unavailable."""
    before = os.environ.get(ACK_RECORDING)
    os.environ[ACK_RECORDING] = request.param
    try:
        yield str(request.param)
    finally:
        if before is None:
            del os.environ[ACK_RECORDING]
        else:
            os.environ[ACK_RECORDING] = before


# The instance's class: with the plugin recording acks, librdkafka's methods as they are.
PRODUCER_CLASSES = {"interceptor.producer.Producer", "interceptor.producer._NativeAcksProducer"}


def last_ack(producer: Producer | SerializingProducer, topic: str, partition: int) -> AckEntry:
    """``(data timestamp ms, monotonic ack time)`` of a partition's last recorded ack, on
    either path (the native one drained first, as the scheduler does before deciding)."""
    progress = producer.progress_control
    assert progress is not None
    progress.drain_acks()
    progress.commit_acks()
    source, ack = progress._activity.latest[(topic, partition)]
    return progress._activity.data_timestamp(source, ack), ack


FAST = {
    "progress.control.start.ms": 400,
    "progress.control.backoff.ms": 100,
    "progress.control.backoff.exponential": False,
    "progress.control.max.records": 3,
}


def test_idle_partitions_get_capped_ticks_and_resume_after_data(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("idle", partitions=4)
    reader = reader_for(topic, 4)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, **FAST})
    stop_busy = threading.Event()

    def keep_busy() -> None:  # partitions 0 and 1 never go idle while this runs
        while not stop_busy.is_set():
            for partition in (0, 1):
                producer.produce(topic, b"busy", b"k", partition=partition)
            producer.poll(0)
            stop_busy.wait(0.05)

    busy = threading.Thread(target=keep_busy)
    try:
        for partition in (2, 3):
            producer.produce(topic, b"first", b"k", partition=partition)
        busy.start()
        ticks = wait_for(
            lambda: (t := reader.ticks()) and ticks_by_partition(t) == {2: 3, 3: 3} and t,
            timeout_s=20,
            message="three ticks on each idle partition",
        )
        reader.read(quiet_s=1.0)  # the cap holds: nothing more arrives, and none on 0 or 1
        assert ticks_by_partition(reader.ticks()) == {2: 3, 3: 3}

        data = {m.partition(): m for m in reader.records if not is_control_record(m)}
        source_id = producer.progress_control.settings.source_id  # type: ignore[union-attr]
        for tick in ticks:
            assert tick.key() == DEFAULT_SENTINEL_KEY
            assert tick.value() is None
            [(name, _)] = tick.headers() or []
            assert name == CONTROL_HEADER
            marker = parse_control_headers(tick.headers())
            assert marker is not None
            assert marker.source_id == source_id
            # Extrapolated from the partition's last data record, never above wall clock (nor
            # above the busy partitions' records in flight: test_in_flight.py).
            last_data = data[tick.partition()].timestamp()[1]
            assert last_data < tick.timestamp()[1] <= int(time.time() * 1000)
        markers = [parse_control_headers(t.headers()) for t in ticks]
        assert sorted(m.sequence for m in markers if m) == list(range(6))

        # New data on partition 2 resets it: three more ticks follow once it is idle again.
        producer.produce(topic, b"again", b"k", partition=2)
        wait_for(
            lambda: ticks_by_partition(reader.ticks()).get(2) == 6,
            timeout_s=20,
            message="ticks resume on partition 2",
        )
        stop_busy.set()
        busy.join()
        # Once the busy partitions stop, they are ticked too.
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 3, 1: 3, 2: 6, 3: 3},
            timeout_s=20,
            message="ticks on the partitions that stopped",
        )
        metrics = wait_for(
            lambda: (m := producer.progress_metrics()) and m.ticks_sent == 15 and m,
            message="delivery reports of all ticks",
        )
        assert (metrics.ticks_failed, metrics.ticks_skipped) == (0, 0)
        assert metrics.partitions_idle == 4
        assert set(metrics.last_tick_ms) == {(topic, p) for p in range(4)}
    finally:
        stop_busy.set()
        if busy.is_alive():
            busy.join()
        producer.close()


def test_every_user_callback_still_fires(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("callbacks", partitions=2)
    seen: dict[str, list[tuple[object, int | None, threading.Thread]]] = {"config": [], "call": []}

    def config_cb(err: object, msg: Message) -> None:
        seen["config"].append((err, msg.offset(), threading.current_thread()))

    def call_cb(err: object, msg: Message) -> None:
        seen["call"].append((err, msg.offset(), threading.current_thread()))

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "on_delivery": config_cb, **FAST})
    try:
        for i in range(10):
            producer.produce(topic, b"v", b"k", partition=i % 2)
        for i in range(5):
            producer.produce(topic, b"v", b"k", i % 2, call_cb)  # positional callback
        for i in range(5):
            producer.produce(topic, value=b"v", partition=i % 2, callback=call_cb)  # legacy name
        assert producer.flush(10) == 0
    finally:
        producer.close()
    assert len(seen["config"]) == 10
    assert len(seen["call"]) == 10  # a per-call callback replaces the config one, as in librdkafka
    assert all(err is None for err, _, _ in seen["config"] + seen["call"])
    assert {thread for _, _, thread in seen["config"] + seen["call"]} == {threading.main_thread()}


def test_produce_batch_acks_are_recorded_through_the_applications_callbacks(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("batch-acks", partitions=3)
    seen: dict[str, list[bytes | None]] = {"batch": [], "own": []}

    def batch_callback(err: object, msg: Message) -> None:
        assert err is None
        seen["batch"].append(msg.value())

    def own_callback(err: object, msg: Message) -> None:
        assert err is None
        seen["own"].append(msg.value())

    producer = Producer({"bootstrap.servers": kafka_bootstrap, **FAST})
    try:
        # Partition 0: the batch-level callback; partition 1: a message's own; partition 2: none.
        before_ms = int(time.time() * 1000)
        assert producer.produce_batch(topic, [{"value": b"a"}], 0, on_delivery=batch_callback) == 1
        own = {"value": b"b", "callback": own_callback}
        assert producer.produce_batch(topic, [own], 1) == 1
        assert own["callback"] is own_callback  # the caller's dict is given back as it was
        assert producer.produce_batch(topic, [{"value": b"c"}], 2) == 1
        assert producer.flush(10) == 0
        for partition in range(3):  # batch mode takes no timestamps: each is the produce time
            assert last_ack(producer, topic, partition)[0] >= before_ms
    finally:
        producer.close()
    assert seen == {"batch": [b"a"], "own": [b"b"]}


def test_acks_are_recorded_with_and_without_an_application_callback(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("acks", partitions=2)
    seen: list[tuple[object, bytes | None]] = []

    def callback(err: object, msg: Message) -> None:
        seen.append((err, msg.value()))
        if msg.value() == b"boom":
            raise RuntimeError("the application's callback failed")

    plain = Producer({"bootstrap.servers": kafka_bootstrap, **FAST})
    app = Producer(
        {"bootstrap.servers": kafka_bootstrap, "on_delivery": callback, "linger.ms": 10_000, **FAST}
    )
    try:
        # No callback of its own: acks are recorded (natively when they happen, in Python when
        # the flush that served them ran).
        before = time.monotonic()
        for partition in (0, 1):
            plain.produce(topic, b"v", partition=partition, timestamp=1_000 + partition)
        assert plain.flush(10) == 0
        after = time.monotonic()
        for partition in (0, 1):
            timestamp, ack = last_ack(plain, topic, partition)
            assert timestamp == 1_000 + partition
            assert before <= ack <= after

        # The application's callback gets every report, errors included; errors are not acks.
        app.produce(topic, b"purged", partition=0, timestamp=2_000)
        app.purge()
        app.poll(5)
        app.produce(topic, b"ok", partition=0, timestamp=3_000)
        assert app.flush(10) == 0
        assert last_ack(app, topic, 0)[0] == 3_000
        # An exception in it still reaches the caller, as with a plain producer; the ack counts.
        app.produce(topic, b"boom", partition=0, timestamp=4_000)
        with pytest.raises(RuntimeError, match="application's callback failed"):
            app.flush(10)
        assert last_ack(app, topic, 0)[0] == 4_000
    finally:
        plain.close()
        app.close()
    [(purge_error, _), *rest] = seen
    assert purge_error is not None
    assert rest == [(None, b"ok"), (None, b"boom")]


def test_serializing_producer_gets_ticks(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("serializing", partitions=1)
    reader = reader_for(topic, 1)
    delivered: list[Message] = []
    producer = SerializingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "key.serializer": StringSerializer(),
            "value.serializer": StringSerializer(),
            **FAST,
        }
    )
    try:
        producer.produce(
            topic, key="user-1", value="click", on_delivery=lambda e, m: delivered.append(m)
        )
        producer.flush(10)
        wait_for(lambda: len(reader.ticks()) == 3, timeout_s=20, message="three ticks")
    finally:
        producer.close()
    assert len(delivered) == 1
    data = [m for m in reader.records if not is_control_record(m)]
    assert [(m.key(), m.value()) for m in data] == [(b"user-1", b"click")]


def _app_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env.update(
        PROGRESS_CONTROL_START_MS="300",
        PROGRESS_CONTROL_BACKOFF_MS="100",
        PROGRESS_CONTROL_MAX_RECORDS="2",
        PYTHONPATH=os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")]),
    )
    env[ACK_RECORDING] = os.environ[ACK_RECORDING]  # this module's path, in the app too
    return env | settings


def _run_app(*args: str, env: dict[str, str], timeout: float = 60) -> dict[str, object]:
    result = subprocess.run(
        [*CLI, "run", "--", sys.executable, str(APP), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def test_unmodified_app_gets_ticks_under_progress_control_run(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("zero-code", partitions=2)
    reader = reader_for(topic, 2)
    summary = _run_app(
        kafka_bootstrap,
        topic,
        "--partitions",
        "0,1",
        "--records",
        "20",
        "--linger-s",
        "30",
        "--until-ticks",
        "4",
        env=_app_env(),
    )
    assert summary["producer_class"] in PRODUCER_CLASSES
    assert summary["ack_recording"] == os.environ[ACK_RECORDING]
    assert summary["delivered"] == 20  # the app's own on_delivery saw every record
    assert summary["failed"] == 0
    assert summary["ticks_sent"] == 4
    wait_for(
        lambda: ticks_by_partition(reader.ticks()) == {0: 2, 1: 2}, message="two per partition"
    )


_AIO_APP = """
import asyncio, json, sys
import confluent_kafka
from confluent_kafka.aio import AIOProducer

async def main(bootstrap, topic):
    producer = AIOProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered = await asyncio.gather(
        *[await producer.produce(topic, value=b"v", key=b"k", partition=0) for _ in range(10)]
    )
    await producer.flush()
    inner = producer._producer  # the client AIOProducer made with confluent_kafka.Producer(...)
    while inner.progress_metrics().ticks_sent < 2:  # idle now: ticks follow
        await asyncio.sleep(0.1)
    await producer.close()
    print(json.dumps({"delivered": len(delivered), "inner": type(inner).__module__}))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("confluent_kafka.aio") is None,
    reason="confluent_kafka.aio came in confluent-kafka 2.13.0 (the core allows 2.12)",
)
def test_an_asyncio_app_on_aio_producer_gets_ticks_under_progress_control_run(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    """confluent-kafka's ``AIOProducer`` makes its client with ``confluent_kafka.Producer(...)``
    when it is created, so under ``progress-control run`` (or the autoload) that client is the
    instrumented one: its acks are recorded (``produce_batch``, as the AIOProducer sends) and
    its idle partitions ticked."""
    topic = create_topic("aio")
    reader = reader_for(topic, 1)
    result = subprocess.run(
        [*CLI, "run", "--", sys.executable, "-c", _AIO_APP, kafka_bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=120,
        env=_app_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary == {"delivered": 10, "inner": "interceptor.producer"}
    wait_for(lambda: len(reader.ticks()) == 2, message="the AIOProducer's ticks")
    assert len([m for m in reader.records if not is_control_record(m)]) == 10


def test_transactional_app_keeps_committing_with_ticks_on(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("transactional", partitions=2)
    reader = reader_for(topic, 2)  # read_committed: only committed data is visible
    summary = _run_app(
        kafka_bootstrap,
        topic,
        "--partitions",
        "0,1",
        "--records",
        "10",
        "--linger-s",
        "30",
        "--until-ticks",
        "4",
        "--transactional",
        env=_app_env(),
    )
    assert summary["delivered"] == 10
    assert summary["ticks_sent"] == 4
    wait_for(
        lambda: len([m for m in reader.read() if not is_control_record(m)]) == 10,
        message="the committed transaction's records",
    )
    wait_for(lambda: ticks_by_partition(reader.ticks()) == {0: 2, 1: 2}, message="ticks")


def test_broker_outage_never_blocks_the_app(tmp_path: Path, ack_recording: str) -> None:
    if ack_recording == "python":
        # What an outage exercises (the tick producer, bounded flushes) is the same on both
        # ack paths; its own broker and the app's exit take 18 s, so it runs once.
        pytest.skip("the outage runs on the native ack path only")
    broker = EmbeddedKafkaBroker().start()
    topic = unique_name("outage")
    process = subprocess.Popen(
        [
            *CLI,
            "run",
            "--",
            sys.executable,
            str(APP),
            broker.bootstrap_servers,
            topic,
            "--records",
            "80",
            "--interval-s",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_app_env(),
    )
    probe = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "probe"})

    def records_on_broker() -> int:
        try:
            return int(probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=1)[1])
        except KafkaException:  # the app's first produce has not auto-created the topic yet
            return 0

    try:
        # Let the app deliver some records to the live broker, then take the broker away.
        wait_for(lambda: records_on_broker() > 5, message="the app's first records")
        probe.close()
        broker.stop()
        stdout, stderr = process.communicate(timeout=60)
    finally:
        broker.stop()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["producer_class"] in PRODUCER_CLASSES
    assert summary["max_produce_s"] < 1.0  # produce() stays a local enqueue during the outage


def test_invalid_settings_fail_at_construction_naming_the_key(kafka_bootstrap: str) -> None:
    with pytest.raises(ConfigurationError, match=r"progress\.control\.backoff\.ms"):
        Producer({"bootstrap.servers": kafka_bootstrap, "progress.control.backoff.ms": "soon"})


def test_invalid_env_settings_stop_progress_control_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [*CLI, "run", "--", sys.executable, "-c", "print('app ran')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_app_env(PROGRESS_CONTROL_START_MS="-5"),
        check=False,
    )
    assert result.returncode == 2
    assert "progress.control.start.ms (env PROGRESS_CONTROL_START_MS)" in result.stderr
    assert "app ran" not in result.stdout


def test_report_mode_ships_acks_to_the_sidecar_instead_of_ticking(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("report", partitions=2)
    reader = reader_for(topic, 2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sidecar:
        sidecar.bind(("127.0.0.1", 0))
        sidecar.settimeout(10)
        address = f"127.0.0.1:{sidecar.getsockname()[1]}"
        producer = Producer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "progress.control.mode": "report",
                "progress.control.report.address": address,
                "progress.control.report.interval.ms": 50,
                "progress.control.source.id": "reporting-app",
                **FAST,
            }
        )
        try:
            before_ms = int(time.time() * 1000)
            producer.produce(topic, b"v", b"k", partition=0, timestamp=1_000)
            producer.produce(topic, b"v", b"k", partition=1)
            assert producer.flush(10) == 0
            seen: dict[int, PartitionReport] = {}
            while len(seen) < 2:
                report = decode_report(sidecar.recv(65_536))
                assert report.source == "reporting-app"
                seen.update({p.partition: p for p in report.partitions if p.topic == topic})
        finally:
            producer.close()
    assert seen[0].last_timestamp_ms == 1_000  # the record's own timestamp
    assert seen[1].last_timestamp_ms >= before_ms
    assert all(before_ms <= p.last_ack_ms <= int(time.time() * 1000) for p in seen.values())
    reader.read(quiet_s=1.0)  # well past start.ms: still no tick, the sidecar's job now
    assert reader.ticks() == []


def test_prometheus_collector_exposes_the_counters(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("prometheus")
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "progress.control.source.id": "prom",
            "progress.control.metrics.per.partition": True,
            **FAST,
        }
    )
    try:
        producer.produce(topic, b"v", b"k", partition=0)
        producer.flush(10)
        wait_for(
            lambda: (m := producer.progress_metrics()) and m.ticks_sent == 3,
            timeout_s=20,
            message="three acknowledged ticks",
        )
        registry = CollectorRegistry()
        collector = producer.progress_collector()
        assert collector is not None
        registry.register(collector)
        text = generate_latest(registry).decode()
    finally:
        producer.close()
    assert 'progress_control_ticks_sent_total{source="prom"} 3.0' in text
    assert undocumented_metrics(exposed_metrics(text)) == []
    assert 'progress_control_partitions_idle{source="prom"} 1.0' in text
    assert (
        f'progress_control_last_tick_timestamp_seconds{{partition="0",source="prom",topic="{topic}"}}'
        in text
    )


def test_disabled_progress_control_is_a_plain_producer(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("disabled")
    reader = reader_for(topic, 1)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "progress.control.enabled": False, **FAST}
    )
    producer.produce(topic, b"v", b"k")
    producer.flush(10)
    assert producer.progress_control is None
    assert producer.progress_metrics() is None
    reader.read(quiet_s=1.0)
    assert reader.ticks() == []
    producer.close()


def test_signed_ticks_verify_and_unsigned_ticks_stay_v1(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("signed", partitions=2)
    reader = reader_for(topic, 2)
    secret = "interceptor-signing-secret"  # noqa: S105 - a test value
    base = {"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, **FAST}
    signed = Producer(
        {
            **base,
            "progress.control.signing.key.id": "ops-1",
            "progress.control.signing.key.secret": secret,
        }
    )
    unsigned = Producer(base)
    try:
        signed.produce(topic, b"v", b"k", partition=0)
        unsigned.produce(topic, b"v", b"k", partition=1)
        assert signed.flush(10) == unsigned.flush(10) == 0
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 3, 1: 3},
            timeout_s=20,
            message="three ticks from each producer",
        )
    finally:
        signed.close()
        unsigned.close()
    ticks = reader.ticks()
    keyed = ControlRecordValidator(TrustPolicy(verification_keys={"ops-1": secret.encode()}))
    wrong = ControlRecordValidator(TrustPolicy(verification_keys={"ops-1": b"another-secret-16b"}))
    open_reader = ControlRecordValidator(TrustPolicy())  # no keys: v1 and v2 both accepted
    for tick in ticks:
        marker = parse_control_headers(tick.headers())
        assert marker is not None
        args = (topic, tick.partition() or 0, tick.timestamp()[1], tick.headers())
        assert open_reader.check(*args) is Verdict.ACCEPTED
        if tick.partition() == 0:
            assert (marker.version, marker.key_id) == (2, "ops-1")
            assert keyed.check(*args) is Verdict.ACCEPTED
            assert wrong.check(*args) is Verdict.BAD_SIGNATURE
        else:
            assert (marker.version, marker.key_id, marker.mac) == (1, None, None)
            assert keyed.check(*args) is Verdict.UNSIGNED
    # A signed tick moved to another partition no longer verifies.
    tick = next(t for t in ticks if t.partition() == 0)
    assert keyed.check(topic, 1, tick.timestamp()[1], tick.headers()) is Verdict.BAD_SIGNATURE

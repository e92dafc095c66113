"""The sidecar against a real broker: broker watch, reports, replicas, HTTP, signals, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from confluent_kafka import Producer as PlainProducer
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control.protocol import parse_control_headers
from progress_control.settings import ConfigurationError
from progress_control.ticks.activity_report import (
    ActivityReport,
    PartitionReport,
    decode_report,
    encode_reports,
)
from progress_control.trust import ControlRecordValidator, SigningKey, TrustPolicy, Verdict
from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker
from sidecar.service import ProgressControlSidecar
from sidecar.settings import SidecarSettings
from tests.helpers import (
    TopicReader,
    exposed_metrics,
    ticks_by_partition,
    undocumented_metrics,
    unique_name,
    wait_for,
)
from tests.interceptor.test_producer import APP, CLI
from tests.sidecar.process import dead_port, report_flood, sidecar_process

pytestmark = pytest.mark.broker

FAST = {
    "start.ms": 600,
    "backoff.ms": 200,
    "backoff.exponential": False,
    "max.records": 3,
    "watch.interval.ms": 200,
    "jitter.ms": 0,
    "http.port": 0,
    "report.listen": "127.0.0.1:0",
}


def sidecar_settings(bootstrap: str, **overrides: Any) -> SidecarSettings:
    values = {**FAST, **overrides}
    return SidecarSettings.from_config(
        {"progress.control.kafka": {"bootstrap.servers": bootstrap}}
        | {f"progress.control.{key}": value for key, value in values.items()}
    )


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def keep_writing(bootstrap: str, topic: str, partitions: tuple[int, ...]) -> Callable[[], None]:
    """A plain (uninstrumented) producer writing to ``partitions`` until the returned stop()."""
    producer = PlainProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for partition in partitions:
                producer.produce(topic, b"busy", b"k", partition=partition)
            producer.poll(0)
            stop.wait(0.05)
        producer.flush(10)

    thread = threading.Thread(target=run)
    thread.start()

    def stop_writing() -> None:
        stop.set()
        thread.join()

    return stop_writing


def test_broker_watch_ticks_exactly_the_idle_partitions(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("watch", partitions=4)
    reader = reader_for(topic, 4)
    stop_writing = keep_writing(kafka_bootstrap, topic, (0, 1))
    try:
        settings = sidecar_settings(  # start.ms well above any stall of the busy writer
            kafka_bootstrap, **{"topics.include": topic, "source.id": "watcher", "start.ms": 1500}
        )
        with ProgressControlSidecar(settings) as sidecar:
            # Data after the sidecar's first look: a new idle period, seen as it starts.
            wait_for(sidecar.is_connected, message="the sidecar's first look at the broker")
            first = PlainProducer({"bootstrap.servers": kafka_bootstrap})
            for partition in (2, 3):
                first.produce(topic, b"first", b"k", partition=partition)
            first.flush(10)
            wait_for(
                lambda: ticks_by_partition(reader.ticks()) == {2: 3, 3: 3},
                timeout_s=30,
                message="three ticks on each idle partition",
            )
            reader.read(quiet_s=1.0)
            assert ticks_by_partition(reader.ticks()) == {2: 3, 3: 3}
            assert sidecar.is_ready()
            assert sidecar.is_connected()
    finally:
        stop_writing()
    markers = [parse_control_headers(t.headers()) for t in reader.ticks()]
    assert {m.source_id for m in markers if m} == {"watcher"}
    assert {(m.version, m.key_id) for m in markers if m} == {(1, None)}  # no key: unsigned, v1


def test_the_idle_gauge_counts_no_busy_partition_whose_tick_data_superseded(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    """The broker watched less often than start.ms: a busy partition's tick falls due before
    the watch sees its new data, and the end-offset check finds it superseded. Only the two
    partitions that really got ticks count as idle, at every scrape."""
    topic = create_topic("idle-gauge", partitions=4)
    reader = reader_for(topic, 4)
    stop_writing = keep_writing(kafka_bootstrap, topic, (0, 1))
    # start.ms above any stall of the busy writer (its ticks are all superseded), the watch
    # interval well above start.ms.
    overrides = {"topics.include": topic, "source.id": "gauge", "start.ms": 600}
    settings = sidecar_settings(kafka_bootstrap, **overrides, **{"watch.interval.ms": 3000})
    try:
        with ProgressControlSidecar(settings) as sidecar:
            wait_for(sidecar.is_connected, message="the sidecar's first look at the broker")
            produce_one(kafka_bootstrap, topic, range(2, 4))

            def idle() -> float | None:
                return sidecar.registry.get_sample_value(
                    "progress_control_partitions_idle", {"source": "gauge"}
                )

            def superseded() -> float:
                value = sidecar.registry.get_sample_value("progress_control_ticks_superseded_total")
                return value or 0

            wait_for(
                lambda: set(ticks_by_partition(reader.ticks())) == {2, 3},
                timeout_s=30,
                message="ticks on the quiet partitions",
            )
            before = superseded()
            samples = []
            until = time.monotonic() + 4  # more than one watch interval
            while time.monotonic() < until:
                samples.append(idle())
                time.sleep(0.05)
            assert superseded() > before  # the busy partitions' ticks fell due meanwhile
    finally:
        stop_writing()
    assert set(samples) == {2}
    reader.read(quiet_s=0.5)
    assert set(ticks_by_partition(reader.ticks())) == {2, 3}


@pytest.mark.parametrize("transport", ["unix", "udp"])
def test_report_mode_app_gets_ticks_from_the_sidecar_only(
    transport: str,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    topic = create_topic("reported", partitions=2)
    reader = reader_for(topic, 2)
    # The chart's setting, in a tmp dir: the same value for the sidecar and the app.
    listen = f"unix://{tmp_path}/reports.sock" if transport == "unix" else "127.0.0.1:0"
    settings = sidecar_settings(
        kafka_bootstrap,
        **{"watch.enabled": False, "source.id": "sidecar-1", "report.listen": listen},
    )
    with ProgressControlSidecar(settings) as sidecar:
        if sidecar.report_address is not None:
            host, port = sidecar.report_address
            listen = f"{host}:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
        env |= {
            "PROGRESS_CONTROL_MODE": "report",
            "PROGRESS_CONTROL_REPORT_ADDRESS": listen,
            "PROGRESS_CONTROL_REPORT_INTERVAL_MS": "100",
            "PROGRESS_CONTROL_START_MS": "300",
            "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")]),
        }
        app = [*CLI, "run", "--", sys.executable, str(APP), kafka_bootstrap, topic]
        result = subprocess.run(
            [*app, "--partitions", "0,1", "--records", "10", "--linger-s", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["ticks_sent"] == 0  # the app never ticks
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 3, 1: 3},
            timeout_s=30,
            message="the sidecar's ticks",
        )
    markers = [parse_control_headers(t.headers()) for t in reader.ticks()]
    assert {m.source_id for m in markers if m} == {"sidecar-1"}


def test_three_replicas_send_about_as_many_ticks_as_one(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    def run(replicas: int) -> int:
        topic = create_topic("replicas", partitions=4)
        reader = reader_for(topic, 4)
        with ExitStack() as stack:
            sidecars = []
            for replica in range(replicas):
                # Replicas draw a random jitter; here they are spread deterministically (300 ms
                # apart) so the test does not depend on the draw.
                settings = sidecar_settings(
                    kafka_bootstrap,
                    **{"topics.include": topic, "start.ms": 600 + 300 * replica},
                )
                sidecars.append(stack.enter_context(ProgressControlSidecar(settings)))
            # The data comes once every replica has looked: all see its idle period start.
            wait_for(lambda: all(s.is_connected() for s in sidecars), message="replicas connected")
            producer = PlainProducer({"bootstrap.servers": kafka_bootstrap})
            for partition in range(4):
                producer.produce(topic, b"v", b"k", partition=partition)
            producer.flush(10)
            # A deadline for a starved machine (four test workers on two cores missed 30 s).
            wait_for(lambda: len(reader.ticks()) >= 12, timeout_s=90, message="ticks")
            reader.read(quiet_s=2.0)  # every replica's schedule is over by now
        return len(reader.ticks())

    one, three = run(1), run(3)
    assert one == 12
    assert three <= 1.1 * one


def test_readiness_is_the_sidecars_own_and_sigterm_after_the_broker_went_away(
    tmp_path: Path,
) -> None:
    socket_path = tmp_path / "reports.sock"
    broker_port = dead_port()  # no broker behind it yet
    dead = f"127.0.0.1:{broker_port}"
    with sidecar_process(dead, REPORT_LISTEN=f"unix://{socket_path}") as (process, port):
        assert get(port, "/healthz") == (200, "ok\n")
        # Broker unreachable: still ready (readiness gates the app's pod), and it shows.
        assert get(port, "/readyz") == (200, "ready\n")
        status, metrics = get(port, "/metrics")
        assert status == 200
        assert "progress_control_broker_connected 0.0" in metrics
        # Series a restart continues: the host's name, not the default source id's pid and
        # random part; and no _created series beside the counters.
        assert f'progress_control_ticks_sent_total{{source="{socket.gethostname()}"}}' in metrics
        assert "_created" not in metrics
        # docs/operations/metrics.md names every one.
        assert undocumented_metrics(exposed_metrics(metrics)) == []
        assert process.poll() is None  # retrying, not crash-looping
        # The broker comes up on that port: the sidecar connects.
        with EmbeddedKafkaBroker(BrokerSettings(port=broker_port)) as broker:
            assert broker.bootstrap_servers == dead
            wait_for(
                lambda: "progress_control_broker_connected 1.0" in get(port, "/metrics")[1],
                timeout_s=60,
                message="connected",
            )
            assert get(port, "/readyz") == (200, "ready\n")
        # ... and goes away again; reports keep coming; SIGTERM.
        with report_flood(str(socket_path)):
            wait_for(
                lambda: "progress_control_broker_connected 0.0" in get(port, "/metrics")[1],
                timeout_s=60,
                message="the broker seen gone",
            )
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
            assert time.monotonic() - started < 10.0


def test_forged_reports_on_the_unix_socket_are_counted(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = create_topic("forged", partitions=1)
    socket_path = tmp_path / "run" / "reports.sock"
    settings = sidecar_settings(
        kafka_bootstrap, **{"report.listen": f"unix://{socket_path}", "watch.enabled": False}
    )
    with ProgressControlSidecar(settings) as sidecar:
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o660
        assert sidecar.report_address is None
        port = sidecar.http.port
        wait_for(sidecar.is_connected, message="connected")
        assert get(port, "/readyz") == (200, "ready\n")
        now_ms = int(time.time() * 1000)
        ahead = PartitionReport(topic, 0, now_ms + 3_600_000, now_ms)  # dated an hour ahead
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as forger:
            for garbage in (b"not json", b'{"v": 1}', b"[" * 5000):
                forger.sendto(garbage, str(socket_path))
            for datagram in encode_reports(ActivityReport("forger", now_ms, (ahead,))):
                forger.sendto(datagram, str(socket_path))

        def counted() -> bool:
            metrics = get(port, "/metrics")[1]
            return (
                "progress_control_reports_malformed_total 3.0" in metrics
                and 'progress_control_activity_dropped_total{origin="report",'
                'reason="future-timestamp"} 1.0'
                in metrics
            )

        wait_for(counted, message="three malformed reports and one dated ahead counted")
        assert not sidecar.activity.latest  # nothing tracked: no tick will come of them
        assert sidecar.is_healthy()
    assert not socket_path.exists()


@pytest.mark.parametrize("allowed", ["self", "another user"])
def test_report_allowed_uids_reads_only_those_users_reports(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path, allowed: str
) -> None:
    topic = create_topic("uids", partitions=1)
    socket_path = tmp_path / "reports.sock"
    uid = os.getuid() if allowed == "self" else os.getuid() + 1
    settings = sidecar_settings(
        kafka_bootstrap,
        **{
            "report.listen": f"unix://{socket_path}",
            "report.allowed.uids": str(uid),
            "watch.enabled": False,
        },
    )
    with ProgressControlSidecar(settings) as sidecar:
        port = sidecar.http.port
        wait_for(sidecar.is_connected, message="connected")
        now_ms = int(time.time() * 1000)
        report = ActivityReport("app", now_ms, (PartitionReport(topic, 0, now_ms, now_ms),))
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            for datagram in encode_reports(report):
                sender.sendto(datagram, str(socket_path))
        if allowed == "self":
            wait_for(lambda: (topic, 0) in sidecar.activity.latest, message="report tracked")
        else:
            refused = (
                'progress_control_activity_dropped_total{origin="report",'
                'reason="sender-not-allowed"} 1.0'
            )
            wait_for(lambda: refused in get(port, "/metrics")[1], message="refusal counted")
            assert "progress_control_reports_received_total 0.0" in get(port, "/metrics")[1]
            assert not sidecar.activity.latest
    with pytest.raises(ValueError, match="report_allowed_uids needs a unix"):
        sidecar_settings(kafka_bootstrap, **{"report.allowed.uids": "0"})


def test_a_stale_socket_file_is_replaced_and_other_files_are_kept(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as previous:
        previous.bind(str(stale))  # a previous run's socket file, left behind
    mode = {"report.socket.mode": "600"}
    with ProgressControlSidecar(
        sidecar_settings(kafka_bootstrap, **{"report.listen": f"unix:{stale}"} | mode)
    ):
        assert stat.S_IMODE(stale.stat().st_mode) == 0o600
    regular = tmp_path / "not-a-socket"
    regular.write_text("keep me")
    with pytest.raises(FileExistsError, match="not a socket"):
        ProgressControlSidecar(
            sidecar_settings(kafka_bootstrap, **{"report.listen": f"unix://{regular}"})
        )
    assert regular.read_text() == "keep me"


def test_a_network_report_address_needs_the_opt_in(kafka_bootstrap: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": "x:1",
        "PROGRESS_CONTROL_REPORT_LISTEN": "0.0.0.0:7071",
    }
    started = time.monotonic()
    result = subprocess.run(
        [*CLI, "sidecar"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 2
    assert time.monotonic() - started < 10  # fails fast, before any broker request
    assert "PROGRESS_CONTROL_REPORT_LISTEN_ALLOW_NETWORK" in result.stderr
    # With the opt-in: accepted (and warned about).
    settings = sidecar_settings(
        kafka_bootstrap,
        **{"report.listen": "0.0.0.0:0", "report.listen.allow.network": True},
    )
    with ProgressControlSidecar(settings) as sidecar:
        assert sidecar.report_address is not None


def test_invalid_env_config_names_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": "x:1",
        "PROGRESS_CONTROL_WATCH_INTERVAL_MS": "often",
    }
    result = subprocess.run(
        [*CLI, "sidecar"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 2
    assert "PROGRESS_CONTROL_WATCH_INTERVAL_MS" in result.stderr
    with pytest.raises(ConfigurationError, match="PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS"):
        SidecarSettings.from_config({})


def produce_one(bootstrap: str, topic: str, partitions: range, timestamp_ms: int = 0) -> None:
    producer = PlainProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in partitions:
        producer.produce(topic, b"v", b"k", partition=partition, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def sidecar_ticks(reader: TopicReader, source_id: str) -> list[Message]:
    return [
        t
        for t in reader.ticks()
        if (m := parse_control_headers(t.headers())) and m.source_id == source_id
    ]


def test_sidecar_signs_ticks_with_the_mounted_secret(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    secret = "sidecar-signing-secret-0123"  # noqa: S105 - a test value
    (tmp_path / "progress.control.signing.key.secret").write_text(secret + "\n")
    topic = create_topic("signed", partitions=1)
    reader = reader_for(topic, 1)
    settings = sidecar_settings(
        kafka_bootstrap,
        **{
            "topics.include": topic,
            "kafka.secrets.dir": str(tmp_path),
            "signing.key.id": "sidecar-1",
            "source.id": "signer",
        },
    )
    assert settings.kafka == {"bootstrap.servers": kafka_bootstrap}  # not a Kafka property
    assert secret not in repr(settings)
    with ProgressControlSidecar(settings) as sidecar:
        wait_for(sidecar.is_connected, message="connected")
        produce_one(kafka_bootstrap, topic, range(1))
        wait_for(lambda: len(reader.ticks()) == 3, message="three ticks")
    ticks = reader.ticks()
    keyed = ControlRecordValidator(TrustPolicy(verification_keys={"sidecar-1": secret.encode()}))
    for tick in ticks:
        marker = parse_control_headers(tick.headers())
        assert marker is not None
        assert (marker.version, marker.key_id) == (2, "sidecar-1")
        verdict = keyed.check(topic, 0, tick.timestamp()[1], tick.headers())
        assert verdict is Verdict.ACCEPTED


def test_sidecar_signing_follows_the_shared_rules_and_its_secrets_dir(tmp_path: Path) -> None:
    mounted = "mounted-signing-secret-0123"
    explicit = "explicit-signing-secret-4567"
    (tmp_path / "progress.control.signing.key.secret").write_text(mounted + "\n")
    dir_only = {"kafka.secrets.dir": str(tmp_path), "signing.key.id": "sidecar-1"}
    settings = sidecar_settings("x:1", **dir_only)
    assert settings.signing_key == SigningKey("sidecar-1", mounted.encode())
    # A secret given in the settings wins over the mounted file.
    explicit_settings = sidecar_settings("x:1", **dir_only, **{"signing.key.secret": explicit})
    assert explicit_settings.signing_key == SigningKey("sidecar-1", explicit.encode())
    # The shared rules, spelt as the sidecar's settings are: a mounted secret needs an id.
    with pytest.raises(ConfigurationError) as excinfo:
        sidecar_settings("x:1", **{"kafka.secrets.dir": str(tmp_path)})
    message = str(excinfo.value)
    assert "progress.control.signing.key.id (env PROGRESS_CONTROL_SIGNING_KEY_ID)" in message
    assert mounted not in message
    assert mounted not in repr(settings)
    assert settings.control_record_source().signing_key == settings.signing_key


def test_internal_and_system_topics_get_no_ticks_by_default(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    tag = unique_name("sys").replace("-", "")
    data = f"{tag}-clicks"
    internal = [
        f"{tag}-app-counts-changelog",
        f"{tag}-app-KSTREAM-AGGREGATE-0000000003-repartition",
        f"_confluent-{tag}",
        f"{tag}-connect-offsets",
        f"mm2-offsets.{tag}.internal",
        f"{tag}-app-membership",
    ]
    futures = kafka_admin.create_topics([NewTopic(t, 1, 1) for t in (data, *internal)])
    for future in futures.values():
        future.result(timeout=30)
    readers = {t: reader_for(t, 1) for t in (data, *internal)}
    settings = sidecar_settings(kafka_bootstrap, **{"topics.include": f".*{tag}.*"})
    with ProgressControlSidecar(settings) as sidecar:
        wait_for(sidecar.is_connected, message="connected")
        for topic in (data, *internal):
            produce_one(kafka_bootstrap, topic, range(1))
        wait_for(lambda: len(readers[data].ticks()) == 3, message="ticks on the data topic")
        # Ticks on the others would have been due at the same time as those: none came.
        assert {t: len(readers[t].ticks()) for t in internal} == dict.fromkeys(internal, 0)


def dropped(sidecar: ProgressControlSidecar, reason: str, origin: str = "report") -> float:
    labels = {"origin": origin, "reason": reason}
    return sidecar.registry.get_sample_value("progress_control_activity_dropped_total", labels) or 0


def test_spoofed_reports_are_dropped_counted_and_bounded(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("reported", partitions=6)
    excluded = unique_name("reported") + "-changelog"  # an internal topic name: filtered out
    kafka_admin.create_topics([NewTopic(excluded, 1, 1)])[excluded].result(timeout=30)
    reader = reader_for(topic, 6)
    settings = sidecar_settings(
        kafka_bootstrap,
        **{"watch.enabled": False, "max.tracked.partitions": 3, "source.id": "checker"},
    )
    with (
        ProgressControlSidecar(settings) as sidecar,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        wait_for(sidecar.is_connected, message="connected")

        def report(*partitions: tuple[str, int, int], source: str = "spoofer") -> None:
            send_report(sidecar, udp, partitions, source)

        now_ms = int(time.time() * 1000)
        report(
            (topic, 0, now_ms),  # the one real report
            (topic, 1, now_ms + 3_600_000),  # an hour ahead
            (topic, 2, -5),
            (unique_name("no-such-topic"), 0, now_ms),
            (topic, 99, now_ms),
            (excluded, 0, now_ms),
            source="app",
        )
        wait_for(lambda: ticks_by_partition(reader.ticks()) == {0: 3}, message="real ticks")
        reader.read(quiet_s=1.0)  # the spoofed ones were due at the same time: none came
        assert ticks_by_partition(reader.ticks()) == {0: 3}
        assert all(t.timestamp()[1] <= time.time() * 1000 for t in reader.ticks())
        reasons = ("future-timestamp", "negative-timestamp", "unknown-topic", "unknown-partition")
        wait_for(  # a topic missing from the sidecar's metadata waits for a refresh (<= 1 s)
            lambda: [dropped(sidecar, r) for r in (*reasons, "excluded-topic")] == [1] * 5,
            message="each spoofed report dropped for its reason",
        )

        # 20k made-up partitions: nothing tracked, nothing remembered per partition.
        now_ms = int(time.time() * 1000)
        report(*((topic, 6 + n, now_ms) for n in range(10_000)))
        report(*((f"spoofed-{n}", 0, now_ms) for n in range(10_000)))
        assert dropped(sidecar, "unknown-partition") == 10_001
        wait_for(
            lambda: dropped(sidecar, "unknown-topic") == 10_001,
            message="the unknown topics dropped (some after a metadata refresh)",
        )
        assert set(sidecar.activity.latest) == {(topic, 0)}
        assert sidecar._admission.parked == 0
        assert sidecar._admission.logged <= 10  # once per source and reason

        # Real partitions up to the bound (3 tracked), the rest dropped.
        now_ms = int(time.time() * 1000)
        report((topic, 3, now_ms), (topic, 4, now_ms), (topic, 5, now_ms), source="app")
        assert dropped(sidecar, "too-many-partitions") == 1
        assert set(sidecar.activity.latest) == {(topic, 0), (topic, 3), (topic, 4)}
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 3, 3: 3, 4: 3},
            message="ticks on the partitions within the bound",
        )


def send_report(
    sidecar: ProgressControlSidecar,
    udp: socket.socket,
    partitions: Iterable[tuple[str, int, int]],
    source: str,
) -> None:
    """Report ``(topic, partition, timestamp)`` acks as an interceptor would, and wait until the
    sidecar handled each datagram (so a flood never overflows the socket buffer)."""
    now_ms = int(time.time() * 1000)
    parts = tuple(PartitionReport(t, p, ts, now_ms) for t, p, ts in partitions)
    for datagram in encode_reports(ActivityReport(source, now_ms, parts)):
        handled = reports_received(sidecar) + len(decode_report(datagram).partitions)
        udp.sendto(datagram, sidecar.report_address or ("", 0))
        wait_for(lambda: reports_received(sidecar) >= handled, message="report handled")  # noqa: B023


def test_a_report_for_a_topic_newer_than_the_sidecars_metadata_counts(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    settings = sidecar_settings(
        kafka_bootstrap, **{"watch.enabled": False, "metadata.refresh.ms": 600_000}
    )
    with (
        ProgressControlSidecar(settings) as sidecar,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        wait_for(
            sidecar.is_connected, message="connected"
        )  # its metadata is read: before the topic
        topic = create_topic("brand-new", partitions=1)
        reader = reader_for(topic, 1)
        send_report(sidecar, udp, [(topic, 0, int(time.time() * 1000))], "app")
        wait_for(lambda: len(reader.ticks()) == 3, message="ticks once the topic is known")
        assert dropped(sidecar, "unknown-topic") == 0


def reports_received(sidecar: ProgressControlSidecar) -> float:
    """Reported partitions handled so far (admitted or dropped)."""
    return sidecar.registry.get_sample_value("progress_control_reports_received_total") or 0


def test_a_restarted_sidecar_sends_nothing_to_long_idle_partitions(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    old = create_topic("idle-for-hours", partitions=100)
    done = create_topic("schedule-done", partitions=20)
    fresh = create_topic("fresh", partitions=1)
    readers = {t: reader_for(t, n) for t, n in ((old, 100), (done, 20), (fresh, 1))}
    produce_one(kafka_bootstrap, old, range(100), int(time.time() * 1000) - 2 * 3_600_000)
    include = {"topics.include": f"{old},{done},{fresh}"}
    # One sidecar runs the whole (short) schedule of 20 partitions, then stops.
    with ProgressControlSidecar(
        sidecar_settings(kafka_bootstrap, **include, **{"source.id": "before"})
    ) as first:
        wait_for(first.is_connected, message="connected")
        produce_one(kafka_bootstrap, done, range(20))
        wait_for(lambda: len(readers[done].ticks()) == 60, message="the first sidecar's ticks")
    assert sidecar_ticks(readers[old], "before") == []  # 2 h idle at first sight: no tick

    # Its replacement finds 120 partitions past their schedules, and one new idle period.
    with ProgressControlSidecar(
        sidecar_settings(kafka_bootstrap, **include, **{"source.id": "after"})
    ) as second:
        wait_for(second.is_connected, message="connected")  # its first look resumed every partition
        resumed = second.registry.get_sample_value("progress_control_partitions_resumed_total")
        assert resumed == 120
        produce_one(kafka_bootstrap, fresh, range(1))
        wait_for(lambda: len(readers[fresh].ticks()) == 3, message="ticks on the fresh partition")
        # Ticks on the 120 would have been due at first sight, before those: none came.
        assert sidecar_ticks(readers[old], "after") == []
        assert sidecar_ticks(readers[done], "after") == []
        assert {second.activity.ticks_sent((old, p)) for p in range(100)} == {3}


def test_a_restarted_sidecar_continues_a_schedule_mid_way(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("mid-schedule", partitions=1)
    reader = reader_for(topic, 1)
    schedule = {"topics.include": topic, "start.ms": 500, "backoff.ms": 2000, "max.records": 6}
    with ProgressControlSidecar(
        sidecar_settings(kafka_bootstrap, **schedule, **{"source.id": "before"})
    ) as first:
        wait_for(first.is_connected, message="connected")
        produce_one(kafka_bootstrap, topic, range(1))
        wait_for(lambda: len(reader.ticks()) >= 2, message="the first ticks")
    before = len(sidecar_ticks(reader, "before"))
    with ProgressControlSidecar(
        sidecar_settings(kafka_bootstrap, **schedule, **{"source.id": "after"})
    ) as second:
        wait_for(
            lambda: second.activity.ticks_sent((topic, 0)) == 6,
            timeout_s=60,
            message="the schedule's end",
        )
    # Stopped: its last tick was flushed and acknowledged.
    sent = second.registry.get_sample_value(
        "progress_control_ticks_sent_total", {"source": "after"}
    )
    wait_for(lambda: len(sidecar_ticks(reader, "after")) == sent, message="ticks delivered")
    after = len(sidecar_ticks(reader, "after"))
    assert before >= 2
    assert after >= 1  # it continued...
    assert before + after <= 6  # ...where the schedule was, not from its start
    stamps = [t.timestamp()[1] for t in reader.ticks()]
    assert stamps == sorted(stamps)

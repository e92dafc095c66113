"""Native ack recording (interceptor/native.py, interceptor/_ackplugin.c): finding librdkafka,
loading the plugin, and what it records against a real broker."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message

from interceptor import Producer, native
from interceptor.settings import AckRecording
from progress_control.settings import ConfigurationError
from tests.helpers import TopicReader, ticks_by_partition, wait_for

FAST = {
    "progress.control.start.ms": 400,
    "progress.control.backoff.ms": 100,
    "progress.control.backoff.exponential": False,
    "progress.control.max.records": 2,
}

WHEEL_LIB = "/venv/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1"
MAPS = f"""\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1 /usr/bin/python3.11
7f0000000000-7f0000001000 r-xp 00000000 08:01 2 {WHEEL_LIB}
7f0000001000-7f0000002000 r--p 00001000 08:01 2 {WHEEL_LIB}
7f0000003000-7f0000004000 r-xp 00000000 08:01 3 /usr/lib/librdkafka++.so.1
7f0000005000-7f0000006000 rw-p 00000000 00:00 0 [heap]
7f0000006000-7f0000007000 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/librdkafka.so.1
"""

# ---- pure logic ----------------------------------------------------------------------------


def test_librdkafka_files_are_read_from_the_process_mappings() -> None:
    assert native.librdkafka_paths_in_maps(MAPS) == [
        "/venv/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1",
        "/usr/lib/x86_64-linux-gnu/librdkafka.so.1",
    ]
    assert native.librdkafka_paths_in_maps("") == []


def test_the_wheels_librdkafka_wins_when_several_are_mapped(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    package = Path("/venv/site-packages/confluent_kafka")
    maps.write_text(MAPS)
    assert native.find_librdkafka(maps, package) == (
        "/venv/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1"
    )
    # Only a system copy mapped (cimpl linked against it): that one.
    maps.write_text(MAPS.splitlines()[-1] + "\n")
    assert native.find_librdkafka(maps, package) == "/usr/lib/x86_64-linux-gnu/librdkafka.so.1"
    # Two copies, neither the wheel's: unclear, so no native recording.
    maps.write_text(MAPS.splitlines()[-1] + "\n" + MAPS.splitlines()[-1].replace("/usr", "/opt"))
    assert native.find_librdkafka(maps, package) is None


def test_without_proc_the_wheels_bundled_copy_is_used(tmp_path: Path) -> None:
    libs = tmp_path / "confluent_kafka.libs"
    libs.mkdir()
    (libs / "librdkafka-cafe.so.1").touch()
    missing = tmp_path / "no-proc"
    assert native.find_librdkafka(missing, tmp_path / "confluent_kafka") == str(
        libs / "librdkafka-cafe.so.1"
    )
    (libs / "librdkafka-beef.so.1").touch()  # two: unclear
    assert native.find_librdkafka(missing, tmp_path / "confluent_kafka") is None


def test_the_plugin_is_appended_to_the_users_plugins_before_its_table_property() -> None:
    config = {"plugin.library.paths": "/opt/a.so; /opt/b", "bootstrap.servers": "k:9092"}
    result = native.with_plugin(config, "/x/_ack.so", "progress.control.ack.table", 7)
    assert result["plugin.library.paths"] == "/opt/a.so; /opt/b;/x/_ack.so"
    keys = list(result)
    assert keys.index("plugin.library.paths") < keys.index("progress.control.ack.table")
    assert result["progress.control.ack.table"] == "7"
    assert config["plugin.library.paths"] == "/opt/a.so; /opt/b"  # the caller's dict untouched
    assert native.with_plugin({}, "/x/_ack.so", "p", 1)["plugin.library.paths"] == "/x/_ack.so"


def test_python_recording_never_loads_the_plugin_and_native_fails_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert native.native_acks(AckRecording.PYTHON) is None
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setattr(native, "_failure", "ImportError: built without a compiler")
    assert native.native_acks(AckRecording.AUTO) is None
    with pytest.raises(ConfigurationError, match="built without a compiler"):
        native.native_acks(AckRecording.NATIVE)


def test_a_producer_falls_back_to_python_when_the_plugin_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setattr(native, "_failure", "OSError: no librdkafka found")
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "progress.control.start.ms": 60_000})
    try:
        progress = producer.progress_control
        assert progress is not None
        assert progress.ack_recording == "python"
        assert type(producer) is Producer  # its own produce(), wrapping callbacks
        metrics = producer.progress_metrics()
        assert metrics is not None
        assert metrics.ack_recording == "python"
    finally:
        producer.close()


def test_the_plugin_is_available_here() -> None:
    # The dev install builds the extension; this says so loudly if it did not.
    assert native.unavailable_reason() is None


# ---- against the broker --------------------------------------------------------------------


def _native_producer(config: dict[str, object]) -> Producer:
    producer = Producer({**config, "progress.control.ack.recording": "native"})
    assert producer.progress_control is not None
    assert producer.progress_control.ack_recording == "native"
    return producer


@pytest.mark.broker
def test_acks_are_recorded_in_c_with_their_timestamps_and_ack_times(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("native-acks", partitions=3)
    producer = _native_producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    progress = producer.progress_control
    assert progress is not None
    assert progress.ack_table is not None
    try:
        # The producer's scheduler drains the table into its activity map every 250 ms: held
        # off (its drain waits on this lock) so that the table keeps every ack for this test (on
        # a starved machine the flush took longer, and the scheduler drained two partitions).
        with progress._drain_lock:
            assert producer.produce.__self__ is producer  # librdkafka's method: no Python frame
            assert type(producer.produce).__name__ == "builtin_function_or_method"
            before = time.monotonic()
            for i in range(9):
                producer.produce(topic, b"v", partition=i % 3, timestamp=10_000 + i)
            assert producer.flush(10) == 0
            after = time.monotonic()
            drained = progress.ack_table.drain()
            by_partition = {(t, p): rest for t, p, *rest in drained}
            assert set(by_partition) == {(topic, 0), (topic, 1), (topic, 2)}
            for partition in range(3):
                kind, timestamp, ack, acks = by_partition[(topic, partition)]
                assert kind == 1  # TIMESTAMP_CREATE_TIME
                assert timestamp == 10_006 + partition  # the last of the partition's three
                assert before <= ack <= after  # time.monotonic()'s clock
                assert acks == 3
            assert progress.ack_table.drain() == []  # only what changed since the last drain
            producer.produce(topic, b"v", partition=1, timestamp=20_000)
            assert producer.flush(10) == 0
            [(_, partition, _, timestamp, _, acks)] = progress.ack_table.drain()
            assert (partition, timestamp, acks) == (1, 20_000, 4)
            assert progress.ack_table.stats()["acks"] == 10
    finally:
        producer.close()


@pytest.mark.broker
def test_failed_deliveries_are_not_acks_and_the_users_callbacks_see_them(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("native-failures", partitions=1)
    reports: list[tuple[str | None, bytes | None, threading.Thread]] = []

    def on_delivery(err: object, msg: Message) -> None:
        reports.append((None if err is None else str(err), msg.value(), threading.current_thread()))

    producer = _native_producer(
        {"bootstrap.servers": kafka_bootstrap, "on_delivery": on_delivery, "linger.ms": 10_000}
    )
    progress = producer.progress_control
    assert progress is not None
    assert progress.ack_table is not None
    try:
        producer.produce(topic, b"purged", partition=0, timestamp=1_000)
        producer.purge()
        producer.poll(5)
        assert progress.ack_table.stats()["acks"] == 0
        producer.produce(topic, b"ok", partition=0, timestamp=2_000)
        assert producer.flush(30) == 0
        [(_, _, _, timestamp, _, acks)] = progress.ack_table.drain()
        assert (timestamp, acks) == (2_000, 1)
    finally:
        producer.close()
    values = [(err is None, value) for err, value, _ in reports]
    assert sorted(values, key=str) == sorted([(False, b"purged"), (True, b"ok")], key=str)
    assert {thread for _, _, thread in reports} == {threading.main_thread()}


@pytest.mark.broker
def test_producers_in_one_process_keep_separate_tables_and_get_their_ticks(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    topic = create_topic("native-two", partitions=2)
    reader = reader_for(topic, 2)
    first = _native_producer({"bootstrap.servers": kafka_bootstrap, **FAST})
    second = _native_producer({"bootstrap.servers": kafka_bootstrap, **FAST})
    try:
        first.produce(topic, b"v", partition=0)
        for _ in range(3):
            second.produce(topic, b"v", partition=1)
        assert first.flush(10) == second.flush(10) == 0
        wait_for(
            lambda: ticks_by_partition(reader.ticks()) == {0: 2, 1: 2},
            timeout_s=20,
            message="two ticks on each idle partition",
        )
        tables = [p.progress_control.ack_table for p in (first, second)]  # type: ignore[union-attr]
        assert [t.stats()["acks"] for t in tables if t is not None] == [1, 3]
        sources = {p.progress_control.settings.source_id for p in (first, second)}  # type: ignore[union-attr]
        assert len(sources) == 2
    finally:
        first.close()
        second.close()


_USER_PLUGIN = """
int conf_init_calls = 0;
int conf_init(void *conf, void **plug_opaquep, char *errstr, unsigned long errstr_size) {
    (void)conf; (void)errstr; (void)errstr_size;
    *plug_opaquep = 0;
    conf_init_calls++;
    return 0;
}
"""


@pytest.mark.broker
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the user's plugin")
def test_the_users_own_plugins_are_kept(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    source = tmp_path / "user_plugin.c"
    source.write_text(_USER_PLUGIN)
    library = tmp_path / "user_plugin.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    loaded = ctypes.CDLL(str(library))  # the same copy librdkafka will dlopen
    calls = ctypes.c_int.in_dll(loaded, "conf_init_calls")
    topic = create_topic("native-user-plugin", partitions=1)
    producer = _native_producer(
        {"bootstrap.servers": kafka_bootstrap, "plugin.library.paths": str(library)}
    )
    progress = producer.progress_control
    assert progress is not None
    assert progress.ack_table is not None
    try:
        assert calls.value == 1
        producer.produce(topic, b"v", partition=0)
        assert producer.flush(10) == 0
        assert progress.ack_table.stats()["acks"] == 1
    finally:
        producer.close()

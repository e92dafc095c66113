"""Report mode's sender (interceptor/report.py) over a real UDP or Unix socket standing in for
the sidecar (no broker)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from interceptor.report import ReportSender
from progress_control.ticks.activity import PartitionActivity
from progress_control.ticks.activity_report import ActivityReport, PartitionReport, decode_report
from progress_control.ticks.metrics import ProgressControlMetrics
from progress_control.ticks.schedule import TickSchedule


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sidecar() -> Iterator[socket.socket]:
    """A UDP socket on an ephemeral localhost port, standing in for the sidecar."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5.0)
        yield sock


def _receive(sidecar: socket.socket) -> ActivityReport:
    return decode_report(sidecar.recv(65_536))


def _nothing_waiting(sidecar: socket.socket) -> bool:
    sidecar.settimeout(0.05)
    try:
        sidecar.recv(65_536)
    except TimeoutError:
        return True
    finally:
        sidecar.settimeout(5.0)
    return False


def test_report_sender_sends_partitions_acked_since_the_last_report(
    sidecar: socket.socket,
) -> None:
    monotonic = _Clock(100.0)
    to_wall = 1_699_999_900.0  # wall clock = monotonic clock + to_wall
    activity = PartitionActivity(
        TickSchedule(10_000, 1_000, max_records=3),
        clock=monotonic,
        wall_clock=lambda: monotonic.now + to_wall,
    )
    metrics = ProgressControlMetrics(lambda: 0)
    host, port = sidecar.getsockname()
    sender = ReportSender(
        activity,
        f"{host}:{port}",
        "app:42:cafe",
        metrics,
        include_topic=lambda topic: not topic.startswith("_"),
        monotonic=monotonic,
        wall_clock=lambda: monotonic.now + to_wall,
    )
    try:
        sender.send()  # nothing acked yet: nothing sent
        assert metrics.snapshot().reports_sent == 0

        activity.record_data_ack("clicks", 0, 1_111)
        activity.record_data_ack("_internal", 0, 2_222)
        monotonic.now = 100.5
        activity.record_data_ack("clicks", 1, 3_333)
        monotonic.now = 101.0
        sender.send()
        report = _receive(sidecar)
        assert report.source == "app:42:cafe"
        assert report.sent_ms == 1_700_000_001_000
        assert sorted(report.partitions, key=lambda p: p.partition) == [
            PartitionReport("clicks", 0, 1_111, 1_700_000_000_000),
            PartitionReport("clicks", 1, 3_333, 1_700_000_000_500),
        ]
        assert metrics.snapshot().reports_sent == 1

        monotonic.now = 102.0
        sender.send()  # no new ack: nothing sent
        assert _nothing_waiting(sidecar)
        assert metrics.snapshot().reports_sent == 1

        monotonic.now = 102.25
        activity.record_data_ack("clicks", 0, 4_444)  # only this partition changed
        activity.record_data_ack("_internal", 0, 5_555)
        monotonic.now = 103.0
        sender.send()
        report = _receive(sidecar)
        assert report.sent_ms == 1_700_000_003_000
        assert report.partitions == (PartitionReport("clicks", 0, 4_444, 1_700_000_002_250),)
        assert metrics.snapshot().reports_sent == 2
    finally:
        sender.close()


def test_report_sender_splits_large_reports(sidecar: socket.socket) -> None:
    monotonic = _Clock(10.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=monotonic)
    metrics = ProgressControlMetrics(lambda: 0)
    topic = "t" * 240
    for partition in range(500):
        activity.record_data_ack(topic, partition, partition)
    host, port = sidecar.getsockname()
    sender = ReportSender(
        activity, f"{host}:{port}", "src", metrics, monotonic=monotonic, wall_clock=lambda: 1e9
    )
    try:
        sender.send()
        sent = metrics.snapshot().reports_sent
        assert sent > 1
        reports = [_receive(sidecar) for _ in range(sent)]
        assert sorted(p.partition for r in reports for p in r.partitions) == list(range(500))
        assert all(p.last_ack_ms == 1_000_000_000_000 for r in reports for p in r.partitions)
    finally:
        sender.close()


def test_report_sender_without_a_listener_does_not_raise() -> None:
    # Find a free port, then close it: datagrams to it are refused (or dropped) silently.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monotonic = _Clock(1.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=monotonic)
    metrics = ProgressControlMetrics(lambda: 0)
    sender = ReportSender(activity, f"127.0.0.1:{port}", "src", metrics, monotonic=monotonic)
    try:
        for n in range(3):
            activity.record_data_ack("clicks", 0, n)
            monotonic.now += 1.0
            sender.send()
    finally:
        sender.close()


def test_report_sender_over_a_unix_socket_resends_once_the_sidecar_is_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "reports.sock"
    monotonic = _Clock(1.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=monotonic)
    metrics = ProgressControlMetrics(lambda: 0)
    sender = ReportSender(activity, f"unix://{path}", "src", metrics, monotonic=monotonic)
    try:
        activity.record_data_ack("clicks", 0, 7)
        sender.send()  # no socket file yet: like no sidecar listening, never raised
        assert metrics.snapshot().reports_sent == 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sidecar:
            sidecar.bind(str(path))
            sidecar.settimeout(5.0)
            monotonic.now += 1.0
            sender.send()  # the same ack again: it was not delivered
            (reported,) = _receive(sidecar).partitions
            assert (reported.topic, reported.partition, reported.last_timestamp_ms) == (
                "clicks",
                0,
                7,
            )
            assert metrics.snapshot().reports_sent == 1
            for n in range(50):  # far beyond the socket's queue: EAGAIN, never a wait
                activity.record_data_ack("clicks", 0, 100 + n)
                sender.send()
    finally:
        sender.close()

"""SIGTERM ends a real ``progress-control sidecar`` process within 10 s (Kubernetes gives 30),
whatever the broker's state and however fast reports come in."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.sidecar.process import dead_port, report_flood, sidecar_process

STOP_BOUND_S = 10.0


@pytest.mark.parametrize("run", range(3))
def test_sigterm_with_the_broker_down_and_reports_flooding_exits_within_10s(
    run: int, tmp_path: Path
) -> None:
    socket_path = tmp_path / "reports.sock"
    bootstrap = f"127.0.0.1:{dead_port()}"
    with (
        sidecar_process(bootstrap, REPORT_LISTEN=f"unix://{socket_path}") as (process, port),
        report_flood(str(socket_path)) as sent,
    ):
        # Metadata requests, retries and parked reports in progress; reports keep being read
        # (the report thread never waits for the broker).
        time.sleep(3.0)
        received = _metric(port, "progress_control_reports_received_total")
        print(f"run {run}: {sent()} reports sent, {received:.0f} received")
        assert received > 0.5 * sent() > 0
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        elapsed = time.monotonic() - started
    print(f"run {run}: SIGTERM to exit {elapsed:.2f} s")
    assert elapsed < STOP_BOUND_S
    assert not socket_path.exists()  # removed on stop


def test_sigterm_with_the_broker_down_exits_within_10s_over_udp() -> None:
    with (
        sidecar_process(f"127.0.0.1:{dead_port()}", REPORT_LISTEN="127.0.0.1:0") as (process, _),
    ):
        time.sleep(2.0)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - started < STOP_BOUND_S


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    raise AssertionError(f"no metric {name}")

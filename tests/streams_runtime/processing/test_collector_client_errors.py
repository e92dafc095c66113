"""The runtime producer's librdkafka errors reach our logs once (``error_cb``), and no raw
librdkafka line repeats them on stderr."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.settings import RuntimeSettings
from tests.progress_control.ticks.test_client_errors_logged_once import dead_port, error_counts


def test_runtime_producer_logs_each_error_once(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = RuntimeSettings(
        application_id="dead-broker",
        bootstrap_servers=f"127.0.0.1:{dead_port()}",
        state_dir=tmp_path,
    )
    collector = RecordCollector(
        settings, "test", RuntimeMetrics(settings.application_id), transactional=False
    )
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        collector.producer.poll(0.1)
    reported, mentions = error_counts(caplog.records, "producer: ")
    assert any("Connection refused" in text for text in reported), caplog.text
    assert mentions == sum(reported.values()), caplog.text
    assert "Connection refused" not in capfd.readouterr().err  # librdkafka's own stderr lines

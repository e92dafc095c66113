"""Kafka client properties checked against the librdkafka confluent-kafka loaded, before any
client is made: in the settings of every component that passes them through (sidecar, runtime),
as a one-line error naming the property."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from progress_control.client_properties import client_property_problems
from progress_control.settings import ConfigurationError, load_settings
from sidecar.settings import SidecarSettings
from streams_runtime.settings import RuntimeSettings


def test_properties_librdkafka_takes_are_no_problem() -> None:
    assert (
        client_property_problems(
            {
                "bootstrap.servers": "localhost:9092",
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": True,
                "sasl.mechanism": "PLAIN",
                "auto.offset.reset": "earliest",  # a consumer's, beside a producer's
                "on_delivery": print,  # confluent-kafka's own
                "error_cb": print,
            }
        )
        == []
    )


def test_an_unknown_property_is_named_with_the_closest_real_one() -> None:
    [problem] = client_property_problems({"sasl.mechanismx": "PLAIN"})
    assert problem.startswith("unknown Kafka client property 'sasl.mechanismx' (librdkafka ")
    assert problem.endswith("did you mean 'sasl.mechanisms'?")


def test_a_refused_value_is_named() -> None:
    assert client_property_problems({"acks": "most"}) == [
        "Kafka client property 'acks': "
        'Invalid value for configuration property "request.required.acks"'
    ]


def test_settings_refuse_unknown_properties_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS", "localhost:9092")
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA__SASL_MECHANISMX", "PLAIN")
    with pytest.raises(ConfigurationError, match=r"kafka.*'sasl\.mechanismx'"):
        load_settings(SidecarSettings)
    with pytest.raises(ConfigurationError, match=r"consumer.*'fetch\.wait\.max\.msx'"):
        load_settings(
            RuntimeSettings,
            application_id="app",
            bootstrap_servers="localhost:9092",
            consumer={"fetch.wait.max.msx": "10"},
        )


def test_a_property_mounted_as_a_file_is_checked_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "sasl.passwordx").write_text("hunter2\n")
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS", "localhost:9092")
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA_SECRETS_DIR", str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"'sasl\.passwordx'") as raised:
        load_settings(SidecarSettings)
    assert "hunter2" not in str(raised.value)


def test_the_sidecar_with_a_misspelt_property_exits_2_with_one_line() -> None:
    env = {
        **os.environ,
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": "localhost:9",
        "PROGRESS_CONTROL_KAFKA__SASL_MECHANISMX": "PLAIN",
    }
    result = subprocess.run(
        [sys.executable, "-m", "progress_control_apps.cli", "sidecar"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    problems = [line for line in result.stderr.splitlines() if "sasl.mechanismx" in line]
    assert len(problems) == 1
    assert "PROGRESS_CONTROL_KAFKA" in problems[0]

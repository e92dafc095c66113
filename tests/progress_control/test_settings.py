"""Configuration conventions and logging setup (no broker)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import structlog

from progress_control.dev.broker import BrokerSettings
from progress_control.logging import configure_logging
from progress_control.settings import ConfigurationError, default_cache_dir, load_settings


def test_env_prefix_and_nested_delimiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_PORT", "19092")
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_SERVER_PROPERTIES__LOG_RETENTION_MS", "1000")
    settings = load_settings(BrokerSettings)
    assert settings.port == 19092
    assert settings.server_properties == {"log.retention.ms": "1000"}


def test_kafka_properties_keep_dotted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_SERVER_PROPERTIES", '{"num.io.threads": 4}')
    assert load_settings(BrokerSettings).server_properties == {"num.io.threads": "4"}


def test_invalid_setting_fails_fast_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_PORT", "not-a-port")
    with pytest.raises(ConfigurationError) as excinfo:
        load_settings(BrokerSettings, heap="lots")
    message = str(excinfo.value)
    assert "port (env PROGRESS_CONTROL_BROKER_PORT)" in message
    assert "heap (env PROGRESS_CONTROL_BROKER_HEAP)" in message


def test_unknown_setting_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="prot"):
        load_settings(BrokerSettings, prot=1)


def test_cache_dir_is_overridable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("PROGRESS_CONTROL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "kafka-progress-control"


def test_json_logging_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO", json=True)
        structlog.get_logger("test").info("broker ready", port=9092)
        logging.getLogger("stdlib").warning("plain %s", "message")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        structlog.reset_defaults()
    assert lines[0]["event"] == "broker ready"
    assert lines[0]["port"] == 9092
    assert lines[1] == lines[1] | {"event": "plain message", "level": "warning"}

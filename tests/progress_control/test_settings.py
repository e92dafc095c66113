"""Configuration conventions and logging setup (no broker)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import structlog

from progress_control.logging import configure_logging
from progress_control.settings import (
    ConfigurationError,
    SigningSettings,
    component_config,
    default_cache_dir,
    load_settings,
    read_secret_file,
)
from progress_control.trust import SigningKey
from progress_control_apps.dev.broker import BrokerSettings


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


# --- signing settings: one rule set for every writer ----------------------------------------------

SECRET = "a-signing-secret-of-32-bytes-len"  # noqa: S105 - a test value


class _WriterSettings(SigningSettings):
    """A writer of control records, its settings spelt like the runtime's: field (env VAR)."""

    model_config = component_config("PROGRESS_CONTROL_WRITER_")


def _signing_error(**values: object) -> str:
    with pytest.raises(ConfigurationError) as excinfo:
        load_settings(_WriterSettings, **values)
    return str(excinfo.value)


def test_no_signing_key_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_WriterSettings).signing_key is None
    # Env variables cannot be null: empty values (a chart's defaults) unset every signing setting.
    for name in ("ID", "SECRET", "FILE"):
        monkeypatch.setenv(f"PROGRESS_CONTROL_WRITER_SIGNING_KEY_{name}", "")
    assert load_settings(_WriterSettings).signing_key is None


def test_signing_key_from_env_or_a_file_read_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_WRITER_SIGNING_KEY_ID", "w1")
    monkeypatch.setenv("PROGRESS_CONTROL_WRITER_SIGNING_KEY_SECRET", SECRET)
    assert load_settings(_WriterSettings).signing_key == SigningKey("w1", SECRET.encode())
    monkeypatch.delenv("PROGRESS_CONTROL_WRITER_SIGNING_KEY_SECRET")
    secret_file = tmp_path / "secret"
    secret_file.write_text(f"  {SECRET}\n")
    settings = load_settings(_WriterSettings, signing_key_file=secret_file)
    assert settings.signing_key == SigningKey("w1", SECRET.encode())
    # Read at construction: a file rotated or removed later changes nothing in a running writer.
    secret_file.unlink()
    assert settings.signing_key == SigningKey("w1", SECRET.encode())


@pytest.mark.parametrize(
    ("values", "names"),
    [
        (
            {"signing_key_secret": SECRET},
            ["signing_key_id (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_ID)", "is required"],
        ),
        (
            {"signing_key_id": "w"},
            [
                "signing_key_secret (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_SECRET)",
                "signing_key_file (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_FILE)",
            ],
        ),
        (
            {"signing_key_id": "w", "signing_key_secret": SECRET[:15]},
            ["signing_key_secret (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_SECRET)", "16 bytes"],
        ),
        (
            {"signing_key_id": "w", "signing_key_file": "/nope/secret"},
            ["signing_key_file (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_FILE)", "/nope/secret"],
        ),
        (
            {"signing_key_id": "w", "signing_key_secret": SECRET, "signing_key_file": "/x"},
            ["not both", "signing_key_secret", "signing_key_file"],
        ),
        (
            {"signing_key_id": "k" * 256, "signing_key_secret": SECRET},
            ["signing_key_id (env PROGRESS_CONTROL_WRITER_SIGNING_KEY_ID)", "255"],
        ),
    ],
)
def test_signing_rules_name_the_setting_never_the_secret(
    values: dict[str, object], names: list[str]
) -> None:
    message = _signing_error(**values)
    for name in names:
        assert name in message
    assert SECRET[:15] not in message
    # A whole-model error names its settings itself: no made-up env variable for "(settings)".
    assert "(env PROGRESS_CONTROL_WRITER_(SETTINGS))" not in message


def test_a_short_secret_in_a_file_is_refused_without_showing_it(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("short-secret\n")
    message = _signing_error(signing_key_id="w", signing_key_file=tmp_path / "secret")
    assert "at least 16 bytes" in message
    assert "short-secret" not in message


def test_signing_settings_never_show_the_secret() -> None:
    settings = load_settings(_WriterSettings, signing_key_id="w", signing_key_secret=SECRET)
    for shown in (
        repr(settings),
        str(settings),
        str(settings.model_dump()),
        repr(settings.signing_key),
    ):
        assert SECRET not in shown


def test_read_secret_file_strips_whitespace_and_names_the_setting(tmp_path: Path) -> None:
    (tmp_path / "s").write_text(f"\n{SECRET}\n")
    assert read_secret_file(tmp_path / "s", "my.setting") == SECRET.encode()
    with pytest.raises(ValueError, match=r"my\.setting: cannot read .*FileNotFoundError"):
        read_secret_file(tmp_path / "missing", "my.setting")

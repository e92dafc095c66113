"""Each command's ``--help`` lists its settings: env variable, default and description."""

from __future__ import annotations

import pytest
from pydantic_settings import BaseSettings

from interceptor.settings import InterceptorSettings
from progress_control_apps.cli import main
from progress_control_apps.dev.broker import BrokerSettings
from progress_control_apps.spark.settings import SparkJobSettings
from sidecar.settings import SidecarSettings
from streams_runtime.settings import RuntimeSettings


def _help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "cls"),
    [("sidecar", SidecarSettings), ("run", InterceptorSettings), ("broker", BrokerSettings)],
)
def test_help_lists_every_setting(
    capsys: pytest.CaptureFixture[str], command: str, cls: type[BaseSettings]
) -> None:
    text = _help(capsys, command)
    prefix = str(cls.model_config["env_prefix"])
    for name in cls.model_fields:
        assert f"  {prefix}{name.upper()}" in text, name


def test_help_shows_defaults_and_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "sidecar")
    assert (
        "PROGRESS_CONTROL_START_MS  (default: 1000)\n      Idle time before the first tick." in text
    )
    assert "PROGRESS_CONTROL_KAFKA__<KEY>  (default: empty)" in text
    assert "PROGRESS_CONTROL_LOG_FORMAT  (default: auto)" in text
    assert "PROGRESS_CONTROL_CONFIG_FILE" in text


@pytest.mark.parametrize(
    "cls",
    [SidecarSettings, InterceptorSettings, RuntimeSettings, SparkJobSettings, BrokerSettings],
)
def test_every_setting_has_a_description(cls: type[BaseSettings]) -> None:
    assert [name for name, field in cls.model_fields.items() if not field.description] == []

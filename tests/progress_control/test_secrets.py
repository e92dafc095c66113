"""Planted secrets (Kafka client passwords, the signing secret, the query token) appear in no
repr, str, JSON dump, configuration error, nor in the logs of a real sidecar and streams app
started with them (on a plaintext broker, which ignores the SASL and SSL properties)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from interceptor.settings import InterceptorSettings
from progress_control.settings import ConfigurationError, load_settings
from progress_control_apps.spark.settings import load_job_settings
from sidecar.service import ProgressControlSidecar
from sidecar.settings import SidecarSettings
from streams_runtime import App, AppState, StreamsBuilder
from streams_runtime.settings import RuntimeSettings
from tests.helpers import wait_for

SASL_PASSWORD = "planted-sasl-password-7f3a"  # noqa: S105 - planted
SSL_KEY_PASSWORD = "planted-ssl-key-password-91c2"  # noqa: S105 - planted
SIGNING_SECRET = "planted-signing-secret-5d8e0b"  # noqa: S105 - planted
QUERY_TOKEN = "planted-query-token-c4e1a9"  # noqa: S105 - planted
PLANTED = (SASL_PASSWORD, SSL_KEY_PASSWORD, SIGNING_SECRET, QUERY_TOKEN)

KAFKA = {
    "security.protocol": "PLAINTEXT",
    "sasl.password": SASL_PASSWORD,
    "ssl.key.password": SSL_KEY_PASSWORD,
}


def assert_hidden(text: str) -> None:
    for secret in PLANTED:
        assert secret not in text, f"{secret} shown in: {text}"


def tick_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Interceptor/sidecar config keys with the planted secrets."""
    return {
        "progress.control.kafka": {"bootstrap.servers": bootstrap, **KAFKA},
        "progress.control.signing.key.id": "k1",
        "progress.control.signing.key.secret": SIGNING_SECRET,
        **extra,
    }


def runtime_values(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "application_id": "secrets",
        "bootstrap_servers": bootstrap,
        "kafka": KAFKA,
        "consumer": {"sasl.password": SASL_PASSWORD},
        "signing_key_id": "k1",
        "signing_key_secret": SIGNING_SECRET,
        "query_token": QUERY_TOKEN,
        "control_verification_keys": f"k1:{SIGNING_SECRET}",
        **extra,
    }


BUILDERS: dict[str, Callable[[], BaseModel]] = {
    "runtime": lambda: load_settings(RuntimeSettings, **runtime_values("b:9092")),
    "sidecar": lambda: SidecarSettings.from_config(tick_config("b:9092")),
    "interceptor": lambda: InterceptorSettings.from_config(
        {k: v for k, v in tick_config("b").items() if k != "progress.control.kafka"}
    ),
    "spark": lambda: load_job_settings(control_verification_keys=f"k1:{SIGNING_SECRET}"),
}


@pytest.mark.parametrize("component", sorted(BUILDERS))
def test_settings_never_show_a_secret(component: str) -> None:
    settings = BUILDERS[component]()
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert_hidden(shown)
    kafka = getattr(settings, "kafka", None)
    if kafka is not None:  # still passed to librdkafka untouched
        assert {**kafka}["sasl.password"] == SASL_PASSWORD


@pytest.mark.parametrize(
    "load",
    [
        lambda: load_settings(RuntimeSettings, **runtime_values("b", poll_timeout_ms="soon")),
        # a validator's error on the dict holding the secrets
        lambda: load_settings(
            RuntimeSettings, **runtime_values("b", kafka={**KAFKA, "progress.control.x": "1"})
        ),
        lambda: load_settings(
            RuntimeSettings, **runtime_values("b", signing_key_secret=SIGNING_SECRET[:10])
        ),
        lambda: SidecarSettings.from_config(tick_config("b", **{"progress.control.start.ms": "x"})),
        lambda: SidecarSettings.from_config(
            tick_config("b", **{"progress.control.kafka": {**KAFKA, "sasl.password": {"x": 1}}})
        ),
        lambda: load_job_settings(control_verification_keys=f"k1{SIGNING_SECRET}"),
    ],
    ids=["runtime-value", "runtime-kafka", "runtime-short-secret", "sidecar", "nested", "spark"],
)
def test_configuration_errors_never_show_a_secret(load: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        load()
    assert_hidden(str(excinfo.value))


@pytest.mark.broker
def test_a_running_sidecar_logs_no_secret(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = SidecarSettings.from_config(
        tick_config(kafka_bootstrap, **{"progress.control.http.port": 0})
    )
    with ProgressControlSidecar(settings):
        time.sleep(2)
    assert caplog.records  # it did log
    assert_hidden(caplog.text)


@pytest.mark.broker
def test_a_running_app_logs_no_secret(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    source, sink = create_topic("secrets-in"), create_topic("secrets-out")
    builder = StreamsBuilder()
    builder.stream(source).to(sink)
    app = App(
        builder,
        **runtime_values(kafka_bootstrap, state_dir=tmp_path, application_id=source),
    )
    app.start()
    try:
        wait_for(lambda: app.state is AppState.RUNNING, timeout_s=60, message="RUNNING")
    finally:
        app.close()
    assert caplog.records
    assert_hidden(caplog.text)

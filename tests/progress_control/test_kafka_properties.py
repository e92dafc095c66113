"""KafkaProperties: a real dict for librdkafka, secret values masked wherever it is shown."""

from __future__ import annotations

import pytest
from pydantic_settings import BaseSettings

from progress_control.kafka_properties import (
    MASK,
    KafkaProperties,
    MaskedProperties,
    is_secret_property,
    masked,
)
from progress_control.settings import component_config


@pytest.mark.parametrize(
    "name",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "ssl.key.pem",
        "ssl.keystore.pem",
        "sasl.jaas.config",
        "sasl.oauthbearer.config",
        "basic.auth.user.info",
        "schema.registry.basic.auth.user.info",
        "api.token",
        "clientsecret",
        "SASL_PASSWORD",
    ],
)
def test_secret_properties(name: str) -> None:
    assert is_secret_property(name)


@pytest.mark.parametrize(
    "name",
    [
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "ssl.key.location",
        "ssl.keystore.location",
        "sasl.oauthbearer.token.endpoint.url",
        "client.id",
    ],
)
def test_other_properties_stay_readable(name: str) -> None:
    assert not is_secret_property(name)


class _Settings(BaseSettings):
    model_config = component_config("PROGRESS_CONTROL_TESTPROPS_")

    kafka: KafkaProperties = {}


def test_values_reach_the_client_untouched_and_show_masked() -> None:
    settings = _Settings(kafka={"sasl_password": "hunter2", "bootstrap.servers": "b:9092"})
    assert isinstance(settings.kafka, dict)
    assert type(settings.kafka) is MaskedProperties
    assert {**settings.kafka} == {"sasl.password": "hunter2", "bootstrap.servers": "b:9092"}
    assert dict(settings.kafka)["sasl.password"] == "hunter2"
    assert settings.model_dump()["kafka"]["sasl.password"] == "hunter2"
    for shown in (repr(settings), str(settings), settings.model_dump_json(), str(settings.kafka)):
        assert "hunter2" not in shown
        assert "b:9092" in shown
    assert MASK in repr(settings.kafka)


def test_masked_reaches_nested_mappings() -> None:
    assert masked({"a": {"sasl.password": "x"}, "b": 1}) == {"a": {"sasl.password": MASK}, "b": 1}

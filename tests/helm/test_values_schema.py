"""values.schema.json and the templates' checks reject bad values; kafka.config's credential
check is the settings' masking rule; every object of the schema is closed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from progress_control.kafka_properties import SECRET_NAME_PATTERN, is_secret_property
from tests.helm.chart import (
    CHART,
    SCHEMA_ERROR,
    Helm,
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sidecar.bogus=1"], "bogus"),
        (["--set", "bogus=1"], "bogus"),
        (["--set", "metrics.serviceMonitor.bogus=1"], "bogus"),
        (["--set", "sidecar.native=maybe"], "native"),
        (["--set-string", "sidecar.http.port=8081"], "port"),
        (["--set", "sidecar.http.port=70000"], "port"),
        (["--set", "schedule.startMs=0"], "startMs"),
        (["--set", "sidecar.logFormat=xml"], "logFormat"),
        (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "kafka.bootstrapServers="], "bootstrapServers"),
        (["--set-json", 'sidecar.extraEnv=[{"name":"X"}]'], "extraEnv"),
        (["--set", "sidecar.report.transport=tcp"], "transport"),
    ],
    ids=[
        "unknown-sidecar-key",
        "unknown-top-level-key",
        "unknown-nested-key",
        "bool-as-string",
        "port-as-string",
        "port-out-of-range",
        "below-minimum",
        "not-in-enum",
        "pull-policy-enum",
        "empty-bootstrap",
        "env-without-value",
        "transport-enum",
    ],
)
def test_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "kafka.secretEnv.SASL_PASSWORD=password"], "needs kafka.existingSecret"),
        (["--set", "kafka.mountSecret=true"], "needs kafka.existingSecret"),
        (["--set", "kafka.config.sasl\\.password=hunter2"], "looks like a credential"),
        (["--set", "kafka.config.bootstrap\\.servers=x:9092"], "set kafka.bootstrapServers"),
        (["--set", "signing.keyId=k1"], "signing.keyId needs signing.secret.name"),
        (["--set", "signing.secret.name=sig"], "signing.secret.name needs signing.keyId"),
        (
            ["--set", "schedule.maxRecords=null,schedule.endMs=null"],
            "set schedule.maxRecords or schedule.endMs",
        ),
        (["--set", "schedule.endMs=5"], "schedule.endMs must be >= schedule.startMs"),
        (["--set", "sidecar.report.transport=udp,sidecar.report.port=8081"], "must differ"),
        (["--set", "example.enabled=false,metrics.service.enabled=true"], "metrics.service"),
    ],
    ids=[
        "secret-env-without-secret",
        "mount-without-secret",
        "password-in-config-map",
        "duplicate-bootstrap",
        "signing-key-id-without-secret",
        "signing-secret-without-key-id",
        "unbounded-schedule",
        "end-before-start",
        "port-clash",
        "service-without-selector",
    ],
)
def test_template_checks_reject(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.rejected(*args)


def test_the_credential_check_is_the_masking_rule(helm: Helm) -> None:
    """kafka.config refuses exactly the properties the settings mask: a value the sidecar would
    show as ``*****`` never lands in a ConfigMap."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f"regexMatch `{SECRET_NAME_PATTERN}`" in helpers
    names = [
        "sasl.password",
        "ssl.key.pem",
        "ssl.certificate.pem",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.client.secret",
        "sasl.jaas.config",
        "basic.auth.user.info",
        "SSL_KEYSTORE_PASSWORD",
        "ssl.key.location",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.mechanism",
        "client.id",
    ]
    for name in names:
        result = helm.template("--set", f"kafka.config.{name.replace('.', chr(92) + '.')}=x")
        refused = "looks like a credential" in result.stderr
        assert refused == is_secret_property(name), name
        assert refused or result.returncode == 0, result.stderr


def test_values_file_and_schema_agree() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def closed(node: dict[str, Any], where: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, f"{where} is open"
        for key, child in node.get("properties", {}).items():
            closed(child, f"{where}.{key}")
        for key, child in node.get("definitions", {}).items():
            closed(child, f"#/definitions/{key}")

    closed(schema, "values")

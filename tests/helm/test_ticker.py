"""The ticker Deployment (ticker.*): it watches the broker and takes no reports, its placement,
its metrics Service and ServiceMonitor, and its checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helm.chart import (
    KUBE_VERSION,
    OLDEST_KUBE_VERSION,
    SCHEMA_ERROR,
    TICKER_NAME,
    Helm,
    Manifest,
    _container_env,
    headless_service,
    metrics_service,
    named,
    pod_spec,
    service_monitor,
    sidecar_of,
    validate_strictly,
)


def test_ticker_is_off_by_default(default_manifests: list[Manifest]) -> None:
    assert not [m for m in default_manifests if m["metadata"]["name"] == TICKER_NAME]


def test_ticker_watches_the_broker_and_takes_no_reports(
    full_manifests: list[Manifest], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sidecar.settings import SidecarSettings

    deployment = named(full_manifests, "Deployment", TICKER_NAME)
    assert deployment["spec"]["replicas"] == 3
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert container["name"] == "ticker"
    assert (container["command"], container["args"]) == (["progress-control"], ["sidecar"])
    # The sidecar's image, probes and security context.
    sidecar = sidecar_of(pod_spec(full_manifests))
    for field in ("image", "securityContext", "livenessProbe", "readinessProbe", "startupProbe"):
        assert container[field] == sidecar[field], field
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert "progress-control-reports" not in {m["name"] for m in container["volumeMounts"]}
    assert "progress-control-reports" not in {v["name"] for v in spec["volumes"]}
    # What it runs with: the ConfigMap (watch.enabled=false there, for the app pods), then env.
    for name in [n for n in os.environ if n.startswith("PROGRESS_CONTROL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA_SECRETS_DIR", str(tmp_path / "no-secrets"))
    for name, value in _container_env(container, full_manifests).items():
        monkeypatch.setenv(name, value)
    settings = SidecarSettings.from_config({})
    assert settings.watch_enabled is True
    assert settings.report_listen is None
    assert settings.topics_include == (r"legacy\..*",)
    assert settings.topics_exclude == ("legacy.internal",)
    assert settings.kafka["sasl.password"] == "secret:sasl.password"
    assert settings.jitter_ms == 500  # sidecar.extraEnv applies too
    assert settings.http_host == "0.0.0.0"  # noqa: S104


def test_ticker_replicas_go_on_different_nodes(helm: Helm, full_manifests: list[Manifest]) -> None:
    deployment = named(full_manifests, "Deployment", TICKER_NAME)
    selector = deployment["spec"]["selector"]["matchLabels"]
    spec = deployment["spec"]["template"]["spec"]
    [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    assert "topologySpreadConstraints" not in spec  # topologySpreadPreset: none
    assert spec["priorityClassName"] == "streaming-critical"
    assert spec["nodeSelector"] == {"workload": "streaming"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    assert spec["terminationGracePeriodSeconds"] == 40
    budget = named(full_manifests, "PodDisruptionBudget", TICKER_NAME)
    assert budget["spec"] == {"maxUnavailable": 2, "selector": {"matchLabels": selector}}
    # Defaults: preferred anti-affinity and a zone spread.
    manifests = helm.render("--set", "ticker.enabled=true")
    validate_strictly(manifests, KUBE_VERSION)
    validate_strictly(
        helm.render(
            "--set", "ticker.enabled=true,sidecar.native=false", kube_version=OLDEST_KUBE_VERSION
        ),
        OLDEST_KUBE_VERSION,
    )
    spec = named(manifests, "Deployment", TICKER_NAME)["spec"]["template"]["spec"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in spec["affinity"]["podAntiAffinity"]
    assert spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert named(manifests, "Deployment", TICKER_NAME)["spec"]["replicas"] == 2


def test_ticker_metrics_service_and_monitor(full_manifests: list[Manifest], helm: Helm) -> None:
    deployment = named(full_manifests, "Deployment", TICKER_NAME)
    service = named(full_manifests, "Service", TICKER_NAME)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "http-metrics", "port": 8081, "targetPort": "pc-http", "protocol": "TCP"}
    ]
    monitor = service_monitor(full_manifests, TICKER_NAME)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    for other in (metrics_service(full_manifests), headless_service(full_manifests)):
        assert not monitor["spec"]["selector"]["matchLabels"].items() <= (
            other["metadata"]["labels"].items()
        )
    assert monitor["spec"]["endpoints"][0]["port"] == "http-metrics"
    off = helm.render("--set", "ticker.enabled=true")
    assert "ServiceMonitor" not in {m["kind"] for m in off}
    on = helm.render("--set", "ticker.enabled=true,ticker.metrics.serviceMonitor.enabled=true")
    assert service_monitor(on, TICKER_NAME)


def test_ticker_checks_reject(helm: Helm) -> None:
    stderr = helm.rejected("--set", "ticker.enabled=true,ticker.terminationGracePeriodSeconds=5")
    assert "ticker.terminationGracePeriodSeconds must exceed" in stderr
    for value, message in [
        ("ticker.replicas=0", "replicas"),
        ("ticker.bogus=1", "bogus"),
        ("ticker.podDisruptionBudget.maxUnavailable=0", "maxUnavailable"),
    ]:
        stderr = helm.rejected("--set", value)
        assert SCHEMA_ERROR in stderr
        assert message in stderr

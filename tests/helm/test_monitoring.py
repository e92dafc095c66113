"""Metrics and monitoring: the sidecars' metrics Service, the ServiceMonitors (the sidecars' and
the runtime's), the PrometheusRule's alerts and the Grafana dashboard.
"""

from __future__ import annotations

import json
import re

from tests.helm.chart import (
    CHART,
    FULL_VALUES,
    NAMESPACE,
    RELEASE,
    RUNTIME,
    RUNTIME_NAME,
    Helm,
    Manifest,
    app_deployment,
    headless_service,
    metrics_service,
    service_monitor,
)
from tests.helpers import undocumented_metrics


def test_metrics_service_and_service_monitor(
    default_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    assert "Service" not in {m["kind"] for m in default_manifests}
    service = metrics_service(full_manifests)
    deployment = app_deployment(full_manifests)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    [port] = service["spec"]["ports"]
    assert port["name"] == "http-metrics"
    assert port["targetPort"] == 8081


def test_service_monitor_selects_the_metrics_service(full_manifests: list[Manifest]) -> None:
    # Not in the Kubernetes schemas: checked against the ServiceMonitor fields we rely on.
    monitor = service_monitor(full_manifests, f"{RELEASE}-progress-control")
    service = metrics_service(full_manifests)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    assert set(spec) == {"selector", "namespaceSelector", "endpoints"}
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = spec["endpoints"]
    assert endpoint == {
        "port": "http-metrics",
        "path": "/metrics",
        "scheme": "http",
        "interval": "15s",
        "scrapeTimeout": "10s",
    }
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


_METRIC_NAME = re.compile(r"\b((?:progress_control|streams)_[a-z_]+)")


def test_the_alerts_and_the_dashboard_render_and_use_documented_metrics(
    full_manifests: list[Manifest],
) -> None:
    [rule] = [m for m in full_manifests if m["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    [group] = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "ProgressControlTicksFailing",
        "ProgressControlBrokerUnreachable",
        "ProgressControlPromiseStalled",
        "ProgressControlUnreportedTasks",
        "ProgressControlConsumerLag",
        "ProgressControlRestoreStuck",
    }
    assert "> 300" in alerts["ProgressControlPromiseStalled"]["expr"]  # the value given
    # Prometheus' templates reach Prometheus as written, not eaten by Helm's.
    assert (
        "{{ $labels.pod }}"
        in alerts["ProgressControlUnreportedTasks"]["annotations"]["description"]
    )
    [dashboard_map] = [
        m
        for m in full_manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboard_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_map["data"]["progress-control.json"])
    assert dashboard == json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = [r["expr"] for r in group["rules"]] + [
        t["expr"] for panel in dashboard["panels"] for t in panel["targets"]
    ]
    names = {name for expr in exprs for name in _METRIC_NAME.findall(expr)}
    assert len(names) >= 10
    assert undocumented_metrics(names) == []


def test_runtime_service_monitor_scrapes_every_instance(
    full_manifests: list[Manifest], runtime_manifests: list[Manifest], helm: Helm
) -> None:
    monitor = service_monitor(full_manifests, RUNTIME_NAME)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"  # metrics.serviceMonitor's
    service = headless_service(full_manifests)
    spec = monitor["spec"]
    assert set(spec) == {"selector", "namespaceSelector", "endpoints"}
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # Only the runtime's Service: not the sidecars' metrics Service.
    assert not spec["selector"]["matchLabels"].items() <= (
        metrics_service(full_manifests)["metadata"]["labels"].items()
    )
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = spec["endpoints"]
    assert endpoint == {
        "port": "http-metrics",
        "path": "/metrics",
        "scheme": "http",
        "interval": "15s",
        "scrapeTimeout": "10s",
    }
    [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert port["port"] == 9464  # runtime.metrics.port
    assert service["spec"]["publishNotReadyAddresses"] is True  # restoring instances too
    # Its own switch: null follows metrics.serviceMonitor.enabled.
    assert "ServiceMonitor" not in {m["kind"] for m in runtime_manifests}
    on = helm.render(*RUNTIME, "--set", "runtime.metrics.serviceMonitor.enabled=true")
    assert service_monitor(on, RUNTIME_NAME)["spec"]["endpoints"][0]["interval"] == "30s"
    assert [m["kind"] for m in on].count("ServiceMonitor") == 1  # no sidecar Service needed
    off = helm.render(
        "-f", str(FULL_VALUES), "--set", "runtime.metrics.serviceMonitor.enabled=false"
    )
    assert [m["metadata"]["name"] for m in off if m["kind"] == "ServiceMonitor"] == [
        f"{RELEASE}-progress-control",
        f"{RELEASE}-progress-control-ticker",
    ]

"""NetworkPolicies (networkPolicy.*) of the runtime and the ticker."""

from __future__ import annotations

from tests.helm.chart import (
    KUBE_VERSION,
    RUNTIME,
    RUNTIME_NAME,
    TICKER_NAME,
    Helm,
    Manifest,
    named,
    one,
    test_pod,
    validate_strictly,
)


def test_network_policies_are_off_by_default(runtime_manifests: list[Manifest]) -> None:
    assert "NetworkPolicy" not in {m["kind"] for m in runtime_manifests}


def test_runtime_network_policy(full_manifests: list[Manifest]) -> None:
    policy = named(full_manifests, "NetworkPolicy", RUNTIME_NAME)
    runtime = one(full_manifests, "StatefulSet")
    pods = runtime["spec"]["selector"]["matchLabels"]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": pods}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    queries, metrics = spec["ingress"]
    assert queries["ports"] == [{"port": 8443, "protocol": "TCP"}]
    test_pod_labels = test_pod(full_manifests)["metadata"]["labels"]
    peers = queries["from"]
    assert peers[0] == {"podSelector": {"matchLabels": pods}}  # the other instances
    assert peers[1]["podSelector"]["matchLabels"].items() <= test_pod_labels.items()
    assert peers[2]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "shop"}
    assert metrics["ports"] == [{"port": 9464, "protocol": "TCP"}]
    assert metrics["from"][1]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "prometheus"
    }
    dns, broker, routing = spec["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert broker["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    assert routing == {
        "to": [{"podSelector": {"matchLabels": pods}}],
        "ports": [{"port": 8443, "protocol": "TCP"}],
    }


def test_ticker_network_policy_admits_only_metrics(full_manifests: list[Manifest]) -> None:
    spec = named(full_manifests, "NetworkPolicy", TICKER_NAME)["spec"]
    [ingress] = spec["ingress"]
    assert ingress["ports"] == [{"port": 8081, "protocol": "TCP"}]
    assert len(ingress["from"]) == 2  # the helm test Pod and networkPolicy.metricsFrom
    assert [rule.get("to") for rule in spec["egress"]] == [
        None,
        [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
    ]


def test_network_policy_without_egress_rules_allows_all_egress(helm: Helm) -> None:
    manifests = helm.render(
        *RUNTIME,
        "--set",
        "networkPolicy.enabled=true,ticker.enabled=true,runtime.queries.enabled=false",
    )
    validate_strictly(manifests, KUBE_VERSION)
    for name in (RUNTIME_NAME, TICKER_NAME):
        spec = named(manifests, "NetworkPolicy", name)["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        assert "egress" not in spec
    [metrics] = named(manifests, "NetworkPolicy", RUNTIME_NAME)["spec"]["ingress"]
    assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]

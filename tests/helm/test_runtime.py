"""The streams runtime (runtime.*): StatefulSet, headless Service, PodDisruptionBudget, its env as
RuntimeSettings loads it, its placement (anti-affinity, spread, priority), and the checks that
reject bad values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helm.chart import (
    KUBE_VERSION,
    NAMESPACE,
    OLDEST_KUBE_VERSION,
    RUNTIME,
    RUNTIME_NAME,
    SCHEMA_ERROR,
    Helm,
    Manifest,
    env_of,
    headless_service,
    one,
    plain,
    runtime_container,
    runtime_env,
    runtime_pod_spec,
    self_signed,
    test_pod,
    validate_strictly,
)


def test_runtime_render_validates_strictly(helm: Helm, runtime_manifests: list[Manifest]) -> None:
    assert sorted(validate_strictly(runtime_manifests, KUBE_VERSION)) == [
        "ConfigMap",
        "Pod",
        "PodDisruptionBudget",
        "Service",
        "StatefulSet",
    ]
    oldest = helm.render(
        *RUNTIME, "--set", "sidecar.native=false", kube_version=OLDEST_KUBE_VERSION
    )
    validate_strictly(oldest, OLDEST_KUBE_VERSION)


def test_runtime_statefulset_behind_a_headless_service(runtime_manifests: list[Manifest]) -> None:
    statefulset = one(runtime_manifests, "StatefulSet")
    service = headless_service(runtime_manifests)
    assert statefulset["metadata"]["name"] == RUNTIME_NAME
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert statefulset["spec"]["replicas"] == 2
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["clusterIP"] == "None"  # headless: one DNS name per pod
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "queries": 8080,
        "http-metrics": 9090,
    }
    container = runtime_container(runtime_manifests)
    assert container["command"] == ["python", "-m", "shop.sessions"]
    assert "args" not in container
    assert container["image"] == "ghcr.io/kafka-progress-control/progress-control:0.1.0"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "queries": 8080,
        "metrics": 9090,
    }


def test_runtime_advertises_its_stable_dns_name(runtime_manifests: list[Manifest]) -> None:
    env = runtime_container(runtime_manifests)["env"]
    names = [item["name"] for item in env]
    by_name = {item["name"]: item for item in env}
    # Kubernetes expands $(POD_NAME) only from variables defined before it.
    assert names.index("POD_NAME") < names.index("PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER")
    assert by_name["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert by_name["PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER"]["value"] == (
        f"$(POD_NAME).{RUNTIME_NAME}.{NAMESPACE}.svc.cluster.local:8080"
    )
    assert by_name["PROGRESS_CONTROL_RUNTIME_QUERY_BIND_HOST"]["value"] == "0.0.0.0"  # noqa: S104
    assert by_name["PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "query-token", "key": "token"}
    }


def test_runtime_state_on_a_claim_per_pod(helm: Helm, runtime_manifests: list[Manifest]) -> None:
    statefulset = one(runtime_manifests, "StatefulSet")
    [claim] = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "state"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    container = runtime_container(runtime_manifests)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"state": "/var/lib/progress-control", "tmp": "/tmp"}  # noqa: S108
    env = env_of(container)
    assert env["PROGRESS_CONTROL_RUNTIME_STATE_DIR"]["value"] == "/var/lib/progress-control"
    assert env["PROGRESS_CONTROL_RUNTIME_STATE_ENGINE"]["value"] == "sqlite"
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert set(volumes) == {"tmp"}  # state comes from the claim template
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "64Mi"}

    ephemeral = one(
        helm.render(*RUNTIME, "--set", "runtime.persistence.enabled=false"), "StatefulSet"
    )
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    volumes = {v["name"]: v for v in ephemeral["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}}


def test_runtime_pod_is_locked_down(runtime_manifests: list[Manifest]) -> None:
    spec = one(runtime_manifests, "StatefulSet")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["fsGroup"] == 10001  # the claim is writable by the user
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = runtime_container(runtime_manifests)
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }


def test_runtime_probes(helm: Helm, runtime_manifests: list[Manifest]) -> None:
    container = runtime_container(runtime_manifests)
    # The metrics port serves the probes (no token, no TLS), queries or not.
    live = {"path": "/health/live", "port": "metrics"}
    ready = {"path": "/health/ready", "port": "metrics"}
    assert container["startupProbe"]["httpGet"] == live
    assert container["livenessProbe"]["httpGet"] == live
    assert container["readinessProbe"]["httpGet"] == ready
    assert "tcpSocket" not in container["readinessProbe"]
    env = env_of(container)
    assert env["PROGRESS_CONTROL_RUNTIME_METRICS_PORT"]["value"] == "9090"
    assert env["PROGRESS_CONTROL_RUNTIME_METRICS_HOST"]["value"] == "0.0.0.0"  # noqa: S104

    without_queries = runtime_container(
        helm.render(*RUNTIME, "--set", "runtime.queries.enabled=false")
    )
    assert without_queries["livenessProbe"]["httpGet"] == live
    assert without_queries["readinessProbe"]["httpGet"] == ready
    assert [p["name"] for p in without_queries["ports"]] == ["metrics"]
    env = env_of(without_queries)
    assert "PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER" not in env
    assert "PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN" not in env


def test_runtime_queries_without_a_token_only_by_opting_out(helm: Helm) -> None:
    manifests = helm.render(
        *RUNTIME,
        "--set",
        "runtime.queries.tokenSecret.name=,runtime.settings.query_allow_unauthenticated=true",
    )
    env = env_of(runtime_container(manifests))
    assert "PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN" not in env
    assert env["PROGRESS_CONTROL_RUNTIME_QUERY_ALLOW_UNAUTHENTICATED"]["value"] == "true"
    assert "PC_TEST_QUERY_TOKEN" not in env_of(test_pod(manifests)["spec"]["containers"][0])


def test_runtime_pod_disruption_budget(helm: Helm, runtime_manifests: list[Manifest]) -> None:
    budget = one(runtime_manifests, "PodDisruptionBudget")
    pod_labels = one(runtime_manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    off = helm.render(*RUNTIME, "--set", "runtime.podDisruptionBudget.enabled=false")
    assert "PodDisruptionBudget" not in {m["kind"] for m in off}


def test_runtime_from_every_value(full_manifests: list[Manifest]) -> None:
    statefulset = one(full_manifests, "StatefulSet")
    spec = statefulset["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "OrderedReady"
    pod = spec["template"]
    assert pod["metadata"]["annotations"] == {"team.example.com/owner": "streaming"}
    assert pod["metadata"]["labels"]["team"] == "streaming"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 90
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    container = runtime_container(full_manifests)
    assert container["image"] == "registry.example.com/shop/sessions:2.0.1"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == ["--topic", "clicks"]
    env = env_of(container)
    assert env["PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER"]["value"] == (
        f"$(POD_NAME).{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal:8443"
    )
    # The sidecar's Kafka connection, for the runtime's clients.
    assert env["PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS"]["value"] == (
        "broker-0.kafka:9093,broker-1.kafka:9093"
    )
    assert env["PROGRESS_CONTROL_RUNTIME_KAFKA__SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["PROGRESS_CONTROL_RUNTIME_KAFKA__SASL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "kafka-credentials", "key": "sasl.password"}
    }
    # Generic Secret plumbing: one variable, every key of a Secret, files.
    assert env["PROGRESS_CONTROL_RUNTIME_CONTROL_VERIFICATION_KEYS"]["valueFrom"] == {
        "secretKeyRef": {"name": "control-keys", "key": "keys"}
    }
    assert container["envFrom"] == [{"secretRef": {"name": "runtime-extra-settings"}}]
    assert {"name": "secret-0", "mountPath": "/etc/progress-control/tls", "readOnly": True} in (
        container["volumeMounts"]
    )
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["secret-0"]["secret"] == {"secretName": "query-tls", "defaultMode": 0o444}
    [claim] = spec["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["accessModes"] == ["ReadWriteOncePod"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert env["PROGRESS_CONTROL_RUNTIME_STATE_DIR"]["value"] == "/state"
    [budget] = [
        m
        for m in full_manifests
        if m["kind"] == "PodDisruptionBudget" and m["metadata"]["name"] == RUNTIME_NAME
    ]
    assert budget["spec"]["maxUnavailable"] == 2


@pytest.mark.parametrize("variant", ["runtime", "full"])
def test_rendered_env_loads_as_runtime_settings(
    variant: str,
    runtime_manifests: list[Manifest],
    full_manifests: list[Manifest],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The contract with the Python side: what the chart renders is what RuntimeSettings reads.
    from progress_control.settings import load_settings
    from streams_runtime.settings import ProcessingGuarantee, RuntimeSettings, StateEngine

    manifests = runtime_manifests if variant == "runtime" else full_manifests
    pod = f"{RUNTIME_NAME}-1"
    for name in [n for n in os.environ if n.startswith("PROGRESS_CONTROL_")]:
        monkeypatch.delenv(name)
    env = runtime_env(runtime_container(manifests), pod, {"keys": "k1:" + "s" * 32})
    # The TLS Secret's files, where the kubelet would mount them (the runtime loads them).
    mount = "/etc/progress-control/tls"
    host = f"{pod}.{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal"
    cert, _ = self_signed(tmp_path / "tls", host)
    (tmp_path / "tls" / "ca.crt").write_bytes(cert.read_bytes())
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace(mount, str(tmp_path / "tls")))
    settings = load_settings(RuntimeSettings)
    assert settings.query_bind_host == "0.0.0.0"  # noqa: S104
    assert settings.metrics_host == "0.0.0.0"  # noqa: S104
    assert settings.state_engine is StateEngine.SQLITE
    if variant == "runtime":
        assert settings.application_id == "sessions"
        assert settings.bootstrap_servers == "kafka:9092"
        assert settings.application_server == (
            f"{pod}.{RUNTIME_NAME}.{NAMESPACE}.svc.cluster.local:8080"
        )
        assert plain(settings.query_token) == "secret:token"
        assert settings.state_dir == Path("/var/lib/progress-control")
        assert settings.metrics_port == 9090
        assert settings.kafka == {}
    else:
        assert settings.application_id == "shop-sessions"
        assert settings.application_server == (
            f"{pod}.{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal:8443"
        )
        assert plain(settings.query_token) == "secret:query-token"
        assert settings.state_dir == Path("/state")
        assert settings.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE
        assert settings.num_standby_replicas == 1
        assert (settings.max_task_idle_ms, settings.commit_interval_ms) == (500, 200)
        assert settings.kafka["security.protocol"] == "SASL_SSL"
        assert settings.kafka["sasl.password"] == "secret:sasl.password"
        assert settings.trust_policy().verification_keys.keys() == {"k1"}
        assert settings.signing_key is not None
        assert settings.signing_key.key_id == "shop-2026"
        assert settings.query_tls_cert_file == tmp_path / "tls" / "tls.crt"
        assert settings.query_tls_ca_file == tmp_path / "tls" / "ca.crt"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "runtime.bogus=1"], "bogus"),
        (["--set", "runtime.persistence.bogus=1"], "bogus"),
        (["--set", "tests.bogus=1"], "bogus"),
        (["--set", "runtime.enabled=true"], "at '/runtime/applicationId': minLength"),
        (
            ["--set", "runtime.enabled=true,runtime.applicationId=a"],
            "at '/runtime/command': minItems",
        ),
        (["--set", "runtime.applicationId=a b"], "applicationId"),
        (["--set", "runtime.settings.StateEngine=sqlite"], "StateEngine"),
        (["--set-json", 'runtime.settings.kafka={"a":"b"}'], "/runtime/settings/kafka"),
        (["--set", "runtime.persistence.mountPath=/tmp"], "mountPath"),
        (["--set", "runtime.persistence.accessModes[0]=ReadWriteSometimes"], "accessModes"),
        (["--set", "runtime.podManagementPolicy=Serial"], "podManagementPolicy"),
        (["--set", "runtime.podDisruptionBudget.maxUnavailable=0"], "maxUnavailable"),
        (["--set-string", "runtime.queries.port=8080"], "port"),
        (["--set-json", 'runtime.secretMounts=[{"name":"tls"}]'], "mountPath"),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "unknown-tests-key",
        "enabled-without-application-id",
        "enabled-without-command",
        "application-id-pattern",
        "setting-name-pattern",
        "setting-not-a-scalar",
        "state-on-tmp",
        "access-mode-enum",
        "pod-management-enum",
        "budget-below-one",
        "port-as-string",
        "secret-mount-without-path",
    ],
)
def test_runtime_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "runtime.queries.tokenSecret.name="],
            "runtime.queries.tokenSecret.name must name an existing Secret",
        ),
        (["--set", "runtime.queries.port=9090"], "runtime.queries.port and runtime.metrics.port"),
        (["--set", "runtime.settings.state_dir=/data"], "runtime.settings.state_dir is set by"),
        (
            ["--set", "runtime.settings.query_token=hunter2"],
            "runtime.settings.query_token is set by the chart",
        ),
        (
            ["--set", "runtime.settings.control_verification_keys=k:s"],
            "runtime.settings.control_verification_keys looks like a credential",
        ),
        (
            ["--set-json", 'runtime.extraEnv=[{"name":"POD_NAME","value":"x"}]'],
            "runtime.extraEnv sets POD_NAME",
        ),
        (
            ["--set-json", 'runtime.secretMounts=[{"name":"a","mountPath":"/tmp"}]'],
            "runtime.secretMounts mounts a at /tmp, which is taken",
        ),
    ],
    ids=[
        "queries-without-token",
        "port-clash",
        "own-setting",
        "token-in-settings",
        "keys-in-settings",
        "own-env",
        "mount-clash",
    ],
)
def test_runtime_template_checks_reject(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.rejected(*RUNTIME, *args)


def test_runtime_instances_repel_each_other_by_default(runtime_manifests: list[Manifest]) -> None:
    spec = runtime_pod_spec(runtime_manifests)
    selector = one(runtime_manifests, "StatefulSet")["spec"]["selector"]["matchLabels"]
    # A standby does not land on the node of its active (preferred: scheduling never blocks).
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    assert spec["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
    ]
    assert not {"priorityClassName", "nodeSelector", "tolerations"} & set(spec)


def test_runtime_placement_from_values(full_manifests: list[Manifest], helm: Helm) -> None:
    spec = runtime_pod_spec(full_manifests)
    [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "streams-runtime"
    [spread] = spec["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"  # replaces the preset's
    assert spec["priorityClassName"] == "streaming-critical"
    assert spec["nodeSelector"] == {"workload": "streaming"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    # Your affinity replaces the preset; none and none render nothing.
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    manifests = helm.render(*RUNTIME, "--set-json", f"runtime.affinity={json.dumps(affinity)}")
    validate_strictly(manifests, KUBE_VERSION)
    assert runtime_pod_spec(manifests)["affinity"] == affinity
    manifests = helm.render(
        *RUNTIME, "--set", "runtime.podAntiAffinityPreset=none,runtime.topologySpreadPreset=none"
    )
    assert not {"affinity", "topologySpreadConstraints"} & set(runtime_pod_spec(manifests))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "runtime.podAntiAffinityPreset=sometimes"], "podAntiAffinityPreset"),
        (["--set", "runtime.topologySpreadPreset=region"], "topologySpreadPreset"),
        (["--set", "runtime.priorityClassName=Not_A_Name"], "priorityClassName"),
        (["--set-json", 'runtime.tolerations={"key":"a"}'], "tolerations"),
        (["--set", "runtime.metrics.serviceMonitor.enabled=yes"], "serviceMonitor"),
    ],
    ids=["anti-affinity-enum", "spread-enum", "priority-class-name", "tolerations-list", "bool"],
)
def test_runtime_placement_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr

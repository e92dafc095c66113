"""The sidecar in the app's pod (the example Deployment): a native or a plain container, its
ConfigMap and env (as the settings classes load them), Secrets, the reports socket, probes,
security context, and rolling the pods on config changes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    EXAMPLE,
    KUBE_VERSION,
    SOCKET_ADDRESS,
    SOCKET_DIR,
    Helm,
    Manifest,
    _container_env,
    app_deployment,
    env_of,
    one,
    pod_spec,
    settings_config_map,
    sidecar_of,
    validate_strictly,
)


def test_native_sidecar_is_an_init_container_restarting_always(
    example_manifests: list[Manifest],
) -> None:
    spec = pod_spec(example_manifests)
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == "progress-control"
    assert sidecar["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["producer"]
    assert sidecar["command"] == ["progress-control"]
    assert sidecar["args"] == ["sidecar"]


def test_fallback_sidecar_is_a_plain_container(full_manifests: list[Manifest]) -> None:
    spec = pod_spec(full_manifests)
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["producer", "progress-control"]
    assert "restartPolicy" not in sidecar_of(spec)


def test_config_map_carries_kafka_and_schedule_settings(
    default_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    default = one(default_manifests, "ConfigMap")["data"]
    assert default["PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert default["PROGRESS_CONTROL_START_MS"] == "1000"
    assert default["PROGRESS_CONTROL_BACKOFF_MS"] == "1000"
    assert default["PROGRESS_CONTROL_BACKOFF_EXPONENTIAL"] == "false"
    assert default["PROGRESS_CONTROL_MAX_RECORDS"] == "none"
    assert default["PROGRESS_CONTROL_END_MS"] == "3600000"
    assert "PROGRESS_CONTROL_TOPICS_INCLUDE" not in default
    assert default["PROGRESS_CONTROL_WATCH_ENABLED"] == "true"
    assert default["PROGRESS_CONTROL_WATCH_INTERVAL_MS"] == "5000"
    assert default["PROGRESS_CONTROL_REPORT_LISTEN"] == (
        "unix:///var/run/progress-control/reports.sock"
    )
    assert default["PROGRESS_CONTROL_LOG_FORMAT"] == "json"
    assert all(isinstance(v, str) for v in default.values())

    full = settings_config_map(full_manifests)["data"]
    assert full["PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS"] == (
        "broker-0.kafka:9093,broker-1.kafka:9093"
    )
    assert full["PROGRESS_CONTROL_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL"
    assert full["PROGRESS_CONTROL_KAFKA__SASL_MECHANISM"] == "SCRAM-SHA-512"
    # Large integers keep their digits (Helm reads YAML numbers as floats).
    assert full["PROGRESS_CONTROL_KAFKA__MESSAGE_MAX_BYTES"] == "2000000"
    assert full["PROGRESS_CONTROL_END_MS"] == "3600000"
    assert full["PROGRESS_CONTROL_MAX_RECORDS"] == "none"
    assert full["PROGRESS_CONTROL_BACKOFF_EXPONENTIAL"] == "false"
    assert full["PROGRESS_CONTROL_TOPICS_INCLUDE"] == r"orders,payments\..*"
    assert full["PROGRESS_CONTROL_TOPICS_EXCLUDE"] == "_.*"
    assert full["PROGRESS_CONTROL_WATCH_ENABLED"] == "false"
    assert full["PROGRESS_CONTROL_REPORT_LISTEN"] == "127.0.0.1:7072"  # transport udp
    assert not any("PASSWORD" in key or "USERNAME" in key for key in full)


@pytest.mark.parametrize("variant", ["default", "full"])
def test_sidecar_env_wiring(
    variant: str, example_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    manifests = example_manifests if variant == "default" else full_manifests
    sidecar = sidecar_of(pod_spec(manifests))
    config_map = settings_config_map(manifests)["metadata"]["name"]
    assert sidecar["envFrom"] == [{"configMapRef": {"name": config_map}}]
    env = env_of(sidecar)
    assert env["PROGRESS_CONTROL_HTTP_HOST"]["value"] == "0.0.0.0"  # noqa: S104
    assert env["PROGRESS_CONTROL_HTTP_PORT"]["value"] == "8081"
    if variant == "default":
        assert env["PROGRESS_CONTROL_SHUTDOWN_TIMEOUT_S"]["value"] == "10"
        assert not any("valueFrom" in item for item in env.values())
        return
    assert env["PROGRESS_CONTROL_SHUTDOWN_TIMEOUT_S"]["value"] == "20"
    assert env["PROGRESS_CONTROL_KAFKA__SASL_USERNAME"]["valueFrom"] == {
        "secretKeyRef": {"name": "kafka-credentials", "key": "sasl.username"}
    }
    assert env["PROGRESS_CONTROL_KAFKA__SASL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "kafka-credentials", "key": "sasl.password"}
    }
    assert env["PROGRESS_CONTROL_JITTER_MS"] == {
        "name": "PROGRESS_CONTROL_JITTER_MS",
        "value": "500",
    }
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize("variant", ["default", "full"])
def test_rendered_env_loads_as_sidecar_and_interceptor_settings(
    variant: str,
    example_manifests: list[Manifest],
    full_manifests: list[Manifest],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The contract with the Python side: what the chart renders is what the settings classes
    # read (names, value formats, "none" for an unset bound, comma lists, empty = off).
    from interceptor.settings import InterceptorSettings, Mode
    from sidecar.settings import LogFormat, SidecarSettings

    manifests = example_manifests if variant == "default" else full_manifests
    spec = pod_spec(manifests)
    for name in [n for n in os.environ if n.startswith("PROGRESS_CONTROL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PROGRESS_CONTROL_KAFKA_SECRETS_DIR", str(tmp_path / "no-secrets"))
    for name, value in _container_env(sidecar_of(spec), manifests).items():
        monkeypatch.setenv(name, value)
    settings = SidecarSettings.from_config({})
    assert settings.http_host == "0.0.0.0"  # noqa: S104
    assert settings.http_port == 8081
    assert settings.log_format is LogFormat.JSON
    assert settings.report_listen == (
        "unix:///var/run/progress-control/reports.sock"
        if variant == "default"
        else "127.0.0.1:7072"
    )
    if variant == "default":
        assert settings.kafka == {"bootstrap.servers": "kafka:9092"}
        schedule = (settings.start_ms, settings.max_records, settings.end_ms)
        assert schedule == (1_000, None, 3_600_000)
        assert settings.watch_enabled is True
        assert settings.shutdown_timeout_s == 10
        assert settings.report_socket_mode == 0o660
        assert settings.report_allowed_uids == ()
    else:
        assert settings.kafka["bootstrap.servers"] == "broker-0.kafka:9093,broker-1.kafka:9093"
        assert settings.kafka["security.protocol"] == "SASL_SSL"
        assert settings.kafka["message.max.bytes"] == "2000000"
        assert settings.kafka["sasl.username"] == "secret:sasl.username"
        assert settings.kafka["sasl.password"] == "secret:sasl.password"
        assert (settings.max_records, settings.end_ms) == (None, 3_600_000)
        assert settings.backoff_exponential is False
        assert settings.topics_include == ("orders", r"payments\..*")
        assert settings.topics_exclude == ("_.*",)
        assert settings.watch_enabled is False
        assert settings.log_level == "DEBUG"
        assert settings.jitter_ms == 500
        assert settings.shutdown_timeout_s == 20
        assert settings.signing_key is not None
        assert settings.signing_key.key_id == "shop-2026"
        assert settings.signing_key.secret == b"secret:signing-secret"

    [app] = [c for c in spec["containers"] if c["name"] != "progress-control"]
    for name in [n for n in os.environ if n.startswith("PROGRESS_CONTROL_")]:
        monkeypatch.delenv(name)
    for name, value in _container_env(app, manifests).items():
        monkeypatch.setenv(name, value)
    app_settings = InterceptorSettings.from_config({})
    assert app_settings.mode is Mode.REPORT
    assert app_settings.report_address == settings.report_listen


def test_secret_mount(example_manifests: list[Manifest], full_manifests: list[Manifest]) -> None:
    spec = pod_spec(full_manifests)
    mounts = {m["name"]: m for m in sidecar_of(spec)["volumeMounts"]}
    assert mounts["progress-control-secrets"] == {
        "name": "progress-control-secrets",
        "mountPath": "/var/run/secrets/progress-control",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["progress-control-secrets"]["secret"]["secretName"] == "kafka-credentials"
    assert volumes["progress-control-secrets"]["secret"]["defaultMode"] == 0o444
    default_spec = pod_spec(example_manifests)
    assert [m["name"] for m in sidecar_of(default_spec)["volumeMounts"]] == [
        "progress-control-tmp",
        "progress-control-reports",
    ]
    assert "progress-control-secrets" not in {v["name"] for v in default_spec["volumes"]}


def test_app_container_reports_to_the_sidecar(example_manifests: list[Manifest]) -> None:
    spec = pod_spec(example_manifests)
    [app] = spec["containers"]
    env = env_of(app)
    assert env["PROGRESS_CONTROL_MODE"]["value"] == "report"
    assert env["PROGRESS_CONTROL_REPORT_ADDRESS"]["value"] == SOCKET_ADDRESS
    assert app["command"] == ["progress-control", "run", "--"]
    assert app["args"] == ["python", "-m", "shop.producer"]
    # Over a Unix datagram socket on an in-memory emptyDir both containers mount.
    mount = {"name": "progress-control-reports", "mountPath": SOCKET_DIR}
    assert mount in app["volumeMounts"]
    assert mount in sidecar_of(spec)["volumeMounts"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "progress-control-reports"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
    config = one(example_manifests, "ConfigMap")["data"]
    assert config["PROGRESS_CONTROL_REPORT_LISTEN"] == SOCKET_ADDRESS


@pytest.mark.parametrize(
    ("args", "listen"),
    [
        (["--set", "sidecar.report.transport=udp"], "127.0.0.1:7071"),
        (["--set", "sidecar.report.transport=udp,sidecar.report.port=7100"], "127.0.0.1:7100"),
        (["--set", "sidecar.report.enabled=false"], ""),
    ],
    ids=["udp", "udp-port", "reports-off"],
)
def test_report_transport_variants(helm: Helm, args: list[str], listen: str) -> None:
    manifests = helm.render(*EXAMPLE, *args)
    validate_strictly(manifests, KUBE_VERSION)
    spec = pod_spec(manifests)
    [app] = spec["containers"]
    assert one(manifests, "ConfigMap")["data"]["PROGRESS_CONTROL_REPORT_LISTEN"] == listen
    env = env_of(app)
    if listen:
        assert env["PROGRESS_CONTROL_REPORT_ADDRESS"]["value"] == listen
    else:
        assert "PROGRESS_CONTROL_REPORT_ADDRESS" not in env
        assert "PROGRESS_CONTROL_MODE" not in env
    # No socket: no shared volume, in either container.
    assert "progress-control-reports" not in {v["name"] for v in spec["volumes"]}
    for container in (app, sidecar_of(spec)):
        assert "progress-control-reports" not in {m["name"] for m in container["volumeMounts"]}


def test_report_socket_mode_and_allowed_uids(helm: Helm) -> None:
    from sidecar.settings import SidecarSettings

    args = ["--set", "sidecar.report.socketMode=0666,sidecar.report.allowedUids={1000,1001}"]
    config = one(helm.render(*EXAMPLE, *args), "ConfigMap")["data"]
    assert config["PROGRESS_CONTROL_REPORT_SOCKET_MODE"] == "0666"
    assert config["PROGRESS_CONTROL_REPORT_ALLOWED_UIDS"] == "1000,1001"
    settings = SidecarSettings.from_config(
        {
            "progress.control.kafka": {"bootstrap.servers": "kafka:9092"},
            "progress.control.report.listen": config["PROGRESS_CONTROL_REPORT_LISTEN"],
            "progress.control.report.socket.mode": config["PROGRESS_CONTROL_REPORT_SOCKET_MODE"],
            "progress.control.report.allowed.uids": config["PROGRESS_CONTROL_REPORT_ALLOWED_UIDS"],
        }
    )
    assert (settings.report_socket_mode, settings.report_allowed_uids) == (0o666, (1000, 1001))
    # UDP cannot tell the sender: neither is rendered.
    udp = one(helm.render(*EXAMPLE, *args, "--set", "sidecar.report.transport=udp"), "ConfigMap")
    assert "PROGRESS_CONTROL_REPORT_ALLOWED_UIDS" not in udp["data"]


def test_reports_socket_templates_one_include_each(helm: Helm, tmp_path: Path) -> None:
    # The named templates a user's pod needs for the socket, rendered on their own.
    chart = tmp_path / "progress-control"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "probe.yaml").write_text(
        "volumes:\n"
        '{{- include "progress-control.reports.volume" . | nindent 2 }}\n'
        "mounts:\n"
        '{{- include "progress-control.app.volumeMounts" . | nindent 2 }}\n'
    )
    result = helm.template("--show-only", "templates/probe.yaml", chart=chart)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == {
        "volumes": [
            {
                "name": "progress-control-reports",
                "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
            }
        ],
        "mounts": [{"name": "progress-control-reports", "mountPath": SOCKET_DIR}],
    }
    udp = helm.template(
        "--show-only", "templates/probe.yaml", "--set", "sidecar.report.transport=udp", chart=chart
    )
    assert yaml.safe_load(udp.stdout) == {"volumes": None, "mounts": None}


def test_probes(example_manifests: list[Manifest]) -> None:
    sidecar = sidecar_of(pod_spec(example_manifests))
    [port] = sidecar["ports"]
    assert port == {"name": "pc-http", "containerPort": 8081, "protocol": "TCP"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}


@pytest.mark.parametrize("variant", ["default", "full", "full-native"])
def test_nothing_ties_the_apps_readiness_to_the_broker(
    variant: str,
    example_manifests: list[Manifest],
    full_manifests: list[Manifest],
    full_native_manifests: list[Manifest],
) -> None:
    # /readyz and /healthz mean "the sidecar process is up" (the broker's state is in metrics
    # and logs): the chart's only probes in the app's pod are those, on the sidecar's own port.
    manifests = {
        "default": example_manifests,
        "full": full_manifests,
        "full-native": full_native_manifests,
    }[variant]
    spec = pod_spec(manifests)
    sidecar = sidecar_of(spec)
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        probes = {k: v for k, v in container.items() if k.endswith("Probe")}
        if container is not sidecar:
            assert probes == {}, container["name"]
            continue
        assert {k: v["httpGet"]["path"] for k, v in probes.items()} == {
            "startupProbe": "/healthz",
            "livenessProbe": "/healthz",
            "readinessProbe": "/readyz",
        }
        assert {v["httpGet"]["port"] for v in probes.values()} == {8081}
        assert all(set(v) != {"exec"} for v in probes.values())  # no exec probe asks Kafka


def test_probes_follow_the_http_port(helm: Helm) -> None:
    manifests = helm.render(*EXAMPLE, "--set", "sidecar.http.port=9100")
    sidecar = sidecar_of(pod_spec(manifests))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert sidecar[probe]["httpGet"]["port"] == 9100
    assert env_of(sidecar)["PROGRESS_CONTROL_HTTP_PORT"]["value"] == "9100"


@pytest.mark.parametrize("variant", ["default", "full"])
def test_security_context_and_resources(
    variant: str, example_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    spec = pod_spec(example_manifests if variant == "default" else full_manifests)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"]["memory"]
        assert container["resources"]["limits"]["memory"]
    sidecar = sidecar_of(spec)
    assert sidecar["securityContext"]["runAsUser"] == 10001
    assert sidecar["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sidecar["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"memory": "128Mi"},
    }
    tmp = next(v for v in spec["volumes"] if v["name"] == "progress-control-tmp")
    assert "emptyDir" in tmp
    tmp_mount = {"name": "progress-control-tmp", "mountPath": "/tmp"}  # noqa: S108
    assert tmp_mount in sidecar["volumeMounts"]


def test_grace_period_exceeds_the_sidecar_shutdown_timeout(
    helm: Helm, full_manifests: list[Manifest]
) -> None:
    spec = pod_spec(full_manifests)
    timeout = int(env_of(sidecar_of(spec))["PROGRESS_CONTROL_SHUTDOWN_TIMEOUT_S"]["value"])
    assert spec["terminationGracePeriodSeconds"] > timeout
    stderr = helm.rejected(*EXAMPLE, "--set", "example.terminationGracePeriodSeconds=10")
    assert "must exceed sidecar.shutdownTimeoutSeconds" in stderr


def test_config_changes_roll_the_pods(helm: Helm, example_manifests: list[Manifest]) -> None:
    def checksum(manifests: list[Manifest]) -> str:
        deployment = app_deployment(manifests)
        value: str = deployment["spec"]["template"]["metadata"]["annotations"][
            "checksum/progress-control-config"
        ]
        return value

    changed = helm.render(*EXAMPLE, "--set", "schedule.startMs=20000")
    assert checksum(changed) != checksum(example_manifests)
    assert checksum(helm.render(*EXAMPLE)) == checksum(example_manifests)  # deterministic

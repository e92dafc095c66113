"""The Helm chart in helm/progress-control, rendered by a real Helm and validated strictly.

Helm comes from :func:`progress_control.tools.helm.helm_binary` (built once from the Go module proxy
and cached, or ``$PROGRESS_CONTROL_HELM``). Every rendered manifest is checked against the
Kubernetes JSON schemas shipped with ``kubernetes-validate`` in strict mode (unknown fields are
errors). Each values variant is rendered once per module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from progress_control.kafka_properties import SECRET_NAME_PATTERN, is_secret_property
from progress_control.tools.helm import HELM_VERSION, helm_binary, helm_needs_build
from tests.helpers import undocumented_metrics
from tests.paths import ROOT

CHART = ROOT / "helm" / "progress-control"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
SPARK_VALUES = CHART / "ci" / "spark-values.yaml"
README = ROOT / "helm" / "README.md"

KUBE_VERSION = "1.37.0"
"""Cluster version for rendering and validation: the newest kubernetes-validate ships."""
OLDEST_KUBE_VERSION = "1.25.0"
"""The chart's kubeVersion floor (sidecar.native=false); kubernetes-validate's oldest schemas."""
RELEASE = "rel"
NAMESPACE = "streaming"

Manifest = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# helpers


SCHEMA_ERROR = "values don't meet the specifications of the schema"


class Helm:
    """Runs the helm binary with isolated config/cache/data dirs (no repositories, no plugins)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def template(
        self, *args: str, chart: Path = CHART, kube_version: str = KUBE_VERSION
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "template",
            RELEASE,
            str(chart),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            kube_version,
            *args,
            check=False,
        )

    def rejected(self, *args: str, **kwargs: Any) -> str:
        """``helm template`` that must fail; its stderr."""
        result = self.template(*args, **kwargs)
        assert result.returncode != 0, f"helm template {args} should fail"
        return result.stderr

    def render(self, *args: str, **kwargs: Any) -> list[Manifest]:
        result = self.template(*args, **kwargs)
        if result.returncode != 0:
            pytest.fail(f"helm template {' '.join(args)} failed:\n{result.stderr}")
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(manifests: list[Manifest], kind: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[m['metadata']['name'] for m in found]}"
    return found[0]


def settings_config_map(manifests: list[Manifest]) -> Manifest:
    """The sidecar's settings ConfigMap (not the dashboard's)."""
    return one(
        [m for m in manifests if not m["metadata"]["name"].endswith("-dashboard")], "ConfigMap"
    )


def metrics_service(manifests: list[Manifest]) -> Manifest:
    [service] = [
        m for m in manifests if m["kind"] == "Service" and "-metrics" in m["metadata"]["name"]
    ]
    return service


def app_deployment(manifests: list[Manifest]) -> Manifest:
    """The one Deployment with the sidecar in it (the example's, or a parent chart's): not the
    ticker's."""
    return one(
        [m for m in manifests if not m["metadata"]["name"].endswith("-ticker")], "Deployment"
    )


def pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = app_deployment(manifests)["spec"]["template"]["spec"]
    return spec


def sidecar_of(spec: dict[str, Any]) -> dict[str, Any]:
    """The progress-control container, wherever it is; asserts there is exactly one."""
    found = [
        c
        for c in [*(spec.get("initContainers") or []), *spec["containers"]]
        if c["name"] == "progress-control"
    ]
    assert len(found) == 1
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def validate_strictly(manifests: list[Manifest], kube_version: str) -> list[str]:
    """Validate every manifest; return the kinds that were checked."""
    checked = []
    for manifest in manifests:
        if manifest["apiVersion"].startswith("monitoring.coreos.com/"):
            # A CRD of the Prometheus Operator: not in the Kubernetes schemas.
            # test_service_monitor_selects_the_metrics_service checks it instead.
            continue
        if manifest["apiVersion"].startswith("sparkoperator.k8s.io/"):
            # A CRD of the Spark operator: check_spark_application checks it instead.
            continue
        problem = None
        try:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            # Only the message and where: the exception itself dumps the whole schema.
            problem = f"at {'.'.join(str(p) for p in exc.path)}: {exc.message}"
        if problem:
            pytest.fail(
                f"{manifest['kind']}/{manifest['metadata']['name']} is invalid for Kubernetes "
                f"{kube_version} {problem}",
                pytrace=False,
            )
        checked.append(manifest["kind"])
    return checked


# ---------------------------------------------------------------------------------------------
# fixtures: one render per values variant


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Helm:
    binary = None
    if helm_needs_build():
        # A first build takes minutes: show its steps and progress on the terminal, uncaptured.
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        reporter = pytestconfig.pluginmanager.getplugin("terminalreporter")
        if capture is not None:
            with capture.global_and_fixture_disabled():
                if reporter is not None:
                    reporter.ensure_newline()
                binary = helm_binary()
    return Helm(binary or helm_binary(), tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def default_manifests(helm: Helm) -> list[Manifest]:
    return helm.render()


EXAMPLE = [
    "--set",
    "example.enabled=true,example.app.image.repository=registry.example.com/shop/producer",
    "--set-json",
    'example.app.args=["python","-m","shop.producer"]',
]
"""The least that renders the example Deployment: it is off by default, and needs a producer."""


@pytest.fixture(scope="module")
def example_manifests(helm: Helm) -> list[Manifest]:
    """Default values with the example Deployment on."""
    return helm.render(*EXAMPLE)


@pytest.fixture(scope="module")
def full_manifests(helm: Helm) -> list[Manifest]:
    return helm.render("-f", str(FULL_VALUES))


@pytest.fixture(scope="module")
def full_native_manifests(helm: Helm) -> list[Manifest]:
    return helm.render("-f", str(FULL_VALUES), "--set", "sidecar.native=true")


@pytest.fixture(scope="module")
def spark_manifests(helm: Helm) -> list[Manifest]:
    """ci/spark-values.yaml: every sparkSessionization option set."""
    return helm.render("-f", str(SPARK_VALUES))


@pytest.fixture(scope="module")
def readme_spark_manifests(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """The README's sparkSessionization example, everything else at its default."""
    values = tmp_path_factory.mktemp("readme-spark") / "values.yaml"
    values.write_text(readme_block("sparkSessionization:"))
    return helm.render("-f", str(values))


@pytest.fixture(scope="module")
def parent_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's chart with this chart as a dependency, using the README's Deployment snippet."""
    parent = tmp_path_factory.mktemp("parent") / "shop"
    (parent / "templates").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts" / "progress-control")
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "shop",
                "version": "1.0.0",
                "dependencies": [
                    {
                        "name": "progress-control",
                        "version": version,
                        "repository": "file://../progress-control",
                    }
                ],
            }
        )
    )
    (parent / "values.yaml").write_text(readme_block("progress-control:"))
    (parent / "templates" / "deployment.yaml").write_text(readme_block('index .Subcharts "'))
    return parent


def readme_block(marker: str) -> str:
    """The fenced yaml block of helm/README.md that contains ``marker``."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one README yaml block with {marker!r}"
    return found[0]


# ---------------------------------------------------------------------------------------------
# helm lint and strict schema validation of everything rendered


def test_helm_is_the_pinned_release(helm: Helm) -> None:
    version = helm.run("version", "--template", "{{ .Version }}").stdout.strip()
    if os.environ.get("PROGRESS_CONTROL_HELM"):
        assert re.fullmatch(r"v[34]\.\d+\.\d+.*", version), version
    else:
        assert version == f"v{HELM_VERSION}"


@pytest.mark.parametrize(
    "values", [None, FULL_VALUES, SPARK_VALUES], ids=["default", "full", "spark"]
)
def test_helm_lint_strict(helm: Helm, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    result = helm.run(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_default_render_validates_strictly(default_manifests: list[Manifest]) -> None:
    # A plain `helm install` deploys only the sidecar's settings: nothing that runs a command
    # the image lacks (the example producer used to run /app/producer.py and crash-loop).
    assert validate_strictly(default_manifests, KUBE_VERSION) == ["ConfigMap"]


def test_example_render_validates_strictly(example_manifests: list[Manifest]) -> None:
    assert sorted(validate_strictly(example_manifests, KUBE_VERSION)) == ["ConfigMap", "Deployment"]


def test_full_render_validates_strictly(full_manifests: list[Manifest]) -> None:
    kinds = validate_strictly(full_manifests, KUBE_VERSION)
    assert sorted(kinds) == [
        "ConfigMap",  # the settings
        "ConfigMap",  # the dashboard
        "Deployment",  # the example
        "Deployment",  # the ticker
        "NetworkPolicy",  # the runtime's
        "NetworkPolicy",  # the ticker's
        "Pod",
        "PodDisruptionBudget",
        "PodDisruptionBudget",
        "Service",  # the sidecars' metrics
        "Service",  # the runtime's, headless
        "Service",  # the ticker's
        "StatefulSet",
    ]
    # The sidecars', the runtime's and the ticker's.
    assert [m["kind"] for m in full_manifests].count("ServiceMonitor") == 3


def test_full_native_render_validates_strictly(full_native_manifests: list[Manifest]) -> None:
    validate_strictly(full_native_manifests, KUBE_VERSION)


def test_fallback_renders_for_the_oldest_supported_cluster(helm: Helm) -> None:
    manifests = helm.render("-f", str(FULL_VALUES), kube_version=OLDEST_KUBE_VERSION)
    validate_strictly(manifests, OLDEST_KUBE_VERSION)
    assert "initContainers" not in pod_spec(manifests)


def test_native_sidecar_refuses_clusters_without_native_sidecars(helm: Helm) -> None:
    stderr = helm.rejected(kube_version="1.28.9")
    assert "sidecar.native=true needs Kubernetes >= 1.29" in stderr
    assert helm.template("--set", "sidecar.native=false", kube_version="1.28.9").returncode == 0


def test_validation_catches_an_invalid_manifest(example_manifests: list[Manifest]) -> None:
    # The strict validator really rejects unknown fields (so the checks above mean something).
    broken = json.loads(json.dumps(one(example_manifests, "Deployment")))
    sidecar_of(broken["spec"]["template"]["spec"])["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


# ---------------------------------------------------------------------------------------------
# what renders


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


def _container_env(container: dict[str, Any], manifests: list[Manifest]) -> dict[str, str]:
    """The env a container would see: envFrom ConfigMaps, then env (secrets as placeholders)."""
    config_maps = {m["metadata"]["name"]: m["data"] for m in manifests if m["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "secretKeyRef" in item["valueFrom"]:
            env[item["name"]] = f"secret:{item['valueFrom']['secretKeyRef']['key']}"
        else:
            env[item["name"]] = "from-the-pod"
    return env


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


SOCKET_DIR = "/var/run/progress-control"
SOCKET_ADDRESS = f"unix://{SOCKET_DIR}/reports.sock"


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


def service_monitor(manifests: list[Manifest], name: str) -> Manifest:
    [monitor] = [
        m for m in manifests if m["kind"] == "ServiceMonitor" and m["metadata"]["name"] == name
    ]
    return monitor


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


# ---------------------------------------------------------------------------------------------
# values.schema.json and the template checks reject bad values


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


# ---------------------------------------------------------------------------------------------
# documentation


def _leaf_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict) and node:
        for key, child in node.items():
            yield from _leaf_paths(child, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def test_every_value_is_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    readme = README.read_text()
    missing = [p for p in _leaf_paths(yaml.safe_load(text)) if f"| `{p}` |" not in readme]
    assert not missing, f"values missing from the helm/README.md table: {missing}"
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][\w.-]*:", line):
            previous = lines[number - 1].strip()
            assert previous.startswith("#"), f"values.yaml line {number + 1} has no comment"


def test_readme_snippet_in_a_parent_chart(helm: Helm, parent_chart: Path) -> None:
    lint = helm.run("lint", "--strict", str(parent_chart), "--kube-version", KUBE_VERSION)
    assert "0 chart(s) failed" in lint.stdout
    for native in ("true", "false"):
        manifests = helm.render(
            "--set", f"progress-control.sidecar.native={native}", chart=parent_chart
        )
        validate_strictly(manifests, KUBE_VERSION)
        # The example is off: the only Deployment is the parent's, with our sidecar in it.
        deployment = app_deployment(manifests)
        assert deployment["metadata"]["name"] == f"{RELEASE}-producer"
        spec = deployment["spec"]["template"]["spec"]
        sidecar = sidecar_of(spec)
        if native == "true":
            assert spec["initContainers"] == [sidecar]
            assert sidecar["restartPolicy"] == "Always"
        else:
            assert spec["initContainers"] is None
            assert spec["containers"][-1] == sidecar
        # The sidecar reads the ConfigMap our chart rendered, with the parent's values.
        config_map = one(manifests, "ConfigMap")
        assert sidecar["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
        data = config_map["data"]
        assert data["PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS"] == "kafka.kafka:9092"
        assert data["PROGRESS_CONTROL_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL"
        assert env_of(sidecar)["PROGRESS_CONTROL_KAFKA__SASL_PASSWORD"]["valueFrom"] == {
            "secretKeyRef": {"name": "kafka-credentials", "key": "password"}
        }
        assert sidecar["image"] == "registry.example.com/progress-control:0.1.0"
        [app] = [c for c in spec["containers"] if c["name"] == "producer"]
        assert env_of(app)["PROGRESS_CONTROL_MODE"]["value"] == "report"
        assert {v["name"] for v in spec["volumes"]} == {
            "progress-control-tmp",
            "progress-control-reports",
        }
        # The socket: the README's app container mounts it, and reports to it.
        assert {"name": "progress-control-reports", "mountPath": SOCKET_DIR} in app["volumeMounts"]
        assert env_of(app)["PROGRESS_CONTROL_REPORT_ADDRESS"]["value"] == SOCKET_ADDRESS


# ---------------------------------------------------------------------------------------------
# the sessionization SparkApplication (sparkSessionization.*)

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
# Fields of the Spark operator's v1beta2 API (api/v1beta2/sparkapplication_types.go): the CRD is
# not in kubernetes-validate's schemas, so unknown fields are caught against these sets.
SPARK_SPEC_FIELDS = {
    "type", "sparkVersion", "mode", "proxyUser", "image", "imagePullPolicy", "imagePullSecrets",
    "mainClass", "mainApplicationFile", "arguments", "sparkConf", "hadoopConf", "sparkConfigMap",
    "hadoopConfigMap", "volumes", "driver", "executor", "deps", "restartPolicy", "nodeSelector",
    "failureRetries", "retryInterval", "pythonVersion", "memoryOverheadFactor", "monitoring",
    "batchScheduler", "timeToLiveSeconds", "batchSchedulerOptions", "sparkUIOptions",
    "driverIngressOptions", "dynamicAllocation",
}  # fmt: skip
SPARK_REQUIRED_SPEC_FIELDS = {
    # Required by the CRD (type, sparkVersion, mainApplicationFile, driver, executor), plus what
    # a runnable application of this chart needs (mode, image).
    "type", "mode", "image", "mainApplicationFile", "sparkVersion", "driver", "executor",
}  # fmt: skip
SPARK_POD_FIELDS = {
    "template", "cores", "coreLimit", "memory", "memoryOverhead", "gpu", "image", "configMaps",
    "secrets", "env", "envVars", "envFrom", "envSecretKeyRefs", "labels", "annotations",
    "volumeMounts", "affinity", "tolerations", "podSecurityContext", "securityContext",
    "schedulerName", "sidecars", "initContainers", "hostNetwork", "nodeSelector", "dnsConfig",
    "terminationGracePeriodSeconds", "serviceAccount", "hostAliases", "shareProcessNamespace",
    "runtimeClassName",
}  # fmt: skip
SPARK_DRIVER_FIELDS = SPARK_POD_FIELDS | {
    "podName", "coreRequest", "javaOptions", "lifecycle", "kubernetesMaster",
    "serviceAnnotations", "serviceLabels", "ports", "priorityClassName",
}  # fmt: skip
SPARK_EXECUTOR_FIELDS = SPARK_POD_FIELDS | {
    "instances", "coreRequest", "javaOptions", "lifecycle", "deleteOnTermination", "ports",
    "priorityClassName",
}  # fmt: skip
SPARK_RESTART_FIELDS = {
    "type", "onFailureRetries", "onFailureRetryInterval", "onSubmissionFailureRetries",
    "onSubmissionFailureRetryInterval",
}  # fmt: skip

ENABLE_SPARK = [
    "--set",
    "sparkSessionization.enabled=true,sparkSessionization.image.repository=registry.example.com/"
    "spark,sparkSessionization.storage.claimName=sessionization-data",
]
"""The least that renders the SparkApplication."""


def spark_application(manifests: list[Manifest]) -> Manifest:
    """The one SparkApplication, checked with check_spark_application."""
    app = one(manifests, "SparkApplication")
    check_spark_application(app)
    return app


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def check_spark_application(app: Manifest) -> None:
    """Check a SparkApplication against the v1beta2 API, then its Kubernetes core types strictly.

    The driver's and the executors' pods as the operator's webhook would build them (volumes,
    mounts, security contexts, labels, CPU quantities, ServiceAccount) are validated as Pods
    with kubernetes-validate, so the core types embedded in the custom resource are strict too.
    """
    assert app["apiVersion"] == SPARK_API_VERSION
    assert app["kind"] == "SparkApplication"
    assert set(app) == {"apiVersion", "kind", "metadata", "spec"}
    name = app["metadata"]["name"]
    # The operator names the UI Service "<name>-ui-svc", which must be a DNS-1035 label.
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert len(f"{name}-ui-svc") <= 63
    spec = app["spec"]
    assert set(spec) <= SPARK_SPEC_FIELDS, set(spec) - SPARK_SPEC_FIELDS
    missing = SPARK_REQUIRED_SPEC_FIELDS - set(spec)
    assert not missing, f"SparkApplication without {sorted(missing)}"
    assert spec["type"] == "Python"
    assert spec["mode"] == "cluster"
    for field in ("image", "mainApplicationFile", "sparkVersion"):
        assert isinstance(spec[field], str), field
        assert spec[field], field
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec["sparkVersion"])
    assert re.fullmatch(r"[a-z][a-z0-9+.-]*://.+", spec["mainApplicationFile"])
    assert spec["imagePullPolicy"] in {"Always", "IfNotPresent", "Never"}
    assert _is_str_list(spec["arguments"])
    assert _is_str_list(spec.get("imagePullSecrets", []))
    assert all(
        isinstance(k, str) and isinstance(v, str) for k, v in spec.get("sparkConf", {}).items()
    )
    assert "deps" not in spec  # the image carries the connector jars

    policy = spec["restartPolicy"]
    assert set(policy) <= SPARK_RESTART_FIELDS
    assert policy["type"] in {"Never", "OnFailure", "Always"}
    for field in ("onFailureRetries", "onSubmissionFailureRetries"):
        assert isinstance(policy.get(field, 0), int)
        assert policy.get(field, 0) >= 0
    for field in ("onFailureRetryInterval", "onSubmissionFailureRetryInterval"):
        assert isinstance(policy.get(field, 1), int)
        assert policy.get(field, 1) >= 1

    volumes = {v["name"] for v in spec.get("volumes", [])}
    for role, fields in (("driver", SPARK_DRIVER_FIELDS), ("executor", SPARK_EXECUTOR_FIELDS)):
        pod = spec[role]
        assert set(pod) <= fields, f"{role}: {set(pod) - fields}"
        assert isinstance(pod["cores"], int)
        assert pod["cores"] >= 1
        for field in ("memory", "memoryOverhead", "coreRequest", "coreLimit", "serviceAccount"):
            assert isinstance(pod.get(field, ""), str), f"{role}.{field}"
        assert re.fullmatch(r"\d+[kmgtp]b?", pod["memory"].lower()), pod["memory"]
        mounts = pod.get("volumeMounts", [])
        assert {m["name"] for m in mounts} <= volumes, f"{role} mounts a volume not in spec.volumes"
        resources: dict[str, dict[str, str]] = {}
        if "coreRequest" in pod:
            resources["requests"] = {"cpu": pod["coreRequest"]}
        if "coreLimit" in pod:
            resources["limits"] = {"cpu": pod["coreLimit"]}
        as_pod: Manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-{role}", "labels": pod["labels"]},
            "spec": {
                "securityContext": pod["podSecurityContext"],
                "imagePullSecrets": [{"name": s} for s in spec.get("imagePullSecrets", [])],
                "containers": [
                    {
                        "name": f"spark-kubernetes-{role}",
                        "image": spec["image"],
                        "imagePullPolicy": spec["imagePullPolicy"],
                        "securityContext": pod["securityContext"],
                        "volumeMounts": mounts,
                        "envFrom": pod.get("envFrom", []),
                        "resources": resources,
                    }
                ],
                "volumes": [
                    v for v in spec.get("volumes", []) if v["name"] in {m["name"] for m in mounts}
                ],
            },
        }
        if "serviceAccount" in pod:
            as_pod["spec"]["serviceAccountName"] = pod["serviceAccount"]
        validate_strictly([as_pod], KUBE_VERSION)
    assert isinstance(spec["executor"]["instances"], int)
    assert spec["executor"]["instances"] >= 1
    assert "serviceAccount" in spec["driver"]  # the driver creates the executor pods


def parsed_arguments(app: Manifest) -> Any:
    """The SparkApplication's arguments as `python -m progress_control.spark` parses them."""
    from progress_control.spark.cli import build_parser

    return build_parser().parse_args(app["spec"]["arguments"])


def test_spark_application_is_off_by_default(
    default_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    for manifests in (default_manifests, full_manifests):
        kinds = [m["kind"] for m in manifests]
        assert "SparkApplication" not in kinds
        assert not {"ServiceAccount", "Role", "RoleBinding"} & set(kinds)
        assert not [m for m in manifests if m["metadata"]["name"].endswith("-spark-entrypoint")]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["sparkSessionization"]["enabled"] is False


def test_spark_render_validates_strictly(
    spark_manifests: list[Manifest], readme_spark_manifests: list[Manifest]
) -> None:
    # Everything but the SparkApplication against the Kubernetes schemas, strictly; the
    # SparkApplication against the v1beta2 API (and its core types strictly, as Pods).
    assert sorted(validate_strictly(spark_manifests, KUBE_VERSION)) == ["ConfigMap", "ConfigMap"]
    assert sorted(validate_strictly(readme_spark_manifests, KUBE_VERSION)) == [
        "ConfigMap",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for manifests in (spark_manifests, readme_spark_manifests):
        assert [m["kind"] for m in manifests].count("SparkApplication") == 1
        spark_application(manifests)


def test_spark_application_check_catches_unknown_fields(
    readme_spark_manifests: list[Manifest],
) -> None:
    # The structural check really rejects what the operator's CRD would prune or refuse.
    app = spark_application(readme_spark_manifests)
    for path, value in [
        (("spec", "deps"), {"packages": ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]}),
        (("spec", "driver", "memoryy"), "1g"),
        (("spec", "executor", "cores"), "1"),
        (("spec", "driver", "podSecurityContext", "runAsUserr"), 185),
    ]:
        broken = json.loads(json.dumps(app))
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check_spark_application(broken)
    missing = json.loads(json.dumps(app))
    del missing["spec"]["mainApplicationFile"]
    with pytest.raises(AssertionError, match="mainApplicationFile"):
        check_spark_application(missing)


def test_spark_application_from_the_readme_example(readme_spark_manifests: list[Manifest]) -> None:
    app = spark_application(readme_spark_manifests)
    spec = app["spec"]
    assert app["metadata"]["name"] == f"{RELEASE}-progress-control-sessionization"
    assert app["metadata"]["labels"]["app.kubernetes.io/component"] == "spark-sessionization"
    assert app["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert spec["image"] == "registry.example.com/progress-control-spark:0.1.0"
    assert spec["sparkVersion"] == "4.2.0"
    args = parsed_arguments(app)
    assert args.bootstrap_servers == "kafka:9092"  # kafka.bootstrapServers
    assert args.topic == "clicks-enriched"
    assert args.gap == 30_000
    assert args.master == "k8s://https://kubernetes.default.svc:443"
    assert (args.output, args.checkpoint) == ("/data/sessions", "/data/checkpoints")
    assert (args.watermark_delay, args.trigger, args.starting_offsets) == (0, 1000, "earliest")
    assert args.max_offsets_per_trigger is None
    assert args.output_topic is None
    assert args.kafka_option == []
    assert args.conf == [("spark.sql.shuffle.partitions", "16")]
    # sparkConf passes through, every value a string (the CRD's map[string]string).
    assert spec["sparkConf"] == {"spark.sql.streaming.metricsEnabled": "true"}
    assert spec["restartPolicy"] == {
        "type": "OnFailure",
        "onFailureRetries": 3,
        "onFailureRetryInterval": 10,
        "onSubmissionFailureRetries": 5,
        "onSubmissionFailureRetryInterval": 20,
    }
    driver, executor = spec["driver"], spec["executor"]
    assert (driver["cores"], driver["memory"]) == (1, "1g")
    assert (executor["instances"], executor["cores"], executor["memory"]) == (2, 1, "4g")
    for pod in (driver, executor):
        assert not {"coreRequest", "coreLimit", "memoryOverhead"} & set(pod)
        assert pod["podSecurityContext"]["runAsNonRoot"] is True
        assert pod["podSecurityContext"]["runAsUser"] == 185
        assert pod["podSecurityContext"]["fsGroup"] == 185
        assert pod["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert pod["labels"]["app.kubernetes.io/component"] == "spark-sessionization"
    # The checkpoint volume: the existing claim on the driver and every executor.
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "sessionization-data"},
    }
    data_mount = {"name": "data", "mountPath": "/data"}
    assert data_mount in driver["volumeMounts"]
    assert executor["volumeMounts"] == [data_mount]


def test_spark_application_from_every_value(spark_manifests: list[Manifest]) -> None:
    app = spark_application(spark_manifests)
    spec = app["spec"]
    assert spec["image"] == "registry.example.com/progress-control-spark:0.1.0-spark4.2.0"
    assert spec["imagePullPolicy"] == "Always"
    assert spec["imagePullSecrets"] == ["registry-credentials"]
    arguments = spec["arguments"]
    assert arguments[0] == "stream"
    for option, value in [
        ("--bootstrap-servers", "broker-0.kafka:9093"),
        ("--topic", "clicks-enriched"),
        ("--gap", "45s"),
    ]:
        assert arguments[arguments.index(option) + 1] == value
    args = parsed_arguments(app)
    assert args.bootstrap_servers == "broker-0.kafka:9093"
    assert args.topic == "clicks-enriched"
    assert args.gap == 45_000
    assert (args.output, args.checkpoint) == ("/data/spark/sessions", "/data/spark/checkpoints")
    assert (args.watermark_delay, args.trigger) == (5_000, 2_000)
    assert args.starting_offsets == "latest"
    assert args.max_offsets_per_trigger == 100_000
    assert args.output_topic == "sessions-spark"
    assert args.kafka_option == [
        ("failOnDataLoss", "false"),
        ("kafka.security.protocol", "SSL"),
    ]
    assert args.conf == [("spark.sql.shuffle.partitions", "16")]
    assert args.run_for == 12 * 3_600_000  # extraArgs
    assert spec["sparkConf"] == {
        "spark.executor.extraJavaOptions": "-XX:+UseG1GC",
        "spark.kubernetes.executor.deleteOnTermination": "false",
        "spark.sql.streaming.metricsEnabled": "true",
    }
    assert spec["restartPolicy"] == {
        "type": "Always",
        "onFailureRetries": 10,
        "onFailureRetryInterval": 30,
        "onSubmissionFailureRetries": 3,
        "onSubmissionFailureRetryInterval": 60,
    }
    driver, executor = spec["driver"], spec["executor"]
    assert {k: driver[k] for k in ("cores", "coreRequest", "coreLimit", "memory")} == {
        "cores": 1,
        "coreRequest": "500m",
        "coreLimit": "1200m",
        "memory": "2g",
    }
    assert driver["memoryOverhead"] == "512m"
    assert {k: executor[k] for k in ("instances", "cores", "coreRequest", "coreLimit")} == {
        "instances": 3,
        "cores": 2,
        "coreRequest": "1500m",
        "coreLimit": "2",
    }
    assert (executor["memory"], executor["memoryOverhead"]) == ("4g", "1g")
    # An existing ServiceAccount: no RBAC rendered.
    assert driver["serviceAccount"] == "spark-operator-spark"
    kinds = [m["kind"] for m in spark_manifests]
    assert not {"ServiceAccount", "Role", "RoleBinding", "Deployment"} & set(kinds)
    assert driver["labels"]["team"] == "streaming"  # commonLabels
    assert app["metadata"]["labels"]["team"] == "streaming"
    assert {"name": "data", "mountPath": "/data"} in executor["volumeMounts"]


def test_spark_driver_runs_the_entry_script(
    readme_spark_manifests: list[Manifest], tmp_path: Path
) -> None:
    app = spark_application(readme_spark_manifests)
    spec = app["spec"]
    # mainApplicationFile is the script of the chart's ConfigMap, mounted on the driver.
    [config_map] = [
        m for m in readme_spark_manifests if m["metadata"]["name"].endswith("-spark-entrypoint")
    ]
    [(file_name, script)] = config_map["data"].items()
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    [mount] = [m for m in spec["driver"]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert spec["mainApplicationFile"] == f"local://{mount['mountPath']}/{file_name}"
    assert volume["name"] not in {m["name"] for m in spec["executor"]["volumeMounts"]}
    assert config_map["metadata"]["labels"]["app.kubernetes.io/component"] == (
        "spark-sessionization"
    )

    # spark-submit runs `python3 <file> <arguments>`: the script hands them to
    # progress_control.spark's CLI.
    path = tmp_path / file_name
    path.write_text(script)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(path), *arguments],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    result = run("stream", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m progress_control.spark stream" in result.stdout
    # The rendered arguments reach the parser: with an invalid gap it exits 2 naming --gap.
    arguments = list(spec["arguments"])
    arguments[arguments.index("--gap") + 1] = "30x"
    result = run(*arguments)
    assert result.returncode == 2
    assert "argument --gap: not a duration: '30x'" in result.stderr


def test_spark_driver_service_account_and_rbac(readme_spark_manifests: list[Manifest]) -> None:
    app = spark_application(readme_spark_manifests)
    account = one(readme_spark_manifests, "ServiceAccount")
    role = one(readme_spark_manifests, "Role")
    binding = one(readme_spark_manifests, "RoleBinding")
    name = account["metadata"]["name"]
    assert name == f"{RELEASE}-progress-control-spark"
    assert app["spec"]["driver"]["serviceAccount"] == name
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    [rule] = role["rules"]
    assert rule["apiGroups"] == [""]
    assert {"pods", "services", "configmaps"} <= set(rule["resources"])
    assert {"create", "delete", "get", "list", "watch"} <= set(rule["verbs"])
    for manifest in (account, role, binding):
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == (
            "spark-sessionization"
        )


@pytest.mark.parametrize(
    ("args", "volume", "entrypoint"),
    [
        (
            ["--set", "sparkSessionization.storage.type=emptyDir"],
            {"name": "data", "emptyDir": {}},
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=emptyDir,"
                "sparkSessionization.storage.sizeLimit=10Gi",
            ],
            {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}},
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=none,"
                "sparkSessionization.output=s3a://bucket/sessions,"
                "sparkSessionization.checkpoint=s3a://bucket/checkpoints",
            ],
            None,
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=none,"
                "sparkSessionization.output=s3a://bucket/sessions,"
                "sparkSessionization.checkpoint=s3a://bucket/checkpoints,"
                "sparkSessionization.mainApplicationFile=local:///app/stream.py",
            ],
            None,
            False,
        ),
    ],
    ids=["empty-dir", "empty-dir-size-limit", "object-storage", "own-main-file"],
)
def test_spark_storage_and_entry_script_variants(
    helm: Helm, args: list[str], volume: dict[str, Any] | None, entrypoint: bool
) -> None:
    manifests = helm.render(*ENABLE_SPARK, *args)
    validate_strictly(manifests, KUBE_VERSION)
    app = spark_application(manifests)
    spec = app["spec"]
    data = [v for v in spec.get("volumes", []) if v["name"] == "data"]
    assert data == ([volume] if volume else [])
    executor_mounts = spec["executor"].get("volumeMounts", [])
    assert executor_mounts == ([{"name": "data", "mountPath": "/data"}] if volume else [])
    config_maps = [m["metadata"]["name"] for m in manifests if m["kind"] == "ConfigMap"]
    assert any(n.endswith("-spark-entrypoint") for n in config_maps) is entrypoint
    if entrypoint:
        assert spec["mainApplicationFile"].startswith("local:///opt/progress-control/spark/")
    else:
        assert spec["mainApplicationFile"] == "local:///app/stream.py"
        assert "volumes" not in spec
        assert "volumeMounts" not in spec["driver"]


def test_spark_image_tag_defaults_to_the_app_version(helm: Helm) -> None:
    app = spark_application(helm.render(*ENABLE_SPARK))
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert app["spec"]["image"] == f"registry.example.com/spark:{version}"
    app = spark_application(helm.render(*ENABLE_SPARK, "--set", "image.tag=9.9.9"))
    assert app["spec"]["image"] == "registry.example.com/spark:9.9.9"  # follows the chart's tag


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sparkSessionization.bogus=1"], "bogus"),
        (["--set", "sparkSessionization.driver.gpu=1"], "gpu"),
        (["--set", "sparkSessionization.gap=30"], "'/sparkSessionization/gap': got number, want"),
        (["--set", "sparkSessionization.gap=30x"], "at '/sparkSessionization/gap'"),
        (["--set", "sparkSessionization.gap=0s"], "at '/sparkSessionization/gap'"),
        (["--set", "sparkSessionization.watermarkDelay=5"], "watermarkDelay"),
        (["--set", "sparkSessionization.sparkVersion=4.2"], "sparkVersion"),
        (["--set", "sparkSessionization.executor.instances=0"], "instances"),
        (["--set", "sparkSessionization.driver.memory=2GiB"], "memory"),
        (["--set", "sparkSessionization.restartPolicy.type=Sometimes"], "restartPolicy"),
        (["--set", "sparkSessionization.storage.type=hostPath"], "storage"),
        (["--set", "sparkSessionization.mainApplicationFile=/app/x.py"], "mainApplicationFile"),
        (["--set", "sparkSessionization.topic=a b"], "topic"),
        (
            ["--set-json", 'sparkSessionization.sparkConf={"executor.memory":"2g"}'],
            "invalid propertyName 'executor.memory'",
        ),
        (
            ["--set-json", 'sparkSessionization.jobConf={"sql.shuffle":"1"}'],
            "invalid propertyName 'sql.shuffle'",
        ),
        (
            ["--set", "sparkSessionization.enabled=true,sparkSessionization.storage.claimName=c"],
            "at '/sparkSessionization/image/repository': minLength",
        ),
        (
            [
                "--set",
                "sparkSessionization.enabled=true,sparkSessionization.image.repository=r/spark",
            ],
            "at '/sparkSessionization/storage/claimName': minLength",
        ),
        (
            [*ENABLE_SPARK, "--set", "sparkSessionization.serviceAccount.create=false"],
            "at '/sparkSessionization/serviceAccount/name': minLength",
        ),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "gap-as-number",
        "gap-bad-unit",
        "gap-zero",
        "delay-without-unit",
        "version-as-number",
        "no-executors",
        "kubernetes-memory-unit",
        "restart-policy-enum",
        "storage-type-enum",
        "main-file-not-a-uri",
        "topic-with-space",
        "spark-conf-not-spark",
        "job-conf-not-spark",
        "enabled-without-image",
        "enabled-without-claim",
        "enabled-without-service-account",
    ],
)
def test_spark_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "sparkSessionization.checkpoint=/tmp/checkpoints"],
            "sparkSessionization.checkpoint (/tmp/checkpoints) must be under storage.mountPath",
        ),
        (
            ["--set", "sparkSessionization.storage.mountPath=/mnt"],
            "sparkSessionization.output (/data/sessions) must be under storage.mountPath (/mnt)",
        ),
        (
            ["--set", "sparkSessionization.storage.type=none"],
            "sparkSessionization.output (/data/sessions) is a local path but storage.type is none",
        ),
    ],
    ids=["checkpoint-off-the-volume", "output-off-the-volume", "local-path-without-volume"],
)
def test_spark_template_checks_reject(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.rejected(*ENABLE_SPARK, *args)


# ---------------------------------------------------------------------------------------------
# a plain install runs nothing that crash-loops; the example needs a producer


def test_default_install_renders_no_workload(helm: Helm, default_manifests: list[Manifest]) -> None:
    assert [m["kind"] for m in default_manifests] == ["ConfigMap"]
    assert "/app/producer.py" not in helm.template().stdout
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["example"]["enabled"] is False
    assert values["runtime"]["enabled"] is False
    assert values["example"]["app"]["args"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "example.enabled=true"],
            "at '/example/app/image/repository': minLength",
        ),
        (
            ["--set", "example.enabled=true,example.app.image.repository=r/producer"],
            "example.app.args must name your producer",
        ),
    ],
    ids=["without-image", "default-command-without-args"],
)
def test_example_needs_a_producer(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.rejected(*args)


def test_example_with_its_image_entrypoint(helm: Helm) -> None:
    manifests = helm.render(
        "--set",
        "example.enabled=true,example.app.image.repository=r/producer",
        "--set-json",
        "example.app.command=[]",
    )
    [app] = [c for c in pod_spec(manifests)["containers"] if c["name"] == "producer"]
    assert "command" not in app
    assert "args" not in app


# ---------------------------------------------------------------------------------------------
# the streams runtime: StatefulSet, headless Service, PodDisruptionBudget (runtime.*)

RUNTIME = [
    "--set",
    "runtime.enabled=true,runtime.applicationId=sessions,"
    "runtime.queries.tokenSecret.name=query-token",
    "--set-json",
    'runtime.command=["python","-m","shop.sessions"]',
]
"""The least that renders the runtime."""
RUNTIME_NAME = f"{RELEASE}-progress-control-runtime"


@pytest.fixture(scope="module")
def runtime_manifests(helm: Helm) -> list[Manifest]:
    return helm.render(*RUNTIME)


def runtime_container(manifests: list[Manifest]) -> dict[str, Any]:
    [container] = one(manifests, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "runtime"
    return container


def headless_service(manifests: list[Manifest]) -> Manifest:
    [service] = [
        m for m in manifests if m["kind"] == "Service" and m["metadata"]["name"] == RUNTIME_NAME
    ]
    return service


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


def _runtime_env(
    container: dict[str, Any], pod_name: str, secrets: dict[str, str]
) -> dict[str, str]:
    """The env the kubelet would give the container: fields, Secrets (by key, from ``secrets``,
    else a placeholder) and $(VAR) references expanded."""
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"])
        elif "fieldRef" in item["valueFrom"]:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            value = pod_name
        else:
            key = item["valueFrom"]["secretKeyRef"]["key"]
            value = secrets.get(key, f"secret:{key}")
        env[item["name"]] = value
    return env


def _self_signed(directory: Path, *names: str) -> tuple[Path, Path]:
    """A self-signed certificate and key for ``names`` (DNS names or IP addresses), by openssl."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI makes the test's certificates"
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    alt = ",".join(f"IP:{n}" if n[0].isdigit() else f"DNS:{n}" for n in names)
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=progress-control-test", "-addext", f"subjectAltName={alt}",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def _plain(value: Any) -> Any:
    """A setting's value, whether it is kept as a pydantic SecretStr or as plain text."""
    return value.get_secret_value() if hasattr(value, "get_secret_value") else value


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
    env = _runtime_env(runtime_container(manifests), pod, {"keys": "k1:" + "s" * 32})
    # The TLS Secret's files, where the kubelet would mount them (the runtime loads them).
    mount = "/etc/progress-control/tls"
    host = f"{pod}.{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal"
    cert, _ = _self_signed(tmp_path / "tls", host)
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
        assert _plain(settings.query_token) == "secret:token"
        assert settings.state_dir == Path("/var/lib/progress-control")
        assert settings.metrics_port == 9090
        assert settings.kafka == {}
    else:
        assert settings.application_id == "shop-sessions"
        assert settings.application_server == (
            f"{pod}.{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal:8443"
        )
        assert _plain(settings.query_token) == "secret:query-token"
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


# ---------------------------------------------------------------------------------------------
# `helm test`


def test_pod(manifests: list[Manifest]) -> Manifest:
    [pod] = [m for m in manifests if m["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    return pod


test_pod.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def test_helm_test_checks_every_runtime_instance(runtime_manifests: list[Manifest]) -> None:
    pod = test_pod(runtime_manifests)
    assert pod["metadata"]["name"] == f"{RELEASE}-progress-control-test"
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == (
        "before-hook-creation,hook-succeeded"
    )
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    [check] = spec["containers"]
    assert check["image"] == "ghcr.io/kafka-progress-control/progress-control:0.1.0"
    assert check["command"][:2] == ["python", "-c"]
    assert check["securityContext"]["readOnlyRootFilesystem"] is True
    assert check["resources"]["requests"] == {"cpu": "10m", "memory": "32Mi"}
    env = env_of(check)
    assert env["PC_TEST_RUNTIME_URLS"]["value"].split() == [
        f"http://{RUNTIME_NAME}-{n}.{RUNTIME_NAME}.{NAMESPACE}.svc.cluster.local:8080/health"
        for n in range(2)
    ]
    assert env["PC_TEST_QUERY_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "query-token", "key": "token"}
    }
    assert "PC_TEST_SIDECAR_URLS" not in env
    # Each instance's probes, on its metrics port, as the kubelet asks them.
    assert env["PC_TEST_PROBE_URLS"]["value"].split() == [
        f"http://{RUNTIME_NAME}-{n}.{RUNTIME_NAME}.{NAMESPACE}.svc.cluster.local:9090{path}"
        for n in range(2)
        for path in ("/health/live", "/health/ready")
    ]


def test_helm_test_checks_the_sidecars_readiness(full_manifests: list[Manifest]) -> None:
    [check] = test_pod(full_manifests)["spec"]["containers"]
    env = env_of(check)
    service = metrics_service(full_manifests)
    assert env["PC_TEST_SIDECAR_URLS"]["value"].split() == [
        f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/readyz",
        f"http://{RELEASE}-progress-control-ticker:8081/readyz",  # the ticker's Service
    ]
    assert env["PC_TEST_TIMEOUT_S"]["value"] == "300"
    # The runtime serves HTTPS (query_tls_* settings): the test trusts the runtime's CA file,
    # mounted from the same Secret at the same path.
    urls = env["PC_TEST_RUNTIME_URLS"]["value"].split()
    assert urls == [
        f"https://{RUNTIME_NAME}-{n}.{RUNTIME_NAME}.{NAMESPACE}.svc.k8s.example.internal:8443/health"
        for n in range(3)
    ]
    assert env["PC_TEST_CA_FILE"]["value"] == "/etc/progress-control/tls/ca.crt"
    pod = test_pod(full_manifests)["spec"]
    assert {"name": "secret-0", "mountPath": "/etc/progress-control/tls", "readOnly": True} in (
        check["volumeMounts"]
    )
    assert pod["volumes"] == [
        {"name": "secret-0", "secret": {"secretName": "query-tls", "defaultMode": 0o444}}
    ]


def test_helm_test_only_when_there_is_something_to_check(helm: Helm) -> None:
    assert "Pod" not in {m["kind"] for m in helm.render(*EXAMPLE)}
    assert "Pod" not in {m["kind"] for m in helm.render(*RUNTIME, "--set", "tests.enabled=false")}
    without_queries = helm.render(*RUNTIME, "--set", "runtime.queries.enabled=false")
    env = env_of(test_pod(without_queries)["spec"]["containers"][0])
    assert env["PC_TEST_RUNTIME_URLS"]["value"].split()[0].endswith(":9090/metrics")
    assert "PC_TEST_QUERY_TOKEN" not in env


def _run_check(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), **env},
        timeout=120,
        check=False,
    )


@pytest.mark.broker
def test_helm_test_script_against_a_real_runtime_and_sidecar(
    runtime_manifests: list[Manifest],
    kafka_bootstrap: str,
    create_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The test Pod's own script, run here against a runtime started the way the chart starts
    # it (its rendered env, only addresses made local) and a real sidecar.
    from sidecar.service import ProgressControlSidecar
    from sidecar.settings import SidecarSettings
    from streams_runtime import App, StreamsBuilder

    [check] = test_pod(runtime_manifests)["spec"]["containers"]
    script = check["command"][2]
    token = "t0k3n-for-the-test"  # noqa: S105 - a test's own token
    for name in [n for n in os.environ if n.startswith("PROGRESS_CONTROL_")]:
        monkeypatch.delenv(name)
    env = _runtime_env(runtime_container(runtime_manifests), f"{RUNTIME_NAME}-0", {"token": token})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    builder = StreamsBuilder()
    builder.stream(create_topic("helm-test-in")).to(create_topic("helm-test-out"))
    cert, key = _self_signed(tmp_path / "tls", "127.0.0.1")
    app = App(
        builder,
        application_id=f"helm-test-{os.getpid()}",
        bootstrap_servers=kafka_bootstrap,
        application_server="127.0.0.1:0",
        state_dir=tmp_path / "state",
        metrics_port=0,
        query_tls_cert_file=cert,
        query_tls_key_file=key,
        query_tls_ca_file=cert,
    )
    sidecar_settings = SidecarSettings.from_config(
        {
            "progress.control.kafka": {"bootstrap.servers": kafka_bootstrap},
            "progress.control.http.port": 0,
            "progress.control.report.listen": "",
            "progress.control.watch.enabled": False,
        }
    )
    with app, ProgressControlSidecar(sidecar_settings) as sidecar:
        assert app.wait_until("RUNNING", 60)
        assert _plain(app.settings.query_token) == token  # from the rendered env
        runtime_url = f"https://{app.query_endpoint}/health"
        sidecar_url = f"http://127.0.0.1:{sidecar.http.port}/readyz"
        probe_urls = [
            f"http://127.0.0.1:{app.metrics_port}/health/{probe}" for probe in ("live", "ready")
        ]
        passed = _run_check(
            script,
            PC_TEST_TIMEOUT_S="60",
            PC_TEST_RUNTIME_URLS=runtime_url,
            PC_TEST_SIDECAR_URLS=sidecar_url,
            PC_TEST_PROBE_URLS=" ".join(probe_urls),
            PC_TEST_QUERY_TOKEN=token,
            PC_TEST_CA_FILE=str(cert),
        )
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert f"ok {runtime_url}" in passed.stdout
        assert f"ok {sidecar_url}" in passed.stdout
        for url in probe_urls:
            assert f"ok {url}" in passed.stdout
        refused = _run_check(
            script,
            PC_TEST_TIMEOUT_S="1",
            PC_TEST_RUNTIME_URLS=runtime_url,
            PC_TEST_QUERY_TOKEN="wrong",  # noqa: S106
            PC_TEST_CA_FILE=str(cert),
        )
        # /health answers anyone (probes need no secret), but names the instance only for the
        # right token: that is what the check requires.
        assert refused.returncode == 1
        assert f"FAILED {runtime_url} the token was not accepted" in refused.stdout
        down = _run_check(
            script, PC_TEST_TIMEOUT_S="1", PC_TEST_SIDECAR_URLS="http://127.0.0.1:9/readyz"
        )
        assert down.returncode == 1
        assert "FAILED http://127.0.0.1:9/readyz" in down.stdout


# ---------------------------------------------------------------------------------------------
# image digests (image.digest and each image's own digest)

DIGEST = "sha256:" + "0123456789abcdef" * 4
OTHER_DIGEST = "sha256:" + "f" * 64


def _images(manifests: list[Manifest]) -> dict[str, str]:
    """Every container image rendered, by '<kind>/<container>'."""
    images = {}
    for manifest in manifests:
        if manifest["kind"] == "SparkApplication":
            images["SparkApplication/spark"] = manifest["spec"]["image"]
            continue
        spec = manifest.get("spec", {})
        pod = spec["template"]["spec"] if "template" in spec else spec
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            images[f"{manifest['kind']}/{container['name']}"] = container["image"]
    return images


def test_image_digest_replaces_the_tag_of_the_charts_image(helm: Helm) -> None:
    manifests = helm.render(
        "-f", str(FULL_VALUES), "--set", f"image.digest={DIGEST},runtime.image.repository=,"
        "runtime.image.tag=,example.app.image.tag="
    )  # fmt: skip
    validate_strictly(manifests, KUBE_VERSION)
    chart_image = f"ghcr.io/kafka-progress-control/progress-control@{DIGEST}"
    images = _images(manifests)
    assert images["Deployment/progress-control"] == chart_image  # the sidecar
    assert images["Pod/check"] == chart_image  # the helm test
    assert images["StatefulSet/runtime"] == chart_image  # the runtime on the chart's image
    # The example's producer is another repository: image.digest does not apply to it.
    assert images["Deployment/producer"] == "registry.example.com/shop/producer:0.1.0"


def test_each_image_takes_its_own_digest(helm: Helm) -> None:
    manifests = helm.render(
        "-f", str(FULL_VALUES), "--set", f"image.digest={DIGEST},"
        f"runtime.image.digest={OTHER_DIGEST},example.app.image.digest={OTHER_DIGEST}"
    )  # fmt: skip
    images = _images(manifests)
    assert images["StatefulSet/runtime"] == f"registry.example.com/shop/sessions@{OTHER_DIGEST}"
    assert images["Deployment/producer"] == f"registry.example.com/shop/producer@{OTHER_DIGEST}"
    # runtime.image.repository set, no runtime digest: its tag, never the chart's digest.
    manifests = helm.render("-f", str(FULL_VALUES), "--set", f"image.digest={DIGEST}")
    assert _images(manifests)["StatefulSet/runtime"] == "registry.example.com/shop/sessions:2.0.1"
    spark = helm.render(*ENABLE_SPARK, "--set", f"sparkSessionization.image.digest={DIGEST}")
    assert spark_application(spark)["spec"]["image"] == f"registry.example.com/spark@{DIGEST}"
    spark = helm.render(*ENABLE_SPARK, "--set", f"image.digest={DIGEST}")
    assert spark_application(spark)["spec"]["image"] == "registry.example.com/spark:0.1.0"


@pytest.mark.parametrize(
    "value",
    ["image.digest=sha256:abc", "image.digest=0123", f"runtime.image.digest={DIGEST.upper()}"],
    ids=["short", "no-algorithm", "upper-case"],
)
def test_schema_rejects_a_malformed_digest(helm: Helm, value: str) -> None:
    stderr = helm.rejected("--set", value)
    assert SCHEMA_ERROR in stderr
    assert "digest" in stderr


# ---------------------------------------------------------------------------------------------
# runtime placement and metrics


def runtime_pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = one(manifests, "StatefulSet")["spec"]["template"]["spec"]
    return spec


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


# ---------------------------------------------------------------------------------------------
# the ticker Deployment (ticker.*)

TICKER_NAME = f"{RELEASE}-progress-control-ticker"


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    [found] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


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


# ---------------------------------------------------------------------------------------------
# NetworkPolicies (networkPolicy.*)


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


# ---------------------------------------------------------------------------------------------
# Secrets of the SparkApplication (sparkSessionization.envFrom, .secretMounts)


def test_spark_driver_and_executors_take_secrets(spark_manifests: list[Manifest]) -> None:
    # check_spark_application validates envFrom, the mounts and the Secret volumes strictly,
    # inside the driver's and the executors' Pods.
    spec = spark_application(spark_manifests)["spec"]
    env_from = [
        {"secretRef": {"name": "spark-kafka-sasl"}},
        {"configMapRef": {"name": "spark-settings"}, "prefix": "APP_"},
    ]
    mount = {"name": "control-keys", "mountPath": "/etc/progress-control/keys", "readOnly": True}
    for role in ("driver", "executor"):
        assert spec[role]["envFrom"] == env_from, role
        assert mount in spec[role]["volumeMounts"], role
    [volume] = [v for v in spec["volumes"] if v["name"] == "control-keys"]
    assert volume["secret"] == {"secretName": "control-verification-keys", "defaultMode": 0o444}


def test_spark_secret_mounts_without_storage(helm: Helm) -> None:
    manifests = helm.render(
        *ENABLE_SPARK,
        "--set",
        "sparkSessionization.storage.type=none,sparkSessionization.output=s3a://b/s,"
        "sparkSessionization.checkpoint=s3a://b/c,"
        "sparkSessionization.mainApplicationFile=local:///app/stream.py",
        "--set-json",
        'sparkSessionization.secretMounts=[{"name":"keys","secret":"k","mountPath":"/keys"}]',
    )
    spec = spark_application(manifests)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["keys"]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [
            {"name": "keys", "mountPath": "/keys", "readOnly": True}
        ]
        assert "envFrom" not in spec[role]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '[{"name":"data","secret":"s","mountPath":"/keys"}]',
            "names a volume data, which is taken",
        ),
        ('[{"name":"k","secret":"s","mountPath":"/data"}]', "mounts k at /data, which is taken"),
    ],
    ids=["volume-name-clash", "mount-path-clash"],
)
def test_spark_secret_mount_checks_reject(helm: Helm, value: str, message: str) -> None:
    stderr = helm.rejected(*ENABLE_SPARK, "--set-json", f"sparkSessionization.secretMounts={value}")
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set-json", 'sparkSessionization.envFrom=[{"secretRef":{}}]'], "envFrom"),
        (["--set-json", 'sparkSessionization.envFrom=[{"prefix":"A_"}]'], "envFrom"),
        (
            ["--set-json", 'sparkSessionization.secretMounts=[{"name":"k","secret":"s"}]'],
            "mountPath",
        ),
    ],
    ids=["ref-without-name", "no-source", "mount-without-path"],
)
def test_spark_secret_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr

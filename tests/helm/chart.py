"""Shared helpers of the chart tests: the Helm runner, the chart's paths and values variants,
and lookups in rendered manifests.

Helm comes from :func:`progress_control_apps.tools.helm.helm_binary` (built once from the Go module
proxy and cached, or ``$PROGRESS_CONTROL_HELM``). Every rendered manifest is checked against the
Kubernetes JSON schemas shipped with ``kubernetes-validate`` in strict mode (unknown fields are
errors) by :func:`validate_strictly`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

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


EXAMPLE = [
    "--set",
    "example.enabled=true,example.app.image.repository=registry.example.com/shop/producer",
    "--set-json",
    'example.app.args=["python","-m","shop.producer"]',
]
"""The least that renders the example Deployment: it is off by default, and needs a producer."""


def readme_block(marker: str) -> str:
    """The fenced yaml block of helm/README.md that contains ``marker``."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one README yaml block with {marker!r}"
    return found[0]


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


SOCKET_DIR = "/var/run/progress-control"
SOCKET_ADDRESS = f"unix://{SOCKET_DIR}/reports.sock"


def service_monitor(manifests: list[Manifest], name: str) -> Manifest:
    [monitor] = [
        m for m in manifests if m["kind"] == "ServiceMonitor" and m["metadata"]["name"] == name
    ]
    return monitor


RUNTIME = [
    "--set",
    "runtime.enabled=true,runtime.applicationId=sessions,"
    "runtime.queries.tokenSecret.name=query-token",
    "--set-json",
    'runtime.command=["python","-m","shop.sessions"]',
]
"""The least that renders the runtime."""
RUNTIME_NAME = f"{RELEASE}-progress-control-runtime"


def runtime_container(manifests: list[Manifest]) -> dict[str, Any]:
    [container] = one(manifests, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "runtime"
    return container


def headless_service(manifests: list[Manifest]) -> Manifest:
    [service] = [
        m for m in manifests if m["kind"] == "Service" and m["metadata"]["name"] == RUNTIME_NAME
    ]
    return service


def runtime_env(
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


def self_signed(directory: Path, *names: str) -> tuple[Path, Path]:
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


def plain(value: Any) -> Any:
    """A setting's value, whether it is kept as a pydantic SecretStr or as plain text."""
    return value.get_secret_value() if hasattr(value, "get_secret_value") else value


def test_pod(manifests: list[Manifest]) -> Manifest:
    [pod] = [m for m in manifests if m["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    return pod


test_pod.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def runtime_pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = one(manifests, "StatefulSet")["spec"]["template"]["spec"]
    return spec


TICKER_NAME = f"{RELEASE}-progress-control-ticker"


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    [found] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found

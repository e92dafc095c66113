"""``helm test``: the test Pod checks every runtime instance and the sidecars' readiness, and its
script passes and fails against a real runtime and sidecar.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helm.chart import (
    EXAMPLE,
    NAMESPACE,
    RELEASE,
    RUNTIME,
    RUNTIME_NAME,
    Helm,
    Manifest,
    env_of,
    metrics_service,
    plain,
    runtime_container,
    runtime_env,
    self_signed,
    test_pod,
)


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
    env = runtime_env(runtime_container(runtime_manifests), f"{RUNTIME_NAME}-0", {"token": token})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    builder = StreamsBuilder()
    builder.stream(create_topic("helm-test-in")).to(create_topic("helm-test-out"))
    cert, key = self_signed(tmp_path / "tls", "127.0.0.1")
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
        assert plain(app.settings.query_token) == token  # from the rendered env
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

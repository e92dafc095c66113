"""helm lint --strict, and strict schema validation of the values variants rendered (default, the
example, full, full with native sidecars, the oldest supported cluster).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest

from progress_control_apps.tools.helm import HELM_VERSION
from tests.helm.chart import (
    CHART,
    FULL_VALUES,
    KUBE_VERSION,
    OLDEST_KUBE_VERSION,
    SPARK_VALUES,
    Helm,
    Manifest,
    one,
    pod_spec,
    sidecar_of,
    validate_strictly,
)


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

"""helm/README.md: every value is documented (and commented in values.yaml), and the README's
snippet for a parent chart lints and renders.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    KUBE_VERSION,
    README,
    RELEASE,
    SOCKET_ADDRESS,
    SOCKET_DIR,
    Helm,
    app_deployment,
    env_of,
    one,
    readme_block,
    sidecar_of,
    validate_strictly,
)


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

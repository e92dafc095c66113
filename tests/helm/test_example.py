"""A plain install runs nothing that crash-loops; the example Deployment (example.*) needs a
producer.
"""

from __future__ import annotations

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    Helm,
    Manifest,
    pod_spec,
)


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

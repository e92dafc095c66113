"""Image digests: image.digest replaces the tag of the chart's image; each other image takes its
own digest.
"""

from __future__ import annotations

import pytest

from tests.helm.chart import (
    FULL_VALUES,
    KUBE_VERSION,
    SCHEMA_ERROR,
    Helm,
    Manifest,
    validate_strictly,
)
from tests.helm.spark_crd import (
    ENABLE_SPARK,
    spark_application,
)

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

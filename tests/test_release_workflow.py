"""The release workflow (``.github/workflows/release.yml``) runs the commands checked here: the
wheels are ``./dev dist``'s on both architectures, the image is the repository's Dockerfile with
the build arguments its labels read, the chart goes out as an OCI artifact. It cannot run on this
machine (no public CI), so these tests read it."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.paths import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _jobs() -> dict[str, Any]:
    jobs: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return jobs


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_wheels_are_dev_dist_in_manylinux_containers_for_both_architectures() -> None:
    wheels = _jobs()["wheels"]
    assert {entry["arch"] for entry in wheels["strategy"]["matrix"]["include"]} == {
        "x86_64",
        "aarch64",
    }
    assert wheels["container"] == "quay.io/pypa/manylinux_2_28_${{ matrix.arch }}"
    assert re.search(r"^PATH=/opt/python/cp311-cp311/bin:\$PATH \./dev dist$", _runs(wheels), re.M)
    assert re.search(r"^  dist\)", (ROOT / "dev").read_text(), re.M)  # the command exists


def test_the_image_is_the_dockerfile_with_the_arguments_its_labels_read() -> None:
    image = _jobs()["image"]
    (build,) = [s for s in image["steps"] if s.get("uses", "").startswith("docker/build-push")]
    assert build["with"]["context"] == "."
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    passed = {line.split("=", 1)[0] for line in build["with"]["build-args"].splitlines()}
    dockerfile = (ROOT / "Dockerfile").read_text()
    for argument in passed:
        assert re.search(rf"^ARG {argument}=", dockerfile, re.M), argument
        assert f"${{{argument}}}" in dockerfile, f"{argument} is not used"


def test_pypi_gets_every_artifact_and_the_chart_goes_out_as_an_oci_artifact() -> None:
    jobs = _jobs()
    pypi = jobs["pypi"]
    assert pypi["needs"] == "wheels"
    assert pypi["permissions"] == {"id-token": "write"}  # trusted publishing, no token
    chart = _runs(jobs["chart"])
    assert "helm package helm/progress-control" in chart
    assert 'helm push "progress-control-$VERSION.tgz" "$CHARTS"' in chart
    assert yaml.safe_load(WORKFLOW.read_text())["env"]["CHARTS"].startswith("oci://")

"""Fixtures of the chart tests in helm/progress-control: Helm, and each values variant rendered
once per test session (by a real Helm, see :mod:`tests.helm.chart`).
"""

from __future__ import annotations

import pytest

from progress_control_apps.tools.helm import helm_binary, helm_needs_build
from tests.helm.chart import (
    EXAMPLE,
    FULL_VALUES,
    RUNTIME,
    SPARK_VALUES,
    Helm,
    Manifest,
    readme_block,
)


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
def default_manifests(helm: Helm) -> list[Manifest]:
    return helm.render()


@pytest.fixture(scope="session")
def example_manifests(helm: Helm) -> list[Manifest]:
    """Default values with the example Deployment on."""
    return helm.render(*EXAMPLE)


@pytest.fixture(scope="session")
def full_manifests(helm: Helm) -> list[Manifest]:
    return helm.render("-f", str(FULL_VALUES))


@pytest.fixture(scope="session")
def full_native_manifests(helm: Helm) -> list[Manifest]:
    return helm.render("-f", str(FULL_VALUES), "--set", "sidecar.native=true")


@pytest.fixture(scope="session")
def spark_manifests(helm: Helm) -> list[Manifest]:
    """ci/spark-values.yaml: every sparkSessionization option set."""
    return helm.render("-f", str(SPARK_VALUES))


@pytest.fixture(scope="session")
def readme_spark_manifests(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """The README's sparkSessionization example, everything else at its default."""
    values = tmp_path_factory.mktemp("readme-spark") / "values.yaml"
    values.write_text(readme_block("sparkSessionization:"))
    return helm.render("-f", str(values))


@pytest.fixture(scope="session")
def runtime_manifests(helm: Helm) -> list[Manifest]:
    return helm.render(*RUNTIME)

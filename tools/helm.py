"""A real Helm binary for the chart tests, built once from the Go module proxy and cached.

:func:`helm_binary` returns ``$PROGRESS_CONTROL_HELM`` when set. Otherwise it returns
``<cache>/tools/helm-<HELM_VERSION>/helm`` (``<cache>`` is
:func:`progress_control.settings.default_cache_dir`), building it first when it is missing with
``go install helm.sh/helm/v3/cmd/helm@v<HELM_VERSION>``. The build takes a few minutes on a cold
Go cache and is silent unless it fails; a file lock keeps concurrent test runs from building twice.

The build passes the same ``-ldflags`` as Helm's release Makefile, so ``helm version`` reports
the release and the default Kubernetes version (used by ``helm template`` and ``helm lint``
without ``--kube-version``) is the one of the ``k8s.io/client-go`` module Helm was built with,
not the 1.20 fallback compiled into the source.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from progress_control.cache import fill_once
from progress_control.jars import MissingToolError, find_tool
from progress_control.settings import default_cache_dir

__all__ = [
    "HELM_MODULE",
    "HELM_VERSION",
    "HelmBuildError",
    "MissingToolError",
    "find_go",
    "helm_binary",
]

HELM_VERSION = "3.22.0"
"""Helm release to build (newest v3 on the Go module proxy when pinned; needs Go >= 1.26)."""

HELM_MODULE = "helm.sh/helm/v3"

_BUILD_TIMEOUT_S = 1800
_TAIL_LINES = 40


class HelmBuildError(RuntimeError):
    """``go`` could not download or build Helm, or the built binary does not run."""


def find_go() -> Path:
    """The ``go`` command: ``$PROGRESS_CONTROL_GO``, else ``go`` on ``PATH``."""
    return find_tool(
        "go",
        "PROGRESS_CONTROL_GO",
        f"Go was not found. The Helm chart tests build Helm v{HELM_VERSION} from the Go module "
        "proxy once: install Go >= 1.26, or point PROGRESS_CONTROL_HELM at a helm binary",
    )


def helm_binary(cache_dir: Path | None = None) -> Path:
    """Path of a working ``helm`` executable, building and caching it first when needed."""
    override = os.environ.get("PROGRESS_CONTROL_HELM")
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingToolError(f"PROGRESS_CONTROL_HELM={override} is not an executable file")
        return path
    target = (cache_dir or default_cache_dir()) / "tools" / f"helm-{HELM_VERSION}"
    announce = (
        f"Building Helm v{HELM_VERSION} from the Go module proxy into {target} "
        "(first run only; takes a few minutes)..."
    )
    fill_once(target, lambda directory: _is_executable(directory / "helm"), _build, announce)
    return target / "helm"


def _build(staging: Path) -> None:
    go = find_go()
    module = f"{HELM_MODULE}@v{HELM_VERSION}"
    env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "0"}
    download = _run([str(go), "mod", "download", "-json", module], env, staging)
    try:
        module_dir = Path(json.loads(download)["Dir"])
        go_mod = (module_dir / "go.mod").read_text()
    except (ValueError, KeyError, OSError) as exc:
        raise HelmBuildError(f"`go mod download {module}` gave no module directory") from exc
    kube_major, kube_minor = _kubernetes_version(go_mod)
    version_pkg = f"{HELM_MODULE}/internal/version"
    ldflags = [
        "-s",
        "-w",
        f"-X {version_pkg}.version=v{HELM_VERSION}",
        f"-X {version_pkg}.metadata=",
        f"-X {version_pkg}.gitTreeState=clean",
    ]
    for package in ("pkg/chartutil", "pkg/lint/rules"):
        ldflags += [
            f"-X {HELM_MODULE}/{package}.k8sVersionMajor={kube_major}",
            f"-X {HELM_MODULE}/{package}.k8sVersionMinor={kube_minor}",
        ]
    _run(
        [
            str(go),
            "install",
            "-trimpath",
            f"-ldflags={' '.join(ldflags)}",
            f"{HELM_MODULE}/cmd/helm@v{HELM_VERSION}",
        ],
        env,
        staging,
    )
    binary = staging / "helm"
    version = _run([str(binary), "version", "--short"], env, staging).strip()
    if not version.startswith(f"v{HELM_VERSION}"):
        raise HelmBuildError(f"built {binary} reports version {version!r}, not v{HELM_VERSION}")


def _kubernetes_version(go_mod: str) -> tuple[int, int]:
    """Kubernetes ``(major, minor)`` matching the ``k8s.io/client-go`` requirement in go.mod.

    client-go ``v0.N.x`` goes with Kubernetes ``1.N`` (what Helm's Makefile computes).
    """
    match = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.\d+", go_mod, re.MULTILINE)
    if match is None:
        raise HelmBuildError("Helm's go.mod does not require k8s.io/client-go v0.N.x")
    return 1, int(match.group(1))


def _run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``command`` quietly; on failure raise with the tail of its output."""
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise HelmBuildError(f"{command} did not finish within {_BUILD_TIMEOUT_S}s") from exc
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-_TAIL_LINES:])
        raise HelmBuildError(
            f"building Helm v{HELM_VERSION} failed: {' '.join(command)} exited "
            f"{result.returncode}:\n{tail}"
        )
    return result.stdout


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)

"""A real Helm binary for the chart tests, built once from the Go module proxy and cached.

:func:`helm_binary` returns ``$PROGRESS_CONTROL_HELM`` when set. Otherwise it returns
``<cache>/tools/helm-<HELM_VERSION>/helm`` (``<cache>`` is
:func:`progress_control.settings.default_cache_dir`), building it first when it is missing with
``go install helm.sh/helm/v3/cmd/helm@v<HELM_VERSION>``. The build takes a few minutes on a cold
Go cache; a file lock keeps concurrent test runs from building twice.

A build shows what it does and how far it got, as two steps
(:class:`progress_control_apps.demo.steps.Steps`: a spinner on a terminal, a line every 15 s
otherwise): the Go modules Helm needs, counted as ``go`` downloads them, then the packages compiled
out of all Helm's packages (``go install -v``)::

    [1/2] Downloading Helm v3.22.0's Go modules ... 15s: 87 modules downloaded (k8s.io/api v0.35.0)
    [2/2] Compiling Helm v3.22.0 ... 60s: 412/702 packages compiled (k8s.io/client-go/rest)

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
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.cache import fill_once
from progress_control_apps.dev.jars import MissingToolError, find_tool

__all__ = [
    "HELM_MODULE",
    "HELM_VERSION",
    "HelmBuildError",
    "MissingToolError",
    "find_go",
    "helm_binary",
    "helm_needs_build",
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


def _target(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir()) / "tools" / f"helm-{HELM_VERSION}"


def helm_needs_build(cache_dir: Path | None = None) -> bool:
    """Whether :func:`helm_binary` would build Helm first (no override, nothing cached)."""
    if os.environ.get("PROGRESS_CONTROL_HELM"):
        return False
    return not _is_executable(_target(cache_dir) / "helm")


def helm_binary(cache_dir: Path | None = None, *, out: TextIO | None = None) -> Path:
    """Path of a working ``helm`` executable, building and caching it first when needed; a
    build shows its progress on ``out`` (stderr)."""
    override = os.environ.get("PROGRESS_CONTROL_HELM")
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingToolError(f"PROGRESS_CONTROL_HELM={override} is not an executable file")
        return path
    target = _target(cache_dir)
    out = out or sys.stderr

    def build(staging: Path) -> None:
        out.write(
            f"Building Helm v{HELM_VERSION} from the Go module proxy into {target} "
            "(first run only; takes a few minutes)\n"
        )
        out.flush()
        _build(staging, out)

    fill_once(target, lambda directory: _is_executable(directory / "helm"), build)
    return target / "helm"


class _GoProgress:
    """What ``go`` reported so far, for the step display (updated by the reading thread)."""

    def __init__(self) -> None:
        self.modules = 0
        self.module = ""
        self.packages = 0
        self.package = ""
        self.total_packages = 0

    def line(self, text: str) -> None:
        if text.startswith("go: downloading "):
            self.modules += 1
            self.module = text.removeprefix("go: downloading ").strip()
        elif text and not text.startswith(("go: ", "#", " ", "\t")):
            self.packages += 1
            self.package = text.strip()

    def downloads(self) -> str:
        if not self.modules:
            return "resolving modules"
        return f"{_count(self.modules, 'module')} downloaded ({self.module})"

    def compiled(self) -> str:
        if not self.packages:
            return "starting"
        done = (
            f"{self.packages}/{self.total_packages} packages"
            if self.total_packages
            else _count(self.packages, "package")
        )
        return f"{done} compiled ({self.package})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _build(staging: Path, out: TextIO) -> None:
    from progress_control_apps.demo.steps import (
        Steps,  # the demo's step display; the dev install has it
    )

    go = find_go()
    module = f"{HELM_MODULE}@v{HELM_VERSION}"
    # GOWORK=off: a go.work around the cache must not change Helm's module graph.
    env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "0", "GOWORK": "off"}
    steps = Steps(out, total=2)
    progress = _GoProgress()
    with steps.step(f"Downloading Helm v{HELM_VERSION}'s Go modules", progress.downloads):
        download = _run([str(go), "mod", "download", "-json", module], env, staging)
        try:
            module_dir = Path(json.loads(download)["Dir"])
            go_mod = (module_dir / "go.mod").read_text()
        except (ValueError, KeyError, OSError) as exc:
            raise HelmBuildError(f"`go mod download {module}` gave no module directory") from exc
        # The packages `go install` will compile; listing them downloads the modules they are in
        # (the same module graph: both use Helm's go.mod as the main module).
        listed = _run(
            [str(go), "list", "-deps", "-f", "{{.ImportPath}}", "./cmd/helm"],
            env,
            module_dir,
            on_line=progress.line,
            stdout_lines=False,
        )
        progress.total_packages = len(listed.split())
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
    progress.packages = 0
    with steps.step(f"Compiling Helm v{HELM_VERSION}", progress.compiled):
        # -v: each package's import path on stderr as it is compiled (cached ones are not).
        _run(
            [
                str(go),
                "install",
                "-v",
                "-trimpath",
                f"-ldflags={' '.join(ldflags)}",
                f"{HELM_MODULE}/cmd/helm@v{HELM_VERSION}",
            ],
            env,
            staging,
            on_line=progress.line,
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


def _run(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    on_line: Callable[[str], None] | None = None,
    stdout_lines: bool = True,
) -> str:
    """Run ``command`` quietly and return its stdout; on failure raise with the tail of its
    output. ``on_line`` sees each stderr line as it comes (and each stdout line unless not
    ``stdout_lines``)."""
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(_BUILD_TIMEOUT_S, kill)
    timer.start()
    stdout: list[str] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            tail.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line.rstrip("\n"))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            stdout.append(line)
            tail.append(line.rstrip("\n"))
            if on_line is not None and stdout_lines:
                on_line(line.rstrip("\n"))
        reader.join()
        code = process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:  # interrupted while reading
            process.kill()
            process.wait()
    if code != 0:
        if timed_out.is_set():
            raise HelmBuildError(f"{command} did not finish within {_BUILD_TIMEOUT_S}s")
        lines = "\n".join(tail)
        raise HelmBuildError(
            f"building Helm v{HELM_VERSION} failed: {' '.join(command)} exited {code}:\n{lines}"
        )
    return "".join(stdout)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)

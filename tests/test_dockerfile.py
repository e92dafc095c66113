"""The Dockerfile, read: what the image is built from and what it must carry.

No engine runs here (the build itself is ``python -m progress_control_apps.tools.build_image``, with
buildah: docs/operations/helm.md, "The image"). These tests check the recipe: a base pinned by
digest whose Debian has a Rust new enough for the native core, a compiler in the build stage
only, the ``runtime`` extra, a build that fails when either native extension is missing, the OCI
labels, a non-root user, and a build context holding everything ``pip wheel .`` reads.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from progress_control_apps.tools.build_image import (
    IMAGE_CHECK,
    OCI_LABELS,
    base_release,
    dockerfile_arg,
)
from tests.paths import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
# rustc (and cargo) in each Debian release's own packages.
DEBIAN_RUST = {"bullseye": (1, 48), "bookworm": (1, 63), "trixie": (1, 85)}
UID = "10001"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(rest.split())))
    return result


def _stages() -> list[list[tuple[str, str]]]:
    """The instructions of each stage (FROM to the next FROM); global ARGs are left out."""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in _instructions(DOCKERFILE):
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def _runs(stage: list[tuple[str, str]]) -> str:
    return "\n".join(rest for keyword, rest in stage if keyword == "RUN")


def test_every_stage_is_on_the_base_pinned_by_digest() -> None:
    base = dockerfile_arg(DOCKERFILE, "BASE_IMAGE")
    assert re.fullmatch(r"docker\.io/library/python:3\.11-slim-[a-z]+@sha256:[0-9a-f]{64}", base)
    # The oldest Python the project supports, the one its abi3 wheel is built for.
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    froms = [stage[0][1] for stage in _stages()]
    assert [f.split()[0] for f in froms] == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
    assert "# Refreshing it:" in DOCKERFILE  # says how the digest moves


def test_the_bases_debian_has_a_rust_new_enough_for_the_native_core() -> None:
    """The build stage takes Debian's rustc and cargo: pyo3 0.27 needs rustc 1.74, rustc-hash
    2.1 needs 1.77, and a version 4 Cargo.lock needs cargo 1.78 (bookworm has 1.63)."""
    release = base_release(dockerfile_arg(DOCKERFILE, "BASE_IMAGE"))
    assert release in DEBIAN_RUST, f"add {release}'s rustc version to DEBIAN_RUST"
    lock = (ROOT / "native" / "Cargo.lock").read_text()
    lock_version = re.search(r"^version = (\d+)$", lock, re.M)
    assert lock_version is not None
    needed = (1, 78) if int(lock_version[1]) >= 4 else (1, 74)
    cargo_toml = (ROOT / "native" / "Cargo.toml").read_text()
    pyo3 = re.search(r'^pyo3 = \{ version = "0\.(\d+)"', cargo_toml, re.M)
    assert pyo3 is not None
    assert int(pyo3[1]) <= 27, "a newer pyo3: check its minimum rustc"
    assert DEBIAN_RUST[release] >= needed, f"{release}'s rustc is older than {needed}"


def test_the_build_stage_has_both_compilers_and_the_final_stage_none() -> None:
    build, final = _stages()
    installs = re.findall(r"apt-get install[^&]*", _runs(build))
    assert installs
    packages = set(" ".join(installs).split())
    assert {"gcc", "libc6-dev", "rustc", "cargo"} <= packages
    assert "apt-get" not in _runs(final)
    assert not re.search(r"\b(gcc|rustc|cargo|build-essential|rustup)\b", _runs(final))


def test_the_runtime_extra_is_built_and_installed() -> None:
    assert {"orjson", "rocksdict"} <= {
        re.split(r"[<>=!~ ]", r)[0]
        for r in PYPROJECT["project"]["optional-dependencies"]["runtime"]
    }
    build, final = _stages()
    assert "pip wheel --wheel-dir /wheels '.[runtime]'" in _runs(build)
    install = "pip install --no-index --find-links /wheels 'kafka-progress-control[runtime]'"
    assert install in _runs(build)
    assert install in _runs(final)
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in _runs(final)


def test_the_build_fails_unless_both_native_extensions_load() -> None:
    """Both extensions are optional to pip (a missing compiler degrades quietly); the build
    stage imports each after installing the wheel, and asks the modules that report which path
    runs (interceptor.native, streams_runtime.fused), so a missing one fails the build."""
    c_ext = PYPROJECT["tool"]["setuptools"]["ext-modules"]
    rust_ext = PYPROJECT["tool"]["setuptools-rust"]["ext-modules"]
    names = {ext["name"] for ext in c_ext} | {ext["target"] for ext in rust_ext}
    assert names == {"interceptor._ackplugin", "streams_runtime._native"}
    build, _final = _stages()
    runs = _runs(build)
    wheel_at = runs.index("pip wheel")
    check = runs[runs.index("pip install --no-index", wheel_at) :]
    for name in names:
        assert f"import {name}" in check or f"{name}," in check or f", {name}" in check, name
    assert "from interceptor.native import unavailable_reason" in check
    assert "from streams_runtime.fused import native_available" in check
    assert "cd /" in check  # the installed copy, not /src's sources
    compile(IMAGE_CHECK, "IMAGE_CHECK", "exec")  # what build_image runs in the built image


def test_the_final_stage_has_the_oci_labels_from_build_arguments() -> None:
    _build, final = _stages()
    args = {rest.split("=", 1)[0] for keyword, rest in final if keyword == "ARG"}
    labels = " ".join(rest for keyword, rest in final if keyword == "LABEL")
    for name in OCI_LABELS:
        assert f"{name}=" in labels, name
    for name in ("version", "revision", "created"):
        argument = name.upper()
        assert f'org.opencontainers.image.{name}="${{{argument}}}"' in labels
        assert argument in args, f"ARG {argument} must be declared in the final stage"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_the_image_runs_as_a_non_root_user() -> None:
    _build, final = _stages()
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users == [f"{UID}:{UID}"]
    after_user = final[[keyword for keyword, _ in final].index("USER") :]
    assert not [rest for keyword, rest in after_user if keyword == "RUN"]
    assert final[-2:] == [("ENTRYPOINT", '["progress-control"]'), ("CMD", '["sidecar"]')]


def _copied() -> list[str]:
    """The build stage's COPY sources, relative to the context."""
    build, _final = _stages()
    sources: list[str] = []
    for keyword, rest in build:
        if keyword == "COPY":
            assert not rest.startswith("--from"), rest
            sources += rest.split()[:-1]
    return [s.rstrip("/") for s in sources]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps ``path`` (or a folder above it) out of the context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]

    def matches(pattern: str, candidate: str) -> bool:
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        return re.fullmatch(regex, candidate) is not None

    return any(matches(p, prefix) for p in patterns for prefix in prefixes)


def _needed() -> list[str]:
    """What ``pip wheel .`` reads: the tracked files of the packages pyproject.toml ships, the
    files MANIFEST.in names, the extensions' sources, the README and the licence."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    try:
        tracked = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout")
    needed = ["pyproject.toml", "MANIFEST.in", PYPROJECT["project"]["readme"]]
    needed += PYPROJECT["project"]["license-files"]
    for path in tracked:
        package = path.rsplit("/", 1)[0].replace("/", ".") if "/" in path else ""
        if any(fnmatch.fnmatch(package, p) for p in find["include"]) and not any(
            fnmatch.fnmatch(package, p) for p in find["exclude"]
        ):
            needed.append(path)
    for line in (ROOT / "MANIFEST.in").read_text().splitlines():
        words = line.split()
        if words and words[0] == "include":
            needed += words[1:]
        elif words and words[0] == "recursive-include":
            folder, patterns = words[1], words[2:]
            needed += [
                p
                for p in tracked
                if p.startswith(folder + "/")
                and any(fnmatch.fnmatch(Path(p).name, pattern) for pattern in patterns)
            ]
    for ext in PYPROJECT["tool"]["setuptools"]["ext-modules"]:
        needed += ext["sources"]
    for ext in PYPROJECT["tool"]["setuptools-rust"]["ext-modules"]:
        needed.append(ext["path"])
    return sorted(set(needed))


def test_the_build_context_has_everything_pip_wheel_reads() -> None:
    needed = _needed()
    assert "native/Cargo.lock" in needed
    assert "native/src/lib.rs" in needed
    assert "interceptor/_ackplugin.c" in needed
    copied = _copied()
    uncovered = [
        path for path in needed if not any(path == s or path.startswith(s + "/") for s in copied)
    ]
    assert not uncovered, f"not copied into the build stage: {uncovered}"
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not [p for p in patterns if p.startswith("!")], "negations: extend _ignored"
    assert not [path for path in needed if _ignored(path, patterns)]
    # In-place builds (an editable install's .so files) stay out: the image builds its own.
    assert _ignored("interceptor/_ackplugin.abi3.so", patterns)
    assert _ignored("progress_control_apps/tools/helm.py", patterns)

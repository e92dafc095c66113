"""The Kafka Streams engine of the engines benchmark: build ``bench/kstreams/`` (``ThroughputApp``
and its dependencies, Jackson among them) with Maven into the cache, once per source change
(``<cache>/bench/kstreams-<digest>``; nothing is committed), and give its command line."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from progress_control.dev.cache import fill_once
from progress_control.dev.jars import find_java, find_maven
from progress_control.settings import default_cache_dir

__all__ = ["build_throughput_app", "kstreams_command"]

SOURCE_DIR = Path(__file__).resolve().parent / "kstreams"
_MAVEN_TIMEOUT_S = 900
_COMPLETE = "COMPLETE"


def _source_digest() -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file()):
        sha.update(str(path.relative_to(SOURCE_DIR)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def build_throughput_app(cache_dir: Path | None = None) -> Path:
    """The directory of the built app's jars, building it with Maven first when its sources
    changed since the last build."""
    target = (cache_dir or default_cache_dir()) / "bench" / f"kstreams-{_source_digest()}"

    def build(staging: Path) -> None:
        project = staging / "project"
        shutil.copytree(SOURCE_DIR, project)
        lib = staging / "lib"
        command = [
            str(find_maven()),
            "--batch-mode",
            "--no-transfer-progress",
            "--quiet",
            "-f",
            str(project / "pom.xml"),
            "package",
            "-DskipTests",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ]
        local_repo = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
        if local_repo:
            command.append(f"-Dmaven.repo.local={local_repo}")
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"building the Kafka Streams bench app failed:\n{tail}")
        for jar in (project / "target").glob("*.jar"):
            shutil.move(jar, lib / jar.name)
        shutil.rmtree(project)
        (staging / _COMPLETE).write_text("")

    built = fill_once(
        target,
        lambda directory: (directory / _COMPLETE).is_file(),
        build,
        f"Building the Kafka Streams bench app into {target} (first run only)...",
    )
    return built / "lib"


def kstreams_command(jars: Path, spec: dict[str, Any], work_dir: Path) -> list[str]:
    """``ThroughputApp``'s command line for an engines-benchmark ``spec`` (its properties file is
    written into ``work_dir``); heap ``-Xmx`` ``BENCH_KS_HEAP``, default 512m."""
    properties = {
        "application.id": spec["group"],
        "bootstrap.servers": spec["bootstrap_servers"],
        "state.dir": spec["state_dir"],
        "workload": spec["workload"],
        "in": spec["source"],
        "out": spec["sink"],
        "window.ms": spec["window_ms"],
        "config.commit.interval.ms": spec["commit_interval_ms"],
    }
    if spec["guarantee"] == "exactly_once":
        properties["config.processing.guarantee"] = "exactly_once_v2"
    path = work_dir / f"{spec['group']}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return [
        str(find_java()),
        f"-Xmx{os.environ.get('BENCH_KS_HEAP', '512m')}",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        f"{jars}/*",
        "kpc.bench.ThroughputApp",
        str(path),
    ]

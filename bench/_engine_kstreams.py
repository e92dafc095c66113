"""The Kafka Streams engine of the engines benchmark: build ``bench/kstreams/`` (``ThroughputApp``
and its dependencies, Jackson among them) with Maven into the cache, once per source change
(``<cache>/bench/kstreams-<digest>``; nothing is committed), and give its command line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from progress_control_apps.dev.jars import build_maven_project, find_java

__all__ = ["build_throughput_app", "kstreams_command"]

SOURCE_DIR = Path(__file__).resolve().parent / "kstreams"


def build_throughput_app() -> Path:
    """The directory of the built app's jars, building it with Maven first when its sources
    changed since the last build."""
    return build_maven_project(SOURCE_DIR, "bench", "the Kafka Streams bench app")


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
    if "users" in spec:
        properties["users"] = spec["users"]
        properties["grace.ms"] = spec["grace_ms"]
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

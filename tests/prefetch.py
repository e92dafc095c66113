"""Fetch and build, before the tests, what their fixtures otherwise fetch or build on first use:
the broker's, Connect's and Spark's connector jars, the schema registry, the Quix Streams
virtualenv, Helm, and the Maven projects the tests run (the Kafka Streams conformance app, the
Kafka Streams and Flink companions). ``./dev prefetch``; CI runs it beside lint and the docs,
before the suite.

Inside the suite each of these is fetched by the first test that needs it while that test's
worker waits (and any other worker whose test needs it too, on its lock): minutes of workers'
time, the Helm build alone about two on a cold Go cache. Here the downloads overlap each other
and lint. Everything lands in the project's
cache (:func:`progress_control.settings.default_cache_dir`) exactly as the fixtures would put
it, so a later run finds it there; nothing here is required, only earlier.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from progress_control_apps.dev.jars import (
    apicurio_avro_converter_jars,
    fetch_jars,
    kafka_broker_jars,
    kafka_connect_jars,
    spark_kafka_connector_jars,
)
from progress_control_apps.dev.quix import quix_python
from progress_control_apps.dev.schema_registry import fetch_registry
from progress_control_apps.tools.helm import helm_binary
from tests.conformance.kstreams import build_conformance_app
from tests.readers.flink_job import build_flink_companion
from tests.readers.kafka_streams_companion import build_companion

__all__ = ["main"]


def _maven_projects() -> None:
    # One after another: concurrent Maven runs contend for the local repository.
    build_conformance_app()
    build_companion()
    build_flink_companion()


STEPS: dict[str, Callable[[], Any]] = {
    "Kafka broker jars": lambda: fetch_jars(kafka_broker_jars(), quiet=True),
    "Spark's Kafka connector jars": lambda: fetch_jars(spark_kafka_connector_jars(), quiet=True),
    "Kafka Connect jars": lambda: fetch_jars(kafka_connect_jars(), quiet=True),
    "Apicurio's Avro converter jars": lambda: fetch_jars(
        apicurio_avro_converter_jars(), quiet=True
    ),
    "the schema registry": lambda: fetch_registry(quiet=True),
    "the Quix Streams virtualenv": quix_python,
    "Helm": lambda: helm_binary(out=sys.stdout),
    "the Maven projects (conformance app, Kafka Streams and Flink companions)": _maven_projects,
}


def main() -> int:
    """Run every step at once; print each one's outcome and time; exit 1 if one failed."""
    started = time.monotonic()

    def timed(step: Callable[[], Any]) -> float:
        step()
        return time.monotonic() - started

    with ThreadPoolExecutor(max_workers=len(STEPS)) as pool:
        futures: dict[str, Future[float]] = {
            name: pool.submit(timed, step) for name, step in STEPS.items()
        }
    failed = 0
    for name, future in futures.items():
        error = future.exception()
        if error is None:
            print(f"prefetch: {name}: ready at {future.result():.0f}s")
        else:
            failed += 1
            print(f"prefetch: {name}: FAILED: {error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

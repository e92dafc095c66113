"""Fixtures of the conformance suite: one Kafka Streams JVM per test session, and a runner that
takes inputs through both engines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streams_runtime import App, SessionWindows
from tests.conformance.harness import Outputs, run_both_engines
from tests.conformance.inputs import InputRecord
from tests.conformance.kstreams import KafkaStreamsApps, build_conformance_app

RunBoth = Callable[[dict[str, list[InputRecord]], SessionWindows], tuple[Outputs, Outputs]]


@pytest.fixture(scope="session")
def kafka_streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStreamsApps]:
    """The JVM running the Kafka Streams side (built with Maven on first use)."""
    with KafkaStreamsApps(
        build_conformance_app(), tmp_path_factory.mktemp("kafka-streams")
    ) as apps:
        yield apps


@pytest.fixture(params=["memory", "sqlite", "rocksdb"])
def both_engines(  # noqa: PLR0917 (pytest fixtures)
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    tmp_path: Path,
) -> RunBoth:
    """``both_engines({case: input records}, windows)``: (Kafka Streams' outputs, the runtime's),
    once per state engine of the runtime (every engine must conform)."""

    def run(
        inputs: dict[str, list[InputRecord]], windows: SessionWindows
    ) -> tuple[Outputs, Outputs]:
        return run_both_engines(
            inputs,
            windows,
            kafka_bootstrap=kafka_bootstrap,
            kafka_streams=kafka_streams,
            create_topic=create_topic,
            run_app=run_app,
            state_dir=tmp_path,
            state_engine=request.param,
        )

    return run

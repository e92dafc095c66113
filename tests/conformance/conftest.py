"""Fixtures of the conformance suite: one Kafka Streams JVM per test session, and a runner that
takes inputs through both engines."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from streams_runtime import App, SessionWindows
from tests.conformance.broker_runs import Outputs, run_both_engines
from tests.conformance.inputs import InputRecord
from tests.conformance.kstreams import KafkaStreamsApps, build_conformance_app


class RunBoth(Protocol):
    """Runs inputs through both engines, with a record cache of ``cache_max_bytes`` on both
    sides (default 0, off), committing every ``commit_interval_ms``."""

    def __call__(
        self,
        inputs: dict[str, list[InputRecord]],
        windows: SessionWindows,
        *,
        cache_max_bytes: int = 0,
        commit_interval_ms: int = 100,
    ) -> tuple[Outputs, Outputs]: ...


STATE_ENGINES = ("memory", "sqlite", "rocksdb")


def state_engine_of(node: pytest.Item) -> str:
    """The runtime's state engine in one conformance run. Every engine must conform, but each
    case on all three would triple the suite: seeded runs rotate through them (any three
    consecutive seeds, as CI's, cover each once), the other cases spread by name."""
    callspec = getattr(node, "callspec", None)
    seed = callspec.params.get("seed") if callspec is not None else None
    index = seed - 1 if isinstance(seed, int) else zlib.crc32(node.name.encode())
    return STATE_ENGINES[index % len(STATE_ENGINES)]


def native_core_of(node: pytest.Item) -> bool:
    """Whether the runtime runs fusable chains on its native core in one conformance run (its
    default), or processor by processor: every third seed from 2 (CI's second), so both paths
    conform."""
    callspec = getattr(node, "callspec", None)
    seed = callspec.params.get("seed") if callspec is not None else None
    return not (isinstance(seed, int) and seed % 3 == 2)


@pytest.fixture(scope="session")
def kafka_streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStreamsApps]:
    """The JVM running the Kafka Streams side (built with Maven on first use)."""
    with KafkaStreamsApps(
        build_conformance_app(), tmp_path_factory.mktemp("kafka-streams")
    ) as apps:
        yield apps


@pytest.fixture
def both_engines(  # noqa: PLR0917 (pytest fixtures)
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    tmp_path: Path,
) -> RunBoth:
    """``both_engines({case: input records}, windows)``: (Kafka Streams' outputs, the runtime's),
    the runtime's stores on :func:`state_engine_of` this test."""
    state_engine = state_engine_of(request.node)
    native_core = native_core_of(request.node)
    # Shown with a failure.
    print(f"the runtime's state engine: {state_engine}, native core: {native_core}")

    def run(
        inputs: dict[str, list[InputRecord]],
        windows: SessionWindows,
        *,
        cache_max_bytes: int = 0,
        commit_interval_ms: int = 100,
    ) -> tuple[Outputs, Outputs]:
        return run_both_engines(
            inputs,
            windows,
            kafka_bootstrap=kafka_bootstrap,
            kafka_streams=kafka_streams,
            create_topic=create_topic,
            run_app=run_app,
            state_dir=tmp_path,
            state_engine=state_engine,
            native_core=native_core,
            cache_max_bytes=cache_max_bytes,
            commit_interval_ms=commit_interval_ms,
        )

    return run

"""The runtime against Kafka Streams itself: every conformance topology runs in both engines on the
same seeded input, on the same broker, and the outputs must be equal record for record except
for the documented differences (see :mod:`tests.conformance.compare`).

CI runs a few fixed seeds; ``./dev test tests/conformance --conformance-seeds 50`` runs more.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streams_runtime import App, SessionWindows, StreamsBuilder
from streams_runtime.serdes import String
from tests.conformance.compare import differences
from tests.conformance.harness import ProcessedCheck, produce, read_to_end
from tests.conformance.inputs import InputRecord, generate
from tests.conformance.kstreams import KafkaStreamsApps, build_conformance_app
from tests.conformance.topologies import CASES, build_runtime_case
from tests.helpers import unique_name, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.network]

INPUT_PARTITIONS = 3
OUTPUT_PARTITIONS = 2
RECORDS_PER_PARTITION = 60


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        count = metafunc.config.getoption("conformance_seeds")
        metafunc.parametrize("seed", range(1, count + 1))


@pytest.fixture(scope="session")
def kafka_streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStreamsApps]:
    with KafkaStreamsApps(
        build_conformance_app(), tmp_path_factory.mktemp("kafka-streams")
    ) as apps:
        yield apps


def _windows(seed: int) -> SessionWindows:
    rng = random.Random(seed)
    return SessionWindows(gap_ms=rng.choice((3_000, 5_000)), grace_ms=rng.choice((0, 2_000)))


def test_runtime_matches_kafka_streams(
    seed: int,
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    tmp_path: Path,
) -> None:
    windows = _windows(seed)
    base_ms = (int(time.time()) - 3600) * 1000  # an hour ago: every timestamp is in the past
    inputs: dict[str, dict[str, str]] = {}
    outputs: dict[str, dict[str, dict[str, str]]] = {"kstreams": {}, "runtime": {}}
    generated: dict[str, list[InputRecord]] = {}
    for name, case in CASES.items():
        inputs[name] = {role: create_topic(f"{name}-{role}", INPUT_PARTITIONS) for role in case.inputs}
        for engine, topics in outputs.items():
            topics[name] = {
                role: create_topic(f"{name}-{engine}-{role}", OUTPUT_PARTITIONS)
                for role in case.outputs
            }
        generated[name] = generate(name, seed, INPUT_PARTITIONS, windows, RECORDS_PER_PARTITION)
        produce(kafka_bootstrap, inputs[name], generated[name], base_ms)

    kstreams_id = unique_name("conformance-kstreams")
    spec = {
        "application.id": kstreams_id,
        "bootstrap.servers": kafka_bootstrap,
        "state.dir": str(tmp_path / "kstreams-state"),
        "topologies": ",".join(CASES),
        "config.commit.interval.ms": "100",
        "config.statestore.cache.max.bytes": "0",
        "config.max.task.idle.ms": "0",
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
    }
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    for name in CASES:
        spec[f"{name}.type"] = name
        spec[f"{name}.gap.ms"] = str(windows.gap_ms)
        spec[f"{name}.grace.ms"] = str(windows.grace_ms)
        for role, topic in (inputs[name] | outputs["kstreams"][name]).items():
            spec[f"{name}.{role}"] = topic
        build_runtime_case(builder, name, inputs[name] | outputs["runtime"][name], windows)

    all_inputs = [topic for topics in inputs.values() for topic in topics.values()]
    kafka_streams.start(spec)
    runtime_id = unique_name("conformance-runtime")
    app = run_app(builder, application_id=runtime_id, commit_interval_ms=100, max_task_idle_ms=0)
    checks = {
        kstreams_id: ProcessedCheck(kafka_bootstrap, kstreams_id, all_inputs),
        runtime_id: ProcessedCheck(kafka_bootstrap, runtime_id, all_inputs),
    }
    try:
        for app_id, check in checks.items():

            def processed(app_id: str = app_id, check: ProcessedCheck = check) -> bool:
                kafka_streams.check(kstreams_id)
                assert app.error is None, f"runtime failed: {app.error!r}"
                return check()

            wait_for(processed, timeout_s=180, interval_s=0.5, message=f"{app_id} to catch up")
    finally:
        for check in checks.values():
            check.close()
        kafka_streams.stop(kstreams_id)
        app.close()

    found: list[str] = []
    for name, case in CASES.items():
        read = {
            engine: {
                role: read_to_end(kafka_bootstrap, topic, base_ms)
                for role, topic in outputs[engine][name].items()
            }
            for engine in outputs
        }
        found += differences(case, read["kstreams"], read["runtime"])
    assert not found, f"seed {seed}, {windows}:\n" + "\n".join(found)

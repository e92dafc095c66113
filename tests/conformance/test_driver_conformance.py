"""The runtime's ``TopologyTestDriver`` against Kafka Streams' own: every conformance topology
runs through both drivers on the same seeded input, without a broker, and the outputs must be
equal record for record except for the documented differences (:mod:`tests.conformance.compare`).
So the driver is as trustworthy as a broker run for what it covers.

CI runs a few fixed seeds; ``./dev test tests/conformance --conformance-seeds 50`` runs more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.broker_runs import INPUT_PARTITIONS
from tests.conformance.compare import differences
from tests.conformance.conftest import native_core_of, state_engine_of
from tests.conformance.drivers import run_kafka_streams_driver, run_runtime_driver
from tests.conformance.inputs import generate
from tests.conformance.kstreams import KafkaStreamsApps
from tests.conformance.test_kafka_streams_conformance import (
    RECORDS_PER_PARTITION,
    pytest_generate_tests,
    windows_of,
)
from tests.conformance.topologies import CASES

__all__ = ["pytest_generate_tests"]

pytestmark = [pytest.mark.network]  # the Kafka Streams JVM (built with Maven on first use)


def test_driver_matches_kafka_streams_driver(
    seed: int, kafka_streams: KafkaStreamsApps, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    windows = windows_of(seed)
    inputs = {
        name: generate(name, seed, INPUT_PARTITIONS, windows, RECORDS_PER_PARTITION)
        for name in CASES
    }
    kstreams = run_kafka_streams_driver(
        inputs, windows, kafka_streams, tmp_path, f"driver-conformance-{seed}"
    )
    state_engine, native_core = state_engine_of(request.node), native_core_of(request.node)
    runtime = run_runtime_driver(
        inputs, windows, state_engine=state_engine, native_core=native_core
    )
    found = [
        difference
        for name, case in CASES.items()
        for difference in differences(case, kstreams[name], runtime[name])
    ]
    assert not found, (
        f"seed {seed}, {windows}, {state_engine}, native core {native_core}:\n" + "\n".join(found)
    )

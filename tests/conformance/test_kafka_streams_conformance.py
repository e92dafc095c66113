"""The runtime against Kafka Streams itself: every conformance topology runs in both engines on the
same seeded input, on the same broker, and the outputs must be equal record for record except
for the documented differences (see :mod:`tests.conformance.compare`).

CI runs a few fixed seeds; ``./dev test tests/conformance --conformance-seeds 50`` runs more.
"""

from __future__ import annotations

import random

import pytest

from streams_runtime import SessionWindows
from tests.conformance.broker_runs import INPUT_PARTITIONS
from tests.conformance.compare import differences
from tests.conformance.conftest import RunBoth
from tests.conformance.inputs import generate
from tests.conformance.topologies import CASES

pytestmark = [pytest.mark.broker, pytest.mark.network]

RECORDS_PER_PARTITION = 60


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        count = metafunc.config.getoption("conformance_seeds")
        metafunc.parametrize("seed", range(1, count + 1))


def windows_of(seed: int) -> SessionWindows:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    return SessionWindows(gap_ms=rng.choice((3_000, 5_000)), grace_ms=rng.choice((0, 2_000)))


def test_runtime_matches_kafka_streams(seed: int, both_engines: RunBoth) -> None:
    windows = windows_of(seed)
    inputs = {
        name: generate(name, seed, INPUT_PARTITIONS, windows, RECORDS_PER_PARTITION)
        for name in CASES
    }
    kstreams, runtime = both_engines(inputs, windows)
    found = [
        difference
        for name, case in CASES.items()
        for difference in differences(case, kstreams[name], runtime[name], broker=True)
    ]
    assert not found, f"seed {seed}, {windows}:\n" + "\n".join(found)

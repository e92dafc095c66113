"""Reads across keys of a fused windowed aggregation (``fetch_all``, ``all`` sessions) on the
``TopologyTestDriver``: the operator's open windows, both paths alike (the native core and the
chain), never a write-behind behind what was processed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams_runtime import StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Integer, String
from streams_runtime.testing import TopologyTestDriver

PATHS = ("native", "chain")


@pytest.fixture
def core_path() -> Callable[[str], dict[str, Any]]:
    pytest.importorskip("streams_runtime._native", reason="the native core is not built")
    return lambda path: {"native_core": path == "native", "statestore_cache_max_bytes": 10 << 20}


def test_every_key_s_open_windows_are_read_on_every_path(
    core_path: Callable[[str], dict[str, Any]],
) -> None:
    found = {}
    for path in PATHS:
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
        (
            builder.stream("clicks")
            .group_by_key()
            .windowed_by(TimeWindows.of_size(10_000, grace=5_000))
            .count(name="per-10s")
            .suppress(until_window_closes())
            .to_stream()
            .to("counts", value_serde=Integer())
        )
        with TopologyTestDriver(builder, **core_path(path)) as driver:
            clicks = driver.create_input_topic("clicks", String(), String())
            for key, ts in [("b", 1_000), ("a", 2_000), ("b", 12_000), ("c", 11_000)]:
                clicks.pipe_input(key, "x", timestamp=ts)
            store = driver.get_window_store("per-10s")
            found[path] = (store.fetch_all(0, 20_000), store.fetch_all(10_000, 10_000))
    assert found["native"] == (
        [("a", 0, 1), ("b", 0, 1), ("b", 10_000, 1), ("c", 10_000, 1)],
        [("b", 10_000, 1), ("c", 10_000, 1)],
    )
    assert found["chain"] == found["native"]

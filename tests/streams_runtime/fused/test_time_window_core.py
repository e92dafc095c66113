"""Two implementations, one behaviour: the native time-window core against its pure-Python
oracle, driven call for call with the same generated input (tumbling and hopping windows,
late and out-of-order records, keyless ones, control records, stored windows to start from,
writes taken at every point), for each aggregation and value serde as the session
core's test drives them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from tests.streams_runtime.fused.oracle.time_window_core import (
    TimeWindowCore as PythonTimeWindowCore,
)
from tests.streams_runtime.fused.test_session_core import KEYS, aggregations, drive, numbers

native = pytest.importorskip("streams_runtime._native", reason="the native core is not built")


@st.composite
def windows(draw: st.DrawFn) -> tuple[int, int, int]:
    """``(size, advance, grace)``: tumbling or hopping."""
    size = draw(st.integers(1, 60))
    return size, draw(st.integers(1, size)), draw(st.integers(0, 30))


@settings(max_examples=examples(300))
@given(
    spec=windows(),
    start_time=st.integers(-1, 150),
    scenario=aggregations(),
    data=st.data(),
)
def test_native_and_python_cores_agree_call_for_call(
    spec: tuple[int, int, int],
    start_time: int,
    scenario: tuple[str, dict[str, Any], list[tuple[str, Any]]],
    data: st.DataObject,
) -> None:
    size, advance, grace = spec
    aggregation, arguments, steps = scenario
    value = st.integers(1, 9) if aggregation == "count" else st.one_of(numbers, st.none())
    stored = data.draw(
        st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 20), value), max_size=4)
    )
    cores = [
        PythonTimeWindowCore(size, advance, grace, start_time, True, **arguments),
        native.TimeWindowCore(size, advance, grace, start_time, True, **arguments),
    ]
    loaded = {(key, n * advance): value for key, n, value in stored}  # one per window
    for core in cores:
        for (key, start), stored_value in loaded.items():
            core.load(key, start, start + size, stored_value, start + size - 1)
    drive(cores, steps, with_values=aggregation != "count")

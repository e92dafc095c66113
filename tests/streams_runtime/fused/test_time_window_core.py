"""Two implementations, one behaviour: the native time-window core against its pure-Python
reference, driven call for call with the same generated input (tumbling and hopping windows,
late and out-of-order records, keyless ones, control records, stored windows to start from,
writes taken at every point)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime.fused.time_window_core import TimeWindowCore as PythonTimeWindowCore
from tests.streams_runtime.fused.test_session_core import KEYS, drive, step

native = pytest.importorskip("streams_runtime._native", reason="the native core is not built")


@st.composite
def windows(draw: st.DrawFn) -> tuple[int, int, int]:
    """``(size, advance, grace)``: tumbling or hopping."""
    size = draw(st.integers(1, 60))
    return size, draw(st.integers(1, size)), draw(st.integers(0, 30))


@settings(max_examples=300, deadline=None)
@given(
    spec=windows(),
    start_time=st.integers(-1, 150),
    stored=st.lists(
        st.tuples(st.sampled_from(KEYS), st.integers(0, 20), st.integers(1, 9)), max_size=4
    ),
    steps=st.lists(step, max_size=25),
)
def test_native_and_python_cores_agree_call_for_call(
    spec: tuple[int, int, int],
    start_time: int,
    stored: list[tuple[bytes, int, int]],
    steps: list[tuple[str, Any]],
) -> None:
    size, advance, grace = spec
    cores = [
        PythonTimeWindowCore(size, advance, grace, start_time, True),
        native.TimeWindowCore(size, advance, grace, start_time, True),
    ]
    loaded = {(key, n * advance): value for key, n, value in stored}  # one per window
    for core in cores:
        for (key, start), value in loaded.items():
            core.load(key, start, start + size, value, start + size - 1)
    drive(cores, steps)

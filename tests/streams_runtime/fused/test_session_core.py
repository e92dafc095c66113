"""Two implementations, one behaviour: the native session core against its pure-Python
reference, driven call for call with the same generated input (late and out-of-order records,
keyless ones, control records, stored sessions to start from, writes taken at every point), and
the reference against the processors it fuses (``SessionAggregateProcessor`` feeding
``SuppressProcessor``) run uncached over in-memory stores."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime.fused.session_core import SessionCore as PythonSessionCore

native = pytest.importorskip("streams_runtime._native", reason="the native core is not built")

KEYS = [b"a", b"b", b"c", b"\x00\xff"]

record = st.tuples(st.sampled_from([*KEYS, None]), st.integers(0, 400))
step = st.one_of(
    st.tuples(st.just("batch"), st.lists(record, max_size=12)),
    st.tuples(st.just("advance"), st.integers(0, 500)),
    st.tuples(st.just("writes"), st.none()),
)


@st.composite
def stored_sessions(draw: st.DrawFn) -> list[tuple[bytes, int, int, int]]:
    """Sessions a restored task starts from: per key, disjoint and at least a gap apart."""
    sessions = []
    for key in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3)):
        at = draw(st.integers(0, 100))
        for _ in range(draw(st.integers(1, 3))):
            end = at + draw(st.integers(0, 30))
            sessions.append((key, at, end, draw(st.integers(1, 9))))
            at = end + 60
    return sessions


def drive(cores: list[Any], steps: list[tuple[str, Any]]) -> None:
    """Run ``steps`` on every core, requiring the same answers and state after each."""
    offset = 0
    for kind, arg in steps:
        if kind == "batch":
            keys = [key for key, _ in arg]
            timestamps = [t for _, t in arg]
            offsets = list(range(offset, offset + len(arg)))
            headers = [[("h", str(o).encode())] if o % 3 else None for o in offsets]
            offset += len(arg)
            results = [core.process(keys, timestamps, offsets, headers) for core in cores]
        elif kind == "advance":
            results = [core.advance(arg, offset) for core in cores]
            offset += 1
        else:
            results = [core.take_writes() for core in cores]
        assert results[0] == results[1], kind
        assert _state(cores[0]) == _state(cores[1])


def _state(core: Any) -> tuple[Any, ...]:
    return (
        core.observed_time,
        core.accepted_time,
        core.dirty_bytes,
        core.pending(),
        [core.fetch(key) for key in KEYS],
    )


@settings(max_examples=300, deadline=None)
@given(
    gap=st.integers(1, 50),
    grace=st.integers(0, 30),
    start_time=st.integers(-1, 150),
    keep_headers=st.booleans(),
    stored=stored_sessions(),
    steps=st.lists(step, max_size=25),
)
def test_native_and_python_cores_agree_call_for_call(  # noqa: PLR0917 - hypothesis's
    gap: int,
    grace: int,
    start_time: int,
    keep_headers: bool,
    stored: list[tuple[bytes, int, int, int]],
    steps: list[tuple[str, Any]],
) -> None:
    cores = [
        PythonSessionCore(gap, grace, start_time, keep_headers),
        native.SessionCore(gap, grace, start_time, keep_headers),
    ]
    for core in cores:
        for session in stored:
            core.load(*session)
    drive(cores, steps)


def test_a_batch_with_columns_of_different_lengths_is_refused() -> None:
    with pytest.raises(ValueError, match="length"):
        native.SessionCore(10, 0, -1, False).process([b"a"], [1, 2], [0], [None])

"""Two implementations, one behaviour: the native session core against its pure-Python
reference, driven call for call with the same generated input (late and out-of-order records,
keyless ones, control records, stored sessions to start from, writes taken at every point), for
each built-in aggregation: a count, and a sum, min and max of generated values (ints of every
size, floats with -0.0, NaN and infinities, bools, ``None``, and strings for a sum), through
each value serde's round trip; answers, state and writes must be identical, floats to the bit
and types included."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams_runtime.serdes import Float, Integer, Json
from tests.hypothesis_profiles import examples
from tests.streams_runtime.fused.oracle.session_core import SessionCore as PythonSessionCore

native = pytest.importorskip("streams_runtime._native", reason="the native core is not built")

KEYS = [b"a", b"b", b"c", b"\x00\xff"]
AGGREGATIONS = ["count", "sum", "min", "max", "reduce", "aggregate"]


def weighted(aggregate: Any, value: Any) -> Any:
    """A user's reducer, for ``reduce``: the order of every combination shows in its result."""
    return aggregate * 3 + value


def tally_start() -> int:
    """A user's initializer, for ``aggregate``."""
    return 1


def tally_add(key: str, value: Any, aggregate: Any) -> Any:
    """A user's aggregator: the order of every value, and the key it was given, show."""
    return aggregate * 3 + value + len(key)


def tally_merge(key: str, aggregate: Any, other: Any) -> Any:
    """A user's session merger."""
    return aggregate * 5 + other - len(key)


TALLY = (tally_start, tally_add, tally_merge)


# Mostly a few values that tie in every way (1, 1.0 and True; 0.0 and -0.0), that overflow 64
# bits when added, or that compare oddly (NaN); then any int or float.
TIES = [0, 1, -1, 2, 0.0, -0.0, 1.0, -1.0, 2.0, 0.1, 0.2, True, False]
EDGES = [float("nan"), -float("nan"), float("inf"), float("-inf")]
EDGES += [2**63 - 1, -(2**63), 2**62, 2**64]
numbers = st.one_of(
    st.sampled_from(TIES),
    st.sampled_from(TIES),
    st.sampled_from(TIES),
    st.sampled_from(EDGES),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)


def values(aggregation: str) -> st.SearchStrategy[Any]:
    """A record's value: mostly numbers, now and then ``None`` (a sum or a reduce: or a
    string)."""
    odd = [st.none()]
    if aggregation in {"sum", "reduce", "aggregate"}:
        odd.append(st.sampled_from(["a", "bc", ""]))
    return st.one_of(numbers, numbers, numbers, numbers, numbers, numbers, numbers, *odd)


def steps(aggregation: str) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """Batches, control records and write-behinds. A reduce's records are denser (fewer keys,
    less time) so that they meet in windows more often than they are late."""
    dense = aggregation != "count"
    keys, first, last = (KEYS[:2], 100, 250) if dense else (KEYS, 0, 400)
    record = st.tuples(
        st.sampled_from([*keys, None]), st.integers(first, last), values(aggregation)
    )
    step = st.one_of(
        st.tuples(st.just("batch"), st.lists(record, min_size=2 if dense else 0, max_size=12)),
        st.tuples(st.just("advance"), st.integers(0, last + 100)),
        st.tuples(st.just("writes"), st.none()),
    )
    return st.lists(step, min_size=4 if dense else 0, max_size=25)


@st.composite
def stored_sessions(draw: st.DrawFn, aggregation: str) -> list[tuple[bytes, int, int, Any]]:
    """Sessions a restored task starts from: per key, disjoint and at least a gap apart."""
    value = st.integers(1, 9) if aggregation == "count" else numbers
    sessions = []
    for key in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3)):
        at = draw(st.integers(0, 100))
        for _ in range(draw(st.integers(1, 3))):
            end = at + draw(st.integers(0, 30))
            sessions.append((key, at, end, draw(value)))
            at = end + 60
    return sessions


@st.composite
def aggregations(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[tuple[str, Any]]]:
    """``(aggregation, the cores' aggregation arguments, steps)``: a reduce's aggregates take
    the round trip of a value serde, or none."""
    aggregation = draw(st.sampled_from(AGGREGATIONS))
    arguments: dict[str, Any] = {"aggregation": aggregation}
    if aggregation == "reduce":
        arguments["functions"] = weighted
    if aggregation == "aggregate":
        arguments["functions"] = TALLY
    if aggregation != "count":
        serde, exact_ints, exact_floats = draw(
            st.sampled_from(
                [
                    (None, True, True),
                    (Integer(), True, False),
                    (Float(), False, True),
                    (Json(), True, True),
                    (Json(), False, False),
                ]
            )
        )
        normalize = None if serde is None else (lambda x: serde.deserialize(serde.serialize(x)))
        arguments.update(normalize=normalize, exact_ints=exact_ints, exact_floats=exact_floats)
    return aggregation, arguments, draw(steps(aggregation))


Scenario = tuple[str, dict[str, Any], list[tuple[str, Any]], list[tuple[bytes, int, int, Any]]]


@st.composite
def session_scenarios(draw: st.DrawFn) -> Scenario:
    """An aggregation's scenario, and the stored sessions the cores start from."""
    aggregation, arguments, scenario_steps = draw(aggregations())
    return aggregation, arguments, scenario_steps, draw(stored_sessions(aggregation))


def canonical(value: Any) -> Any:
    """``value`` comparable exactly: floats by their bits, numbers with their type, exceptions
    by type and message."""
    if isinstance(value, list | tuple):
        return type(value)(canonical(v) for v in value)
    if isinstance(value, float):
        return ("float", struct.pack(">d", value))
    if isinstance(value, bool | int):
        return (type(value).__name__, int(value))
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    return value


def drive(cores: list[Any], steps: list[tuple[str, Any]], *, with_values: bool = False) -> None:
    """Run ``steps`` on every core, requiring the same answers and state after each."""
    offset = 0
    for kind, arg in steps:
        if kind == "batch":
            keys = [key for key, *_ in arg]
            timestamps = [t for _, t, *_ in arg]
            batch_values = [v for _, _, v in arg] if with_values else None
            offsets = list(range(offset, offset + len(arg)))
            headers = [[("h", str(o).encode())] if o % 3 else None for o in offsets]
            offset += len(arg)
            # The keys as an aggregate's functions take them (the source's objects).
            key_objects = [None if k is None else k.decode("latin-1") for k in keys]
            columns = (keys, timestamps, offsets, headers, batch_values, key_objects)
            while True:  # after a failing record, the rest of the batch (as the operator does)
                results = [core.process(*columns) for core in cores]
                failure = results[0][3]
                if failure is None or len(keys) == failure[0] + 1:
                    break
                assert canonical(results[0]) == canonical(results[1])
                columns = tuple(  # type: ignore[assignment]
                    None if column is None else column[failure[0] + 1 :] for column in columns
                )
                keys = columns[0]
        elif kind == "advance":
            results = [core.advance(arg, offset) for core in cores]
            offset += 1
        else:
            results = [core.take_writes() for core in cores]
        assert canonical(results[0]) == canonical(results[1]), kind
        assert canonical(_state(cores[0])) == canonical(_state(cores[1]))


def _state(core: Any) -> tuple[Any, ...]:
    return (
        core.observed_time,
        core.accepted_time,
        core.dirty_bytes,
        core.pending(),
        core.keys(),
        [core.fetch(key) for key in KEYS],
    )


_SUM = {"aggregation": "sum", "normalize": None, "exact_ints": True, "exact_floats": True}


@settings(max_examples=examples(300))
@given(
    gap=st.integers(1, 50),
    grace=st.integers(0, 30),
    start_time=st.integers(-1, 150),
    keep_headers=st.booleans(),
    scenario=session_scenarios(),
)
# NaN + -NaN: LLVM may swap an addition's operands, and the hardware takes a NaN's sign from the
# first; every NaN aggregate is the one NaN (0x7ff8000000000000) on both cores.
@example(
    gap=1,
    grace=0,
    start_time=0,
    keep_headers=False,
    scenario=(
        "sum",
        _SUM,
        [
            ("batch", [(b"a", 100, 0), (b"a", 100, 0)]),
            ("batch", [(b"a", 100, 0), (b"a", 100, 0)]),
            ("batch", [(b"a", 100, None), (b"b", 100, math.nan)]),
            ("batch", [(b"a", 100, None), (b"b", 100, -math.nan)]),
        ],
        [],
    ),
)
def test_native_and_python_cores_agree_call_for_call(
    gap: int, grace: int, start_time: int, keep_headers: bool, scenario: Scenario
) -> None:
    aggregation, arguments, steps, stored = scenario
    cores = [
        PythonSessionCore(gap, grace, start_time, keep_headers, **arguments),
        native.SessionCore(gap, grace, start_time, keep_headers, **arguments),
    ]
    for core in cores:
        for session in stored:
            core.load(*session)
    drive(cores, steps, with_values=aggregation != "count")


def test_a_count_takes_no_values_and_a_reduce_needs_them() -> None:
    counted = native.SessionCore(10, 0, -1, False).process([b"a"], [1], [0], [None])
    assert counted[1:] == (0, 0, None)
    for core in (
        PythonSessionCore(10, 0, -1, False, aggregation="sum"),
        native.SessionCore(10, 0, -1, False, aggregation="sum"),
    ):
        with pytest.raises(ValueError, match="values"):
            core.process([b"a"], [1], [0], [None])


def test_a_batch_stops_at_a_failing_record_keeping_what_came_before() -> None:
    for core in (
        PythonSessionCore(10, 0, -1, False, aggregation="sum"),
        native.SessionCore(10, 0, -1, False, aggregation="sum"),
    ):
        finals, late, keyless, failure = core.process(
            [b"a", None, b"a", b"a"], [1, 2, 3, 4], [0, 1, 2, 3], [None] * 4, [1.5, 0, "x", 2]
        )
        assert (finals, late, keyless) == ([], 0, 1)
        assert failure is not None
        assert failure[0] == 2
        assert isinstance(failure[1], TypeError)
        # The session the failing record would have merged stays, as in Kafka Streams.
        assert core.fetch(b"a") == [(1, 1, 1.5)]


def test_a_batch_with_columns_of_different_lengths_is_refused() -> None:
    with pytest.raises(ValueError, match="length"):
        native.SessionCore(10, 0, -1, False).process([b"a"], [1, 2], [0], [None])

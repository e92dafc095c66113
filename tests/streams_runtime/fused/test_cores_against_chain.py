"""The native core, and its pure-Python oracle, against the chain they fuse, without a broker:
the same generated records (a sum, min, max, or a reduce or aggregate by the user's functions,
of ints, floats, bools, ``None`` and strings) through ``SessionAggregateProcessor`` or
``TimeWindowAggregateProcessor`` feeding ``SuppressProcessor`` (uncached, over in-memory
stores) and through the core give the same final results and refuse the same records (the
chain raises for them; the core returns them as failed)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime import SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.fused import native_available
from streams_runtime.record import Record
from streams_runtime.serdes import Json, String
from tests.hypothesis_profiles import examples
from tests.streams_runtime.fused.oracle.session_core import SessionCore as OracleSessionCore
from tests.streams_runtime.fused.oracle.time_window_core import (
    TimeWindowCore as OracleTimeWindowCore,
)
from tests.streams_runtime.fused.test_session_core import (
    TALLY,
    numbers,
    tally_add,
    tally_merge,
    tally_start,
    weighted,
)
from tests.streams_runtime.processors.memory_context import MemoryContext


def _cores() -> list[Any]:
    """(session core, time-window core) of each implementation: the native one where built."""
    oracle = pytest.param((OracleSessionCore, OracleTimeWindowCore), id="oracle")
    if not native_available():
        return [pytest.param(None, id="native", marks=pytest.mark.skip("not built")), oracle]
    from streams_runtime._native import SessionCore, TimeWindowCore

    return [pytest.param((SessionCore, TimeWindowCore), id="native"), oracle]


CORES = _cores()

FAR = 10_000
value = st.one_of(numbers, numbers, numbers, st.none(), st.sampled_from(["a", "bc"]))
# Mostly forward in time, now and then back (late, or out of order within the grace).
step = st.tuples(st.sampled_from(["a", "b"]), st.integers(-40, 25), value)


@st.composite
def records(draw: st.DrawFn) -> list[tuple[str, int, Any]]:
    """``(key, timestamp, value)``."""
    found, t = [], 0
    for key, delta, v in draw(st.lists(step, min_size=1, max_size=30)):
        t = max(0, t + delta)
        found.append((key, t, v))
    return found


def _canonical(found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Sorted, numbers with their type (every NaN alike: the chain forwards what it computed,
    the core what the store would read back)."""

    def exact(v: Any) -> Any:
        if isinstance(v, float):
            return ("float", "nan" if math.isnan(v) else v.hex())
        return (type(v).__name__, v)

    return sorted(((*window, exact(v)) for *window, v in found), key=repr)


def _chain(windows: Any, builtin: str, records: list[Any]) -> tuple[list[Any], list[int]]:
    builder = StreamsBuilder()
    finals: list[tuple[Any, ...]] = []
    windowed = (
        builder.stream("in", key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(windows)
    )
    if builtin == "reduce":
        aggregated = windowed.reduce(weighted)
    elif builtin == "aggregate":
        merger = (tally_merge,) if isinstance(windows, SessionWindows) else ()
        aggregated = windowed.aggregate(tally_start, tally_add, *merger, value_serde=Json())
    else:
        aggregated = getattr(windowed, builtin)()
    (
        aggregated.suppress(until_window_closes())
        .to_stream()
        .foreach(lambda w, v: finals.append((w.key, w.start, w.end, v)))
    )
    sources, processors = builder.build("app").subtopology_of("in").instantiate()
    context = MemoryContext()
    for processor in processors:
        processor.init(context)
    failed = []
    for i, (key, t, v) in enumerate(records):
        try:
            sources["in"].forward(Record(key, v, t))
        except Exception:
            failed.append(i)
    sources["in"].advance(FAR)
    return finals, failed


def _core(core: Any, records: list[Any]) -> tuple[list[Any], list[int]]:
    finals: list[tuple[Any, ...]] = []
    failed = []
    done = 0
    while done < len(records):
        batch = records[done:]
        emitted, _, _, failure = core.process(
            [key.encode() for key, _, _ in batch],
            [t for _, t, _ in batch],
            list(range(done, len(records))),
            [None] * len(batch),
            [v for *_, v in batch],
            [key for key, _, _ in batch],
        )
        finals += [(key.decode(), start, end, v) for key, start, end, v, *_ in emitted]
        if failure is None:
            break
        failed.append(done + failure[0])
        done += failure[0] + 1
    finals += [(key.decode(), start, end, v) for key, start, end, v, *_ in core.advance(FAR, 0)]
    return finals, failed


def _aggregation(builtin: str) -> dict[str, Any]:
    serde = Json()
    return {
        "aggregation": builtin,
        "functions": {"reduce": weighted, "aggregate": TALLY}.get(builtin),
        "normalize": lambda x: serde.deserialize(serde.serialize(x)),
        "exact_ints": True,
        "exact_floats": True,
    }


@pytest.mark.parametrize("cores", CORES)
@settings(max_examples=examples(200))
@given(
    builtin=st.sampled_from(["sum", "min", "max", "reduce", "aggregate"]),
    gap=st.integers(1, 60),
    grace=st.integers(0, 30),
    records=records(),
)
def test_the_session_core_computes_what_the_chain_does(
    cores: Any, builtin: str, gap: int, grace: int, records: list[Any]
) -> None:
    session_core, _ = cores
    chain = _chain(SessionWindows(gap, grace), builtin, records)
    core = _core(session_core(gap, grace, -1, False, **_aggregation(builtin)), records)
    assert core[1] == chain[1]
    assert _canonical(core[0]) == _canonical(chain[0])


@pytest.mark.parametrize("cores", CORES)
@settings(max_examples=examples(200))
@given(
    builtin=st.sampled_from(["sum", "min", "max", "reduce", "aggregate"]),
    size=st.integers(1, 60),
    data=st.data(),
    grace=st.integers(0, 30),
    records=records(),
)
def test_the_time_window_core_computes_what_the_chain_does(  # noqa: PLR0917 - drawn
    cores: Any, builtin: str, size: int, data: st.DataObject, grace: int, records: list[Any]
) -> None:
    _, time_window_core = cores
    advance = data.draw(st.integers(1, size))
    chain = _chain(TimeWindows(size, advance, grace), builtin, records)
    core = _core(time_window_core(size, advance, grace, -1, True, **_aggregation(builtin)), records)
    assert core[1] == chain[1]
    assert _canonical(core[0]) == _canonical(chain[0])


@pytest.mark.parametrize("cores", CORES)
def test_a_refused_record_leaves_the_sessions_it_would_merge(cores: Any) -> None:
    """As in Kafka Streams (KStreamSessionWindowAggregate), the sessions a record merges are
    removed only once their new aggregate is known: ``1 + "x"`` refuses the record between
    the two sessions, and both stay, on every path."""
    records = [("a", 0, 1), ("a", 20, 2), ("a", 10, "x")]
    expected = ([("a", 0, 0, 1), ("a", 20, 20, 2)], [2])
    assert _chain(SessionWindows(10, 0), "sum", records) == expected
    session_core, _ = cores
    assert _core(session_core(10, 0, -1, False, **_aggregation("sum")), records) == expected

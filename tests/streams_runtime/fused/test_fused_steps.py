"""Steps fused with what follows them: ``filter``, ``map_values``, ``peek`` and stream-table
joins (inner and left) in front of a count, sum, reduce or aggregate with the user's functions,
suppressed until windows close; and those steps with ``map`` and ``select_key`` batched in front
of a sink. Generated topologies and inputs run through a task fused and on the processor chain,
fed in batches across both of the task's inputs (the stream and the joined table), with a user
function that raises, late records, null keys and values, and record caches of every size; both
give the same output, the same dropped records and the same calls of the user's ``peek``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams_runtime import (
    RuntimeSettings,
    SessionWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.task import StreamTask
from streams_runtime.record import Headers, SourceRecord, TaskId, TopicPartitionId
from streams_runtime.serdes import Json, String
from streams_runtime.settings import BadRecordPolicy

pytest.importorskip("streams_runtime._native", reason="the native core is not built")

STEPS = ("filter", "map_values", "peek", "join", "left_join", "raise")
REKEYING = ("select_key", "map")
KEYS = ("a", "b", "c", None)


class _Outputs:
    """What the task sends, in order (changelogs are not kept)."""

    def __init__(self) -> None:
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self.out: list[tuple[str, bytes | None, bytes | None, int]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition: int = -1,
    ) -> None:
        if not topic.endswith("-changelog"):  # the output, and a repartition's
            self.out.append((topic, key, value, timestamp))

    def send_many(self, topic: str, partition: int, records: Iterable[object], ts: int) -> None:
        del topic, partition, records, ts


def _steps(rows: Any, seen: list[Any]) -> dict[str, Callable[[Any], Any]]:
    return {
        "filter": lambda stream: stream.filter(lambda _k, v: v % 3 != 0),
        "map_values": lambda stream: stream.map_values(lambda v: v + 1),
        "peek": lambda stream: stream.peek(lambda k, v: seen.append((k, v))),
        "join": lambda stream: stream.join(rows, lambda v, row: v + row),
        "left_join": lambda stream: stream.left_join(rows, lambda v, row: v + (row or 0)),
        "raise": lambda stream: stream.map_values(_raising),
        "select_key": lambda stream: stream.select_key(
            lambda k, v: None if v is None else f"{k}-{v % 2}"
        ),
        "map": lambda stream: stream.map(lambda k, v: (k, [k, v])),
    }


def _topology(steps: list[str], windows: Any, aggregation: str | None, seen: list[Any]) -> Any:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    make = _steps(builder.table("rows"), seen)
    stream: Any = builder.stream("in")
    for step in steps:
        stream = make[step](stream)
    if aggregation is None:
        stream.to("out")
        return builder
    windowed = stream.group_by_key().windowed_by(windows)
    if aggregation == "count":
        table = windowed.count()
    elif aggregation == "sum":
        table = windowed.sum()
    elif aggregation == "reduce":
        table = windowed.reduce(lambda a, b: a * 2 + b)
    elif isinstance(windows, SessionWindows):
        table = windowed.aggregate(lambda: 0, lambda _k, v, a: a + v, lambda _k, a, b: a + b)
    else:
        table = windowed.aggregate(lambda: 0, lambda _k, v, a: a + v)
    table.suppress(until_window_closes()).to_stream().map(
        lambda w, n: (w.key, [w.start, w.end, n])
    ).to("out")
    return builder


def _raising(value: int) -> int:
    if value == 13:
        raise ValueError("thirteen")
    return value


def _run(
    case: dict[str, Any], tmp_path: Path, *, native_core: bool
) -> tuple[list[Any], list[Any], float]:
    seen: list[Any] = []
    runtime = RuntimeSettings(
        application_id="steps",
        bootstrap_servers="unused:9092",
        max_task_idle_ms=-1,
        native_core=native_core,
        statestore_cache_max_bytes=case["cache"],
        bad_record_policy=BadRecordPolicy.LOG_AND_SKIP,
        state_dir=tmp_path / ("native" if native_core else "chain"),
    )
    builder = _topology(case["steps"], case["windows"], case["aggregation"], seen)
    topology = builder.build("steps", runtime)
    (sub,) = [s for s in topology.subtopologies if "in" in s.source_topics]
    assert any(node.fuses for node in sub.nodes) == native_core
    metrics = RuntimeMetrics(f"steps-{native_core}")
    outputs = _Outputs()
    task = StreamTask(
        TaskId(sub.id, 0),
        sub,
        settings=runtime,
        collector=cast("RecordCollector", outputs),
        metrics=metrics,
        bad_records=BadRecordHandler(BadRecordPolicy.LOG_AND_SKIP, "dlq", lambda *_: None, metrics),
        lag=lambda _tp: 0,
    )
    task.prepare({})
    task.start_processing()
    offsets = {"in": 0, "rows": 0}
    for batch in case["batches"]:
        by_topic: dict[str, list[SourceRecord]] = {}
        for topic, key, value, timestamp in batch:
            if topic not in sub.source_topics:
                continue
            raw_key = None if key is None else key.encode()
            raw_value = None if value is None else json.dumps(value).encode()
            record = SourceRecord(topic, 0, offsets[topic], timestamp, raw_key, raw_value, None)
            offsets[topic] += 1
            by_topic.setdefault(topic, []).append(record)
        for topic, records in by_topic.items():
            task.add_records(TopicPartitionId(topic, 0), records)
        task.process(10_000)
        task.flush()
    dropped = sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name.endswith("dropped_records")
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    return outputs.out, seen, dropped


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    events = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["in", "in", "in", "rows"]),
                st.sampled_from(KEYS),
                st.one_of(*[st.integers(0, 20)] * 5, st.none()),
                st.sampled_from([0, 5, 20, 60, 150, 400, -30]),
            ),
            min_size=10,
            max_size=80,
        )
    )
    timestamp, timed = 1_000, []
    for topic, key, value, step in events:
        timestamp = max(0, timestamp + step)
        timed.append((topic, key, value, timestamp))
    cuts = sorted(draw(st.lists(st.integers(0, len(timed)), max_size=5)))
    bounds = [0, *cuts, len(timed)]
    return {
        "steps": draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4)),
        "windows": draw(
            st.sampled_from([SessionWindows(gap_ms=100), TimeWindows(size_ms=100, advance_ms=50)])
        ),
        "aggregation": draw(st.sampled_from(["count", "sum", "reduce", "aggregate"])),
        "cache": draw(st.sampled_from([0, 64, 10 << 20])),
        "batches": [timed[a:b] for a, b in itertools.pairwise(bounds)],
    }


@st.composite
def stateless_cases(draw: st.DrawFn) -> dict[str, Any]:
    case = draw(cases())
    steps = st.sampled_from(STEPS + REKEYING * 2)
    return {**case, "steps": draw(st.lists(steps, min_size=2, max_size=5)), "aggregation": None}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_steps_fused_with_an_aggregation_compute_what_the_chain_does(
    case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp_path = tmp_path_factory.mktemp("steps")
    assert _run(case, tmp_path, native_core=True) == _run(case, tmp_path, native_core=False)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=stateless_cases())
def test_batched_stateless_steps_give_what_the_chain_gives(
    case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp_path = tmp_path_factory.mktemp("stateless")
    assert _run(case, tmp_path, native_core=True) == _run(case, tmp_path, native_core=False)

"""Running the conformance cases on the broker (their twin without one is :mod:`.drivers`):
produce the input, run it through Kafka Streams and the runtime until both processed all of it,
read their outputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from progress_control.protocol import is_control_record
from streams_runtime import App, SessionWindows, StreamsBuilder
from streams_runtime.serdes import String
from tests.conformance.compare import OutputRecord
from tests.conformance.inputs import WALL_CLOCK, InputRecord
from tests.conformance.kstreams import KafkaStreamsApps
from tests.conformance.topologies import CASES, build_runtime_case
from tests.helpers import delete_topics, unique_name, wait_for

__all__ = ["INPUT_PARTITIONS", "Outputs", "run_both_engines"]

INPUT_PARTITIONS = 3
OUTPUT_PARTITIONS = 2


def produce(
    bootstrap: str, topics: dict[str, str], records: list[InputRecord], base_ms: int
) -> None:
    """Write ``records`` in order (each to its explicit partition), timestamps shifted by
    ``base_ms``, leaving out the drivers' wall-clock moves; fail unless every record was
    acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failures: list[str] = []

    def on_delivery(error: object, _msg: object) -> None:
        if error is not None:
            failures.append(str(error))

    for sequence, record in enumerate(records):
        if record.role == WALL_CLOCK:
            continue
        producer.produce(
            topics[record.role],
            record.value,
            record.key,
            record.partition,
            timestamp=base_ms + record.timestamp,
            headers=record.headers(sequence),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0, "input not delivered within 30 s"
    assert not failures, failures[:3]


class ProcessedCheck:
    """Whether a consumer group has committed the end of its inputs and of its application's
    internal topics it reads (``<application id>-...-repartition``, and a foreign-key join's
    ``...-topic``): everything it will ever output for the input is then written (both engines
    flush their producer before committing)."""

    def __init__(self, bootstrap: str, application_id: str, inputs: list[str]) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": application_id,
                "enable.auto.commit": False,
            }
        )
        self._application_id = application_id
        self._inputs = inputs

    def __call__(self) -> bool:
        metadata = self._consumer.list_topics(timeout=10)
        topics = self._inputs + [
            name
            for name in metadata.topics
            if name.startswith(f"{self._application_id}-")
            and name.endswith(("-repartition", "-topic"))
        ]
        partitions = [
            TopicPartition(topic, p) for topic in topics for p in metadata.topics[topic].partitions
        ]
        for tp in self._consumer.committed(partitions, timeout=10):
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            if high > 0 and tp.offset < high:
                return False
        return True

    def close(self) -> None:
        self._consumer.close()


def read_to_end(
    bootstrap: str, topic: str, base_ms: int, timeout_s: float = 60.0
) -> list[OutputRecord]:
    """Every record of ``topic`` up to its current end, in offset order per partition, with
    timestamps relative to ``base_ms``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("conformance-reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        remaining = {p for p, end in ends.items() if end > 0}
        records: list[OutputRecord] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset >= ends[partition]:
                remaining.discard(partition)
                continue
            records.append(
                OutputRecord(
                    partition,
                    msg.key(),
                    msg.value(),
                    msg.timestamp()[1] - base_ms,
                    tuple(msg.headers() or ()),
                    control=is_control_record(msg),
                )
            )
            if offset + 1 >= ends[partition]:
                remaining.discard(partition)
        return records
    finally:
        consumer.close()


Outputs = dict[str, dict[str, list[OutputRecord]]]  # case -> output role -> records


def run_both_engines(
    inputs: dict[str, list[InputRecord]],
    windows: SessionWindows,
    *,
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    state_dir: Path,
    state_engine: str = "memory",
    native_core: bool = True,
    cache_max_bytes: int = 0,
    commit_interval_ms: int = 100,
) -> tuple[Outputs, Outputs]:
    """Run the cases named in ``inputs`` on those inputs, in Kafka Streams and in the runtime
    (its stores on ``state_engine``, fusable chains on its native core unless ``native_core`` is
    false), until both processed all of it; their outputs (Kafka
    Streams', the runtime's), with timestamps relative to the inputs' (which are produced an hour
    in the past). Both run with a record cache of ``cache_max_bytes`` (default 0, off: every
    update is forwarded as it happens; with a cache, which updates are merged depends on
    commit timing, so only final results can be compared), committing every
    ``commit_interval_ms``."""
    # An hour back, on a whole minute: the input's window boundaries (multiples of a window's
    # size or advance, all dividing a minute) stay window boundaries once shifted.
    base_ms = (int(time.time()) // 60 - 60) * 60_000
    topics: dict[str, dict[str, str]] = {}
    out: dict[str, dict[str, dict[str, str]]] = {"kstreams": {}, "runtime": {}}
    for name, records in inputs.items():
        case = CASES[name]
        topics[name] = {
            role: create_topic(f"{name}-{role}", INPUT_PARTITIONS) for role in case.inputs
        }
        for engine, engine_topics in out.items():
            engine_topics[name] = {
                role: create_topic(f"{name}-{engine}-{role}", OUTPUT_PARTITIONS)
                for role in case.outputs
            }
        produce(kafka_bootstrap, topics[name], records, base_ms)

    kstreams_id = unique_name("conformance-kstreams")
    spec = {
        "application.id": kstreams_id,
        "bootstrap.servers": kafka_bootstrap,
        "state.dir": str(state_dir / "kstreams"),
        "topologies": ",".join(inputs),
        "config.statestore.cache.max.bytes": str(cache_max_bytes),
        "config.commit.interval.ms": str(commit_interval_ms),
        "config.max.task.idle.ms": "0",
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
    }
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    for name in inputs:
        spec[f"{name}.type"] = name
        spec[f"{name}.gap.ms"] = str(windows.gap_ms)
        spec[f"{name}.grace.ms"] = str(windows.grace_ms)
        for role, topic in (topics[name] | out["kstreams"][name]).items():
            spec[f"{name}.{role}"] = topic
        build_runtime_case(builder, name, topics[name] | out["runtime"][name], windows)

    all_inputs = [topic for case_topics in topics.values() for topic in case_topics.values()]
    # A global table's topic is read by no consumer group: nothing commits its offsets.
    grouped_inputs = [
        topic
        for name, case_topics in topics.items()
        for role, topic in case_topics.items()
        if role not in CASES[name].global_inputs
    ]
    kafka_streams.start(spec)
    runtime_id = unique_name("conformance-runtime")
    app = run_app(
        builder,
        application_id=runtime_id,
        commit_interval_ms=commit_interval_ms,
        max_task_idle_ms=0,
        state_dir=state_dir / "runtime",
        state_engine=state_engine,
        native_core=native_core,
        statestore_cache_max_bytes=cache_max_bytes,
    )
    checks = [
        ProcessedCheck(kafka_bootstrap, app_id, grouped_inputs)
        for app_id in (kstreams_id, runtime_id)
    ]
    try:
        for check in checks:

            def processed(check: ProcessedCheck = check) -> bool:
                kafka_streams.check(kstreams_id)
                assert app.error is None, f"runtime failed: {app.error!r}"
                return check()

            wait_for(processed, timeout_s=180, interval_s=0.5, message="both engines to catch up")
    finally:
        for check in checks:
            check.close()
        kafka_streams.stop(kstreams_id)
        app.close()

    def read(engine: str) -> Outputs:
        return {
            name: {
                role: read_to_end(kafka_bootstrap, topic, base_ms)
                for role, topic in out[engine][name].items()
            }
            for name in inputs
        }

    try:
        return read("kstreams"), read("runtime")
    finally:  # some 500 partitions a seed: 40 seeds ran the broker out of file handles
        outputs = [t for engine in out.values() for case in engine.values() for t in case.values()]
        delete_topics(kafka_bootstrap, [*all_inputs, *outputs], prefixes=(kstreams_id, runtime_id))

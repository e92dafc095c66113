"""The conformance cases through both test drivers, without a broker: Kafka Streams'
``TopologyTestDriver`` (in the conformance JVM) and the runtime's
(:class:`streams_runtime.testing.TopologyTestDriver`).

Every topic of a driver has one partition, so each case runs in a driver of its own per input
partition of the seeded input (what one task sees on a broker), its records piped in input
order. Outputs are named by that input partition; ticks the runtime writes are read apart and
left out, as the broker comparison leaves them out.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

from streams_runtime import SessionWindows, StreamsBuilder
from streams_runtime.serdes import Bytes, String
from streams_runtime.testing import TopologyTestDriver
from streams_runtime.testing.driver import MEMORY_DIR
from tests.conformance.broker_runs import Outputs
from tests.conformance.compare import OutputRecord
from tests.conformance.inputs import WALL_CLOCK, InputRecord
from tests.conformance.kstreams import KafkaStreamsApps
from tests.conformance.topologies import CASES, JOIN_CASES, build_runtime_case

__all__ = ["run_kafka_streams_driver", "run_runtime_driver"]

_SUPPLIERS = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$"
IN_MEMORY_STORES = _SUPPLIERS + "InMemoryDslStoreSuppliers"
ROCKSDB_STORES = _SUPPLIERS + "RocksDBDslStoreSuppliers"
"""Kafka Streams' drivers keep their stores in memory (opening RocksDB stores for some sixty
drivers a seed takes ten times as long), except in the windowed joins: there its in-memory
window store keeps records for another time than its default RocksDB store, which the runtime
follows (tests/conformance/test_kafka_streams_conformance.py runs on RocksDB throughout)."""

WALL_CLOCK_MS = 1_700_000_000_000
"""The runtime driver's wall clock: past every input timestamp, so no tick is too far ahead."""


def _topics(name: str) -> dict[str, str]:
    case = CASES[name]
    return {role: f"{name}-{role}" for role in (*case.inputs, *case.outputs)}


def _field(data: bytes | None) -> str:
    return "-" if data is None else base64.b64encode(data).decode()


def _bytes(field: str) -> bytes | None:
    return None if field == "-" else base64.b64decode(field)


def run_kafka_streams_driver(
    inputs: dict[str, list[InputRecord]],
    windows: SessionWindows,
    kafka_streams: KafkaStreamsApps,
    work_dir: Path,
    app_id: str,
) -> Outputs:
    """Kafka Streams' driver's outputs of the cases in ``inputs``."""
    state_dir = tempfile.mkdtemp(prefix="kafka-streams-driver-", dir=MEMORY_DIR)
    spec = {
        "application.id": app_id,
        "state.dir": state_dir,  # synced after every record, as the runtime's driver's
        "topologies": ",".join(inputs),
        "config.statestore.cache.max.bytes": "0",
        "config.max.task.idle.ms": "0",
        "config.dsl.store.suppliers.class": IN_MEMORY_STORES,
        "config.default.key.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "config.default.value.serde": "org.apache.kafka.common.serialization.Serdes$StringSerde",
    }
    lines = []
    for name, records in inputs.items():
        spec[f"{name}.type"] = name
        spec[f"{name}.gap.ms"] = str(windows.gap_ms)
        spec[f"{name}.grace.ms"] = str(windows.grace_ms)
        if name in JOIN_CASES:
            spec[f"{name}.config.dsl.store.suppliers.class"] = ROCKSDB_STORES
        for role, topic in _topics(name).items():
            spec[f"{name}.{role}"] = topic
        for sequence, record in enumerate(records):
            headers = ",".join(f"{n}={_field(v)}" for n, v in record.headers(sequence)) or "-"
            fields = [name, str(record.partition), record.role, _field(record.key)]
            fields += [_field(record.value), str(record.timestamp), headers]
            lines.append("\t".join(fields))
    input_path, output_path = work_dir / f"{app_id}.in", work_dir / f"{app_id}.out"
    input_path.write_text("\n".join(lines) + "\n")
    try:
        kafka_streams.drive(spec, input_path, output_path)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    outputs: Outputs = {name: {role: [] for role in CASES[name].outputs} for name in inputs}
    for line in output_path.read_text().splitlines():
        name, partition, role, key, value, timestamp, headers = line.split("\t")
        pairs = () if headers == "-" else tuple(h.split("=", 1) for h in headers.split(","))
        outputs[name][role].append(
            OutputRecord(
                int(partition),
                _bytes(key),
                _bytes(value),
                int(timestamp),
                tuple((n, _bytes(v)) for n, v in pairs),
            )
        )
    return outputs


def run_runtime_driver(
    inputs: dict[str, list[InputRecord]],
    windows: SessionWindows,
    *,
    state_engine: str = "memory",
    native_core: bool = True,
) -> Outputs:
    """The runtime's driver's outputs of the cases in ``inputs``."""
    outputs: Outputs = {}
    for name, records in inputs.items():
        outputs[name] = {role: [] for role in CASES[name].outputs}
        by_partition: dict[int, list[tuple[int, InputRecord]]] = defaultdict(list)
        for sequence, record in enumerate(records):
            by_partition[record.partition].append((sequence, record))
        topics = _topics(name)
        for partition, piped in sorted(by_partition.items()):
            builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
            build_runtime_case(builder, name, topics, windows)
            with TopologyTestDriver(
                builder,
                application_id=f"conformance-{name}",
                max_task_idle_ms=0,
                statestore_cache_max_bytes=0,
                state_engine=state_engine,
                native_core=native_core,
                initial_wall_clock_time_ms=WALL_CLOCK_MS,
            ) as driver:
                for sequence, record in piped:
                    if record.role == WALL_CLOCK:
                        driver.advance_wall_clock_time(record.timestamp)
                        continue
                    driver.pipe_raw(
                        topics[record.role],
                        record.key,
                        record.value,
                        record.timestamp,
                        record.headers(sequence),
                    )
                for role in CASES[name].outputs:
                    topic = driver.create_output_topic(topics[role], Bytes(), Bytes())
                    outputs[name][role] += [
                        OutputRecord(partition, r.key, r.value, r.timestamp, tuple(r.headers))
                        for r in topic.read_records()
                    ]
    return outputs

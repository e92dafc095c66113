"""The public API, pinned (as httpx's ``tests/test_exported_members.py`` does): each public
package's and module's ``__all__``, and nothing public in a package's namespace beside it.

A change here is a change users see: add a name on purpose, remove one with a deprecation.
Internal packages export nothing (:mod:`streams_runtime.processing`); their modules are imported
by path inside the project only.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

PUBLIC: dict[str, list[str]] = {
    "progress_control": [
        "CONTROL_HEADER",
        "ControlMarker",
        "ControlRecord",
        "DEFAULT_SENTINEL_KEY",
        "MalformedControlHeaderError",
        "PROTOCOL_VERSION",
        "TimestampMode",
        "__version__",
        "extrapolated_timestamp_ms",
        "is_control_record",
        "parse_control_headers",
    ],
    "progress_control.readers.kafka_connect": ["SINK_DROP_TICKS", "sink_drop_ticks"],
    "progress_control.readers.tick_gate": ["TickDecision", "TickGate", "TickGateStats"],
    "progress_control_apps.spark": [
        "BatchRange",
        "BatchResult",
        "Difference",
        "DifferenceKind",
        "InputSchema",
        "KafkaSource",
        "MalformedRecord",
        "ReconciliationReport",
        "RecordCounts",
        "RuntimeSession",
        "Session",
        "SessionizationStream",
        "SparkJobSettings",
        "StreamConfig",
        "StreamFailedError",
        "StreamMetrics",
        "StreamResult",
        "batch_sessions",
        "collect_sessions",
        "committed_files",
        "connector_jars",
        "format_interval",
        "load_job_settings",
        "parse_duration_ms",
        "parse_instant_ms",
        "parse_records",
        "read_errors",
        "read_kafka",
        "read_runtime_sessions",
        "read_sessions",
        "reconcile",
        "reconcile_topics",
        "run_batch",
        "run_stream",
        "sessionize",
        "sessionize_events",
        "spark_session",
    ],
    "interceptor": [
        "InterceptorSettings",
        "MetricsSnapshot",
        "Mode",
        "Producer",
        "SerializingProducer",
    ],
    "sidecar.service": [
        "ProgressControlSidecar",
    ],
    "sidecar.settings": [
        "LogFormat",
        "SidecarSettings",
    ],
    "streams_runtime": [
        "App",
        "AppState",
        "BadRecordError",
        "BadRecordPolicy",
        "Branched",
        "BranchedStream",
        "BufferConfig",
        "CogroupedStream",
        "GlobalTable",
        "GroupedStream",
        "GroupedTable",
        "JoinWindows",
        "KeyQueryMetadata",
        "LagInfo",
        "ProcessingGuarantee",
        "QueryResult",
        "Record",
        "RuntimeSettings",
        "SessionWindowedCogroupedStream",
        "SessionWindowedStream",
        "SessionWindows",
        "SlidingWindows",
        "StateEngine",
        "Stream",
        "StreamsBuilder",
        "StreamsError",
        "Suppressed",
        "Table",
        "TimeWindowedCogroupedStream",
        "TimeWindowedStream",
        "TimeWindows",
        "Topology",
        "TopologyError",
        "Windowed",
        "WindowedTable",
        "until_time_limit",
        "until_window_closes",
    ],
    "streams_runtime.dsl": [
        "Branched",
        "BranchedStream",
        "BufferConfig",
        "CogroupedStream",
        "GlobalTable",
        "GroupedStream",
        "GroupedTable",
        "SessionWindowedCogroupedStream",
        "SessionWindowedStream",
        "Stream",
        "StreamsBuilder",
        "Suppressed",
        "Table",
        "TimeWindowedCogroupedStream",
        "TimeWindowedStream",
        "WindowedTable",
        "until_time_limit",
        "until_window_closes",
    ],
    "streams_runtime.queries": [
        "InvalidKeyError",
        "KeyQueryMetadata",
        "NoReplicaWithinBoundError",
        "NotAvailableError",
        "PartitionResult",
        "QueryError",
        "QueryResult",
        "RangeResult",
        "UnknownStoreError",
        "UnsupportedQueryError",
    ],
    "streams_runtime.serdes": [
        "Bytes",
        "Change",
        "ChangedSerde",
        "Float",
        "Integer",
        "Json",
        "Serde",
        "SerializationError",
        "SessionWindowedSerde",
        "String",
        "TimeWindowedSerde",
        "TimestampedValueSerde",
        "ValueAndTimestamp",
    ],
    "streams_runtime.processor": [
        "Cancellable",
        "FixedKeyProcessor",
        "Processor",
        "ProcessorContext",
        "Progress",
        "PunctuationType",
        "Punctuator",
        "RecordMetadata",
        "StoreBuilder",
        "Stores",
        "TypedKeyValueStore",
        "TypedSessionStore",
        "TypedWindowStore",
    ],
    "streams_runtime.serde_context": [
        "BoundSerde",
        "ContextualSerde",
        "Field",
        "SerdeContext",
        "UnboundSerdeError",
        "bind",
        "is_contextual",
        "is_registry_framed",
        "rebind",
    ],
    "streams_runtime.serdes_registry": [
        "Avro",
        "JsonSchema",
        "Protobuf",
        "RegistryConfig",
        "SchemaRegistryRefusedError",
        "SchemaRegistryUnavailableError",
        "schema_registry_client",
    ],
    "streams_runtime.testing": [
        "KeyValueStoreView",
        "SessionStoreView",
        "TestInputTopic",
        "TestOutputTopic",
        "TestRecord",
        "Tick",
        "TopologyTestDriver",
        "WindowStoreView",
    ],
    "streams_runtime.windows": [
        "JoinWindows",
        "SessionWindow",
        "SessionWindows",
        "SlidingWindows",
        "TimeWindows",
        "WindowSpec",
        "merge_sessions",
    ],
    "streams_runtime.settings": [
        "BadRecordPolicy",
        "GroupProtocol",
        "ProcessingGuarantee",
        "RuntimeSettings",
        "StateEngine",
    ],
    "streams_runtime.errors": [
        "BadRecordError",
        "BadRecordHandler",
        "CacheFlushError",
        "DLQ_HEADERS",
        "PunctuationError",
        "StreamsError",
        "TaskMigratedError",
        "as_exception",
    ],
}
INTERNAL = ["streams_runtime.processing"]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_pinned_and_every_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == PUBLIC[name]
    assert len(set(module.__all__)) == len(module.__all__), "a name listed twice"
    for member in module.__all__:
        assert hasattr(module, member), f"{name}.{member} is in __all__ but missing"


@pytest.mark.parametrize(
    "name", sorted(n for n in PUBLIC if hasattr(importlib.import_module(n), "__path__"))
)
def test_a_package_namespace_holds_only_its_public_names(name: str) -> None:
    package = importlib.import_module(name)
    public = {
        member
        for member, value in vars(package).items()
        if not member.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(package.__all__) - {"__version__"}


@pytest.mark.parametrize("name", INTERNAL)
def test_internal_packages_export_nothing(name: str) -> None:
    assert importlib.import_module(name).__all__ == []


def test_the_core_never_imports_the_demo_the_spark_jobs_or_the_dev_tools() -> None:
    """What a producer or a runtime app imports stays off the extras' code: the demo and the
    Spark jobs (which fail without their extra), the dev broker and its poms, the Helm build."""
    code = (
        "import sys\n"
        "import progress_control, interceptor, sidecar.service, streams_runtime\n"
        "from streams_runtime import App\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(("
        "'progress_control_apps.dev', 'progress_control_apps.demo', 'progress_control_apps.spark',"
        " 'progress_control_apps.tools', 'pyspark', 'matplotlib')))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

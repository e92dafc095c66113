"""Which ``PROGRESS_CONTROL_*`` environment variables exist, so a misspelt one fails at start-up
naming the closest valid one instead of being silently ignored.

The components share the prefix (the interceptor and the sidecar use ``PROGRESS_CONTROL_``; the
runtime's ``PROGRESS_CONTROL_RUNTIME_`` and the others are under it), and one process may carry
another component's variables (a pod's shared env), so every component checks against all of
them: their settings' fields (:data:`COMPONENT_FIELDS`, kept equal to the settings classes by a
test; the loaded class's own fields always count, a field just added included), free keys under
dict fields (``PROGRESS_CONTROL_KAFKA__SASL_MECHANISM``), and the variables read directly by
processes, tools and tests (:data:`PROCESS_NAMES`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic_settings import BaseSettings

__all__ = [
    "COMPONENT_FIELDS",
    "DICT_FIELDS",
    "PREFIX",
    "PROCESS_NAMES",
    "unknown_variables",
]

PREFIX = "PROGRESS_CONTROL_"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


COMPONENT_FIELDS: Mapping[str, frozenset[str]] = {
    # interceptor (InterceptorSettings) and sidecar (SidecarSettings)
    "PROGRESS_CONTROL_": _words(
        """ack_recording admin_timeout_s backoff_exponential backoff_ms backoff_multiplier
        enabled end_ms http_host http_max_connections http_port http_request_timeout_ms
        jitter_ms kafka
        kafka_secrets_dir key log_format log_level max_records max_skew_ms null_key_topics
        max_tracked_partitions metadata_refresh_ms metrics_per_partition mode queue_max_messages
        report_address report_allowed_uids report_interval_ms report_listen
        report_listen_allow_network
        report_socket_mode shutdown_timeout_s signing_key_file signing_key_id
        signing_key_secret source_id start_ms timestamp_mode topics_exclude
        topics_include topics_internal watch_enabled watch_interval_ms"""
    ),
    # streams runtime (RuntimeSettings)
    "PROGRESS_CONTROL_RUNTIME_": _words(
        """acceptable_recovery_lag application_id application_server bad_record_policy
        bootstrap_servers buffered_records_per_partition commit_interval_ms consumer
        control_allowed_sources control_verification_keys control_verification_keys_file
        dead_letter_topic group_protocol kafka liveness_deadline_ms max_control_skew_ms
        max_task_idle_ms membership_interval_ms
        membership_secret membership_secret_file metrics_host metrics_port native_core
        num_repartition_partitions num_standby_replicas poll_timeout_ms processing_guarantee
        producer progress_interval_ms progress_propagation query_allow_unauthenticated
        query_bind_host query_max_connections query_request_timeout_ms query_timeout_ms
        query_tls_ca_file query_tls_cert_file query_tls_key_file query_token query_token_file
        query_workers repartition_purge_interval_ms replication_factor restore_timeout_s
        rocksdb_memory_bytes
        signing_key_file signing_key_id signing_key_secret state_dir state_engine
        static_membership statestore_cache_max_bytes warmup_timeout_ms"""
    ),
    # Spark jobs (SparkJobSettings)
    "PROGRESS_CONTROL_SPARK_": _words(
        """control_allowed_sources control_verification_keys control_verification_keys_file
        input_integer_fields input_on_unknown_schema_id input_page_field input_time_field
        input_user_field input_user_from_key input_value_format input_value_subject
        max_control_skew_ms schema_registry_url"""
    ),
    # embedded dev broker (BrokerSettings)
    "PROGRESS_CONTROL_BROKER_": _words(
        """cache_dir controller_port data_dir heap host jvm_options kafka_version port
        server_properties startup_timeout_s"""
    ),
    # embedded dev schema registry (SchemaRegistrySettings)
    "PROGRESS_CONTROL_SCHEMA_REGISTRY_": _words(
        """apicurio_version cache_dir heap host java_home management_port port properties
        startup_timeout_s"""
    ),
}
"""Every component's settings fields, by env prefix."""

DICT_FIELDS: Mapping[str, frozenset[str]] = {
    "PROGRESS_CONTROL_": frozenset({"kafka"}),
    "PROGRESS_CONTROL_RUNTIME_": frozenset({"kafka", "consumer", "producer"}),
    "PROGRESS_CONTROL_BROKER_": frozenset({"server_properties"}),
    "PROGRESS_CONTROL_SCHEMA_REGISTRY_": frozenset({"properties"}),
}
"""The dict fields among them: any ``<PREFIX><FIELD>__<KEY>`` is one of their entries."""

PROCESS_NAMES = frozenset(
    {
        "PROGRESS_CONTROL_CONFIG_FILE",  # the sidecar's YAML file
        "PROGRESS_CONTROL_AUTOLOAD",  # interceptor/_site/sitecustomize.py
        "PROGRESS_CONTROL_CACHE_DIR",  # jar cache (progress_control.settings.default_cache_dir)
        "PROGRESS_CONTROL_MAVEN_REPO",  # progress_control/{dev/jars.py,demo/fetching.py}
        "PROGRESS_CONTROL_MVN",  # progress_control_apps/dev/jars.py
        "PROGRESS_CONTROL_HELM",  # progress_control_apps/tools/helm.py
        "PROGRESS_CONTROL_GO",  # progress_control_apps/tools/helm.py
        "PROGRESS_CONTROL_BUILDAH",  # progress_control_apps/tools/build_image.py
        "PROGRESS_CONTROL_DEBOOTSTRAP",  # progress_control_apps/tools/build_image.py
        "PROGRESS_CONTROL_VENV",  # ./dev
        "PROGRESS_CONTROL_TEST_BROKER",  # tests/conftest.py
        "PROGRESS_CONTROL_TEST_WORKERS",  # ./dev test
        "PROGRESS_CONTROL_TEST_KAFKA_IMAGE",  # tests/conftest.py
        "PROGRESS_CONTROL_TEST_SHARED_DIR",  # tests/shared_services.py
        "PROGRESS_CONTROL_LONG_TESTS",  # tests/streams_runtime/cluster
        "PROGRESS_CONTROL_HYPOTHESIS_PROFILE",  # tests/hypothesis_profiles.py, ./dev test-explore
    }
)
"""Variables read directly (``os.environ``), not through a settings class."""


def _fields_of(cls: type[BaseSettings]) -> tuple[str, set[str], set[str]]:
    """``cls``'s env prefix, field names and dict field names."""
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    dicts = {
        name
        for name, field in cls.model_fields.items()
        if field.annotation is dict or getattr(field.annotation, "__origin__", None) is dict
    }
    return prefix, set(cls.model_fields), dicts


def _known(cls: type[BaseSettings] | None) -> tuple[set[str], set[str]]:
    """(every valid name, every ``<PREFIX><FIELD>__`` under which keys are free)."""
    names = set(PROCESS_NAMES)
    dict_prefixes: set[str] = set()
    components = [(p, set(f), set(DICT_FIELDS.get(p, ()))) for p, f in COMPONENT_FIELDS.items()]
    if cls is not None:
        components.append(_fields_of(cls))
    for prefix, fields, dicts in components:
        names.update(f"{prefix}{field.upper()}" for field in fields)
        dict_prefixes.update(f"{prefix}{field.upper()}__" for field in dicts)
    return names, dict_prefixes


def _suggestion(name: str, names: set[str], dict_prefixes: set[str]) -> str | None:
    for dict_prefix in dict_prefixes:
        # PROGRESS_CONTROL_KAFKA_BOOTSTRAP_SERVERS: one underscore where nesting takes two.
        single = dict_prefix[:-1]
        if name.startswith(single) and len(name) > len(single):
            return dict_prefix + name[len(single) :]
    # Compared without the shared prefix, which would make every name look alike.
    tails = {known[len(PREFIX) :]: known for known in names}
    close = difflib.get_close_matches(name[len(PREFIX) :], sorted(tails), n=1, cutoff=0.75)
    return tails[close[0]] if close else None


def unknown_variables(
    environ: Mapping[str, str], cls: type[BaseSettings] | None = None
) -> list[str]:
    """One message per ``PROGRESS_CONTROL_*`` variable in ``environ`` that no component, tool or
    process reads (``cls``'s own fields count too), naming the closest valid one."""
    names, dict_prefixes = _known(cls)
    problems = []
    for variable in sorted(environ):
        name = variable.upper()  # pydantic-settings matches names case-insensitively
        if not name.startswith(PREFIX) or name in names:
            continue
        if any(name.startswith(p) and len(name) > len(p) for p in dict_prefixes):
            continue
        suggestion = _suggestion(name, names, dict_prefixes)
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        problems.append(f"unknown environment variable {variable}{hint}")
    return problems

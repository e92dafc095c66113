"""Runtime settings: ``App(..., **settings)`` keyword arguments or ``PROGRESS_CONTROL_RUNTIME_*``
env variables (``__`` nests, e.g. ``PROGRESS_CONTROL_RUNTIME_KAFKA__SECURITY_PROTOCOL``).

Kafka client properties in ``kafka`` are passed to every client untouched. The runtime ticks its
own outputs (``progress_propagation``), so the interceptor's ``progress.control.*`` keys are
refused: a second source of ticks with another timestamp rule would break the promise ticks make.

Signing: given ``signing_key_id`` and its secret (``signing_key_secret`` or ``signing_key_file``,
the rules of :class:`~progress_control.settings.SigningSettings`, as the interceptor's and the
sidecar's ``signing.key.*``), the runtime signs every tick it writes to its repartition and
output topics, and accepts its own key on its repartition topics
(:meth:`RuntimeSettings.internal_trust_policy`). Readers of its output topics need that key id
and secret.
"""

from __future__ import annotations

import enum
import tempfile
from pathlib import Path
from typing import Annotated, Self

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from progress_control.client_properties import checked_client_properties
from progress_control.kafka_properties import KafkaProperties
from progress_control.settings import (
    ControlTrustSettings,
    SigningSettings,
    component_config,
)
from progress_control.trust import TrustPolicy
from streams_runtime.queries.security import check_query_settings

__all__ = [
    "BadRecordPolicy",
    "GroupProtocol",
    "ProcessingGuarantee",
    "RuntimeSettings",
    "StateEngine",
]


class ProcessingGuarantee(enum.StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"
    """One producer transaction per commit interval: outputs, changelog writes and input offsets."""


class StateEngine(enum.StrEnum):
    MEMORY = "memory"
    """Dicts in memory; restored from the changelog on every start."""
    SQLITE = "sqlite"
    """SQLite files in ``state_dir``; reused after a clean commit, restored from a checkpoint."""
    ROCKSDB = "rocksdb"
    """RocksDB (``rocksdict``, the ``runtime`` extra) in ``state_dir``; reused like SQLite."""


class BadRecordPolicy(enum.StrEnum):
    FAIL = "fail"
    """Stop the app (offsets of earlier records are committed first; nothing is lost)."""
    LOG_AND_SKIP = "log-and-skip"
    DEAD_LETTER = "dead-letter"
    """Send the original bytes with error headers to ``dead_letter_topic``, then skip."""


class GroupProtocol(enum.StrEnum):
    """How the instances of an application share its tasks (docs/runtime/scaling.md)."""

    AUTO = "auto"
    """KIP-848's protocol where the broker has it (Apache Kafka 4.0 and later), else classic."""
    CONSUMER = "consumer"
    """KIP-848 (``group.protocol=consumer``) with the broker's ``range`` assignor: every
    sub-topology spread evenly, co-partitioned inputs together, incremental rebalances."""
    CLASSIC = "classic"
    """The classic protocol with librdkafka's ``range`` assignor: the same spread, but every
    rebalance stops all processing (eager)."""


# The consumer properties the runtime sets itself: the group's assignment depends on them
# (docs/runtime/scaling.md).
_RUNTIME_CONSUMER_KEYS = frozenset(
    {"group.protocol", "group.remote.assignor", "partition.assignment.strategy"}
)


def _no_interceptor_keys(value: dict[str, str]) -> dict[str, str]:
    found = sorted(k for k in value if k.startswith("progress.control."))
    if found:
        signing = any(k.startswith("progress.control.signing.") for k in found)
        raise ValueError(
            f"{', '.join(found)}: the runtime ticks its outputs itself "
            "(progress_propagation, progress_interval_ms); the interceptor is not attached "
            "to its producer"
            + ("; it signs them with signing_key_id and signing_key_secret" if signing else "")
        )
    return value


def _no_assignment_keys(value: dict[str, str]) -> dict[str, str]:
    found = sorted(_RUNTIME_CONSUMER_KEYS.intersection(value))
    if found:
        raise ValueError(
            f"{', '.join(found)}: set by the runtime (group_protocol chooses the protocol "
            "and the range assignor)"
        )
    return value


# The runtime's own refusals first, then librdkafka's check: they say more.
_Checked = AfterValidator(checked_client_properties)
_KafkaProperties = Annotated[
    KafkaProperties,
    AfterValidator(_no_interceptor_keys),
    AfterValidator(_no_assignment_keys),
    _Checked,
]
_ConsumerProperties = Annotated[KafkaProperties, AfterValidator(_no_assignment_keys), _Checked]
_ProducerProperties = Annotated[KafkaProperties, AfterValidator(_no_interceptor_keys), _Checked]


class RuntimeSettings(ControlTrustSettings, SigningSettings):
    """Settings of a streams runtime :class:`~streams_runtime.App`: which control records move
    its time (:class:`~progress_control.settings.ControlTrustSettings`) and the key its own ticks
    are signed with (:class:`~progress_control.settings.SigningSettings`: ``signing_key_id``,
    ``signing_key_secret``, ``signing_key_file``)."""

    model_config = component_config("PROGRESS_CONTROL_RUNTIME_")

    application_id: str = Field(
        pattern=r"^[A-Za-z0-9._-]+$",
        description="Consumer group id and prefix of internal topics and state directories.",
    )
    bootstrap_servers: str = Field(min_length=1, description="Kafka bootstrap servers.")
    kafka: _KafkaProperties = Field(
        default_factory=dict, description="Kafka client properties, passed through untouched."
    )
    consumer: _ConsumerProperties = Field(
        default_factory=dict, description="Properties for the consumers only (over kafka)."
    )
    producer: _ProducerProperties = Field(
        default_factory=dict, description="Properties for the producer only (over kafka)."
    )
    processing_guarantee: ProcessingGuarantee = Field(
        ProcessingGuarantee.AT_LEAST_ONCE,
        description="at_least_once, or exactly_once (also spelt exactly_once_v2): one producer "
        "transaction per commit interval.",
    )
    commit_interval_ms: int | None = Field(
        None, ge=1, description="Commit period; default 30000, or 100 with exactly_once."
    )
    max_task_idle_ms: int = Field(
        0,
        ge=-1,
        description="KIP-695: -1 never wait for empty inputs; 0 wait only while data is known to "
        "be on the broker; > 0 also wait this long on caught-up empty inputs.",
    )
    buffered_records_per_partition: int = Field(
        1000, ge=1, description="Pause a partition's fetching above this many buffered records."
    )
    statestore_cache_max_bytes: int = Field(
        10 * 1024 * 1024,
        ge=0,
        description="Record cache (Kafka Streams' statestore.cache.max.bytes, default 10 MiB), "
        "one budget for the stream thread's tasks: writes to a cached store key within a commit "
        "interval reach the store, its changelog and downstream once, on commit or on eviction. "
        "0 turns it off: every update is written and forwarded.",
    )
    native_core: bool = Field(
        True,
        description="Run the chains the native core has an operator for (a windowed count, "
        "sum, min, max, reduce or aggregate suppressed until its windows close) as one "
        "operator, a batch of records per call: the topology is rewritten when it is built, "
        "as Topology.describe() shows. False, or a native core not built: processor by "
        "processor.",
    )
    state_dir: Path = Field(
        Path(tempfile.gettempdir()) / "progress-control-streams",
        description="Local state directory (one subdirectory per application and task).",
    )
    state_engine: StateEngine = Field(
        StateEngine.MEMORY,
        description="memory: restored from the changelog on every start; sqlite or rocksdb "
        "(the runtime extra): files in state_dir, reused after a clean commit.",
    )
    rocksdb_memory_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="With state_engine=rocksdb: the memory every RocksDB store of the process "
        "shares (Kafka Streams' BoundedMemoryRocksDBConfig), one block cache of this size that "
        "the memtables are charged to, half of it at most (default 64 MiB). 0: RocksDB's "
        "defaults for each store, unbounded across stores.",
    )
    num_repartition_partitions: int | None = Field(
        None,
        ge=1,
        description="Partitions of repartition topics (default: as the other inputs of the "
        "sub-topology reading one, else as the inputs of the one writing it).",
    )
    replication_factor: int = Field(
        -1, description="Replication factor of internal topics (-1: the broker's default)."
    )
    bad_record_policy: BadRecordPolicy = Field(
        BadRecordPolicy.FAIL,
        description="A record that cannot be deserialized, has a negative timestamp or makes "
        "user code raise: fail (stop the app), log-and-skip, or dead-letter (its bytes to "
        "dead_letter_topic, then skip).",
    )
    dead_letter_topic: str | None = Field(
        None, description="Dead-letter topic (default '<application_id>-dlq')."
    )
    progress_propagation: bool = Field(
        True, description="Tick output partitions when stream time advances with nothing written."
    )
    progress_interval_ms: int = Field(
        1000, ge=10, description="How often progress propagation runs."
    )
    repartition_purge_interval_ms: int = Field(
        30_000,
        ge=0,
        description="How often committed records are deleted from repartition topics (which "
        "keep records without time limit, KIP-284).",
    )
    poll_timeout_ms: int = Field(100, ge=1, description="Longest wait in one consumer poll.")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Serve Prometheus /metrics on this port (0: any)."
    )
    metrics_host: str = Field("127.0.0.1", description="Bind address of /metrics.")
    restore_timeout_s: float = Field(300.0, gt=0, description="Bound on restoring one task.")
    liveness_deadline_ms: int | None = Field(
        None,
        ge=1,
        description="How long the stream thread may go without turning its loop before "
        "/health/live fails (plus restore_timeout_s while a task restores); default "
        "max(60000, 3 * max(poll_timeout_ms, commit_interval_ms)). Must exceed both.",
    )
    group_protocol: GroupProtocol = Field(
        GroupProtocol.AUTO,
        description="auto: KIP-848 (consumer) where the broker supports it, else classic. "
        "Both spread every sub-topology's tasks evenly; consumer rebalances incrementally.",
    )
    static_membership: bool = Field(
        False,
        description="Join as a static member (KIP-345) with group.instance.id = the instance id "
        "(or the consumer's group.instance.id, which implies this): "
        "a restart within the session timeout gets its tasks back without a rebalance, but a "
        "clean stop also keeps them unprocessed until the session times out.",
    )
    warmup_timeout_ms: int = Field(
        60_000,
        ge=0,
        description="A starting instance first restores the tasks it will own as warm-up "
        "copies, and joins the group once they are within acceptable_recovery_lag or after "
        "this long (0: join at once). Needs num_standby_replicas > 0 or application_server.",
    )
    acceptable_recovery_lag: int = Field(
        10_000,
        ge=0,
        description="Changelog records a warm-up copy may still be behind when its instance "
        "joins (Kafka Streams' acceptable.recovery.lag).",
    )
    num_standby_replicas: int = Field(
        0, ge=0, description="Warm copies of every store partition on other instances (KIP-535)."
    )
    application_server: str | None = Field(
        None,
        pattern=r"^[^\s:/]+:\d{1,5}$",
        description="'host:port' this instance serves interactive queries on and advertises in "
        "the membership topic (port 0: any free port, the bound one is advertised). Off: none.",
    )
    query_bind_host: str | None = Field(
        None, description="Address the query server binds to (default: application_server's host)."
    )
    query_token: SecretStr | None = Field(
        None,
        description="Bearer token the query server requires (and forwards with). Required to "
        "bind a non-loopback address (see query_allow_unauthenticated); env or query_token_file.",
    )
    query_token_file: Path | None = Field(
        None, description="A file holding query_token (e.g. a mounted Secret)."
    )
    query_allow_unauthenticated: bool = Field(
        False,
        description="Serve queries without a token on a non-loopback address (explicit opt-out).",
    )
    query_tls_cert_file: Path | None = Field(
        None, description="PEM certificate (chain): serve HTTPS and forward queries over HTTPS."
    )
    query_tls_key_file: Path | None = Field(
        None, description="PEM private key of query_tls_cert_file (default: in the same file)."
    )
    query_tls_ca_file: Path | None = Field(
        None, description="CAs that verify other instances' certificates (default: system CAs)."
    )
    query_workers: int = Field(8, ge=1, description="Threads answering query requests.")
    query_max_connections: int = Field(
        256,
        ge=1,
        description="Open query connections at most; above it the oldest idle one is closed.",
    )
    query_request_timeout_ms: int = Field(
        10_000,
        ge=1,
        description="Time a connection has to send a complete request header (from connecting "
        "or from the previous answer); then it is closed.",
    )
    membership_secret: SecretStr | None = Field(
        None,
        description="HMAC key of membership records, >= 16 bytes (default: derived from "
        "query_token); env or membership_secret_file.",
    )
    membership_secret_file: Path | None = Field(
        None, description="A file holding membership_secret (e.g. a mounted Secret)."
    )
    query_timeout_ms: int = Field(
        2000, ge=1, description="Timeout of one query forwarded to another instance."
    )
    membership_interval_ms: int = Field(
        1000, ge=10, description="How often an instance publishes its membership record."
    )

    @field_validator("processing_guarantee", mode="before")
    @classmethod
    def _kafka_spelling(cls, value: object) -> object:
        # Accept Kafka Streams' spellings too.
        if isinstance(value, str):
            return {"exactly_once_v2": "exactly_once", "exactly_once_beta": "exactly_once"}.get(
                value, value
            )
        return value

    @model_validator(mode="after")
    def _query_security(self) -> Self:
        # Imported here: the cluster package imports these settings.
        from streams_runtime.cluster.membership_auth import check_membership_settings

        check_query_settings(self)  # e.g. a non-loopback bind without a token fails at start-up
        check_membership_settings(self)
        return self

    @model_validator(mode="after")
    def _own_key_agrees(self) -> Self:
        # The runtime verifies its own ticks with its own key; the same id with another secret
        # among the verification keys is a typo that would split readers (some verify, some
        # reject), so it fails here. Messages never show either secret.
        own = self.signing_key
        if own is not None:
            theirs = self.trust_policy().verification_keys.get(own.key_id)
            if theirs is not None and theirs != own.secret:
                raise ValueError(
                    f"{self.setting_name('signing_key_id')} is {own.key_id!r}, and "
                    f"{self.setting_name('control_verification_keys')} (or its file) holds "
                    "that key id with another secret: give both the same secret, or the "
                    "runtime's key another id"
                )
        return self

    @model_validator(mode="after")
    def _defaults(self) -> Self:
        if self.commit_interval_ms is None:
            eos = self.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE
            self.commit_interval_ms = 100 if eos else 30_000
        if self.dead_letter_topic is None:
            self.dead_letter_topic = f"{self.application_id}-dlq"
        # A loop turn polls once and may commit once: a deadline below either would fail a
        # healthy thread.
        turn_ms = max(self.poll_timeout_ms, self.commit_interval_ms)
        if self.liveness_deadline_ms is None:
            self.liveness_deadline_ms = max(60_000, 3 * turn_ms)
        elif self.liveness_deadline_ms <= turn_ms:
            raise ValueError(
                f"{self.setting_name('liveness_deadline_ms')} is {self.liveness_deadline_ms}: it "
                f"must exceed poll_timeout_ms and commit_interval_ms ({turn_ms}), which one "
                "healthy loop turn may take"
            )
        return self

    def internal_trust_policy(self) -> TrustPolicy:
        """Which control records move time on the runtime's own internal (repartition) topics.

        Their ticks are the runtime's own, written by every instance of the application: with a
        signing key, the verification keys are ``control_verification_keys`` plus the runtime's
        own key (so a rolling key change verifies when the other key is listed there too); without
        one, :meth:`trust_policy`'s. Never restricted to ``control_allowed_sources``: the
        runtime's own source ids are per process, unknown in advance.
        """
        policy = self.trust_policy()
        keys = dict(policy.verification_keys)
        own = self.signing_key
        if own is not None:
            keys[own.key_id] = own.secret
        return TrustPolicy(max_skew_ms=policy.max_skew_ms, verification_keys=keys)

    def signing_problem(self, *, has_repartition_topics: bool) -> str | None:
        """Why the runtime's own ticks would be rejected by its own consumers, or ``None``: for
        a start-up check. Verification keys are set and the topology has repartition topics,
        but there is no signing key, so its unsigned ticks on them would be skipped as
        ``unsigned`` and every window after the first repartition would close on data only."""
        if (
            not has_repartition_topics
            or not self.progress_propagation
            or self.signing_key is not None
            or not self.trust_policy().verification_keys
        ):
            return None
        name = self.setting_name
        return (
            f"{name('control_verification_keys')} or {name('control_verification_keys_file')} "
            "is set, so only signed control records move time, but the runtime has no signing "
            "key: its own ticks on its repartition topics would be rejected as unsigned, and "
            "windows after a repartition would close only when new data arrives. Set "
            f"{name('signing_key_id')} and {name('signing_key_secret')} or "
            f"{name('signing_key_file')} (readers of the output topics verify with the same key), "
            "or turn progress_propagation off"
        )

    @property
    def membership_enabled(self) -> bool:
        """Whether this instance publishes to and reads the membership topic."""
        return self.application_server is not None or self.num_standby_replicas > 0

    @property
    def lanes_topic(self) -> str:
        """The one-partition placeholder topic every lane subscribes to, never read
        (``<application_id>-lanes``, :mod:`streams_runtime.processing.lanes`)."""
        return f"{self.application_id}-lanes"

    @property
    def membership_topic(self) -> str:
        """The compacted topic of membership records (``<application_id>-membership``)."""
        return f"{self.application_id}-membership"

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE

    @property
    def commit_interval_s(self) -> float:
        return (self.commit_interval_ms or 30_000) / 1000

    @property
    def liveness_deadline_s(self) -> float:
        """:attr:`liveness_deadline_ms` in seconds (set by validation, never None)."""
        return (self.liveness_deadline_ms or 60_000) / 1000

    def client_config(self) -> dict[str, str]:
        """Kafka properties shared by every client."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka}

    @property
    def group_instance_id(self) -> str | None:
        """The consumer's own ``group.instance.id``, when set (static membership)."""
        return self.consumer_config().get("group.instance.id")

    def consumer_config(self) -> dict[str, str]:
        """Properties of the runtime's consumers (main and restore)."""
        return {**self.client_config(), **self.consumer}

    def producer_config(self) -> dict[str, str]:
        """Properties of the runtime's producer."""
        return {**self.client_config(), **self.producer}

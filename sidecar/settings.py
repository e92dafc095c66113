"""Sidecar settings: env variables (``PROGRESS_CONTROL_*``, ``__`` nesting), an optional YAML file,
and a secrets directory for Kafka credentials.

Precedence: env variables, then the YAML file named by ``PROGRESS_CONTROL_CONFIG_FILE``, then
defaults. Every file in ``kafka_secrets_dir`` (a mounted Kubernetes Secret) named like a Kafka
property, e.g. ``sasl.password``, is merged into ``kafka``; a file named
``progress.control.signing.key.secret`` there is the signing secret instead (when neither
``signing.key.secret`` nor ``signing.key.file`` is set).
"""

from __future__ import annotations

import enum
import os
import socket
from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, YamlConfigSettingsSource

from progress_control.client_properties import ClientProperties, client_property_problems
from progress_control.settings import read_secret_file
from progress_control.ticks.activity_report import UdpAddress, UnixAddress, parse_report_address
from progress_control.ticks.settings import TickSettings
from progress_control.trust import DEFAULT_MAX_SKEW_MS

__all__ = ["LogFormat", "SidecarSettings"]

DEFAULT_SECRETS_DIR = Path("/var/run/secrets/progress-control")
SIGNING_SECRET_FILE = "progress.control.signing.key.secret"  # noqa: S105 - a file name
"""The signing secret's file name in ``kafka_secrets_dir``."""


class LogFormat(enum.StrEnum):
    AUTO = "auto"
    """JSON when stderr is not a terminal."""
    JSON = "json"
    CONSOLE = "console"


class SidecarSettings(TickSettings):
    """Settings of ``progress-control sidecar`` (schedule and tick settings as the interceptor)."""

    kafka: ClientProperties = Field(
        default_factory=dict, description="Kafka client properties; bootstrap.servers required."
    )
    kafka_secrets_dir: Path = Field(
        DEFAULT_SECRETS_DIR, description="Files named like Kafka properties, merged into kafka."
    )
    watch_enabled: bool = Field(True, description="Watch partitions' offsets on the broker.")
    watch_interval_ms: int = Field(5_000, ge=100, description="Broker watch period.")
    metadata_refresh_ms: int = Field(30_000, ge=100, description="New topics/partitions period.")
    report_listen: str | None = Field(
        "127.0.0.1:7071",
        description="Where interceptor reports arrive: unix:///path/to/socket (a Unix datagram "
        "socket on a volume shared with the app), or UDP host:port; empty: off.",
    )
    report_listen_allow_network: bool = Field(
        False,
        description="Allow a UDP report_listen address that is not loopback: anyone who can reach "
        "it can forge activity reports.",
    )
    report_socket_mode: int = Field(
        "0660",  # type: ignore[assignment]  # octal as chmod reads it; validated into an int
        ge=0,
        le=0o777,
        description="File mode of a unix:// report socket (octal).",
    )
    report_allowed_uids: tuple[int, ...] = Field(
        (),
        description="With a unix:// report socket: only reports sent by processes of these "
        "user ids are read (the kernel's sender credentials, comma-separated); empty: any "
        "process that may write the socket file.",
    )
    jitter_ms: int = Field(
        1_000,
        ge=0,
        description="Random per-replica delay added to start.ms, so replicas don't "
        "tick together and broker verification lets one win.",
    )
    http_host: str = Field("127.0.0.1", description="Bind address of /healthz /readyz /metrics.")
    http_port: int = Field(8081, ge=0, le=65535, description="HTTP port (0: any free port).")
    http_max_connections: int = Field(
        64,
        ge=1,
        description="Open HTTP connections at most; above it the oldest idle one is closed.",
    )
    http_request_timeout_ms: int = Field(
        5000,
        ge=1,
        description="Time an HTTP connection has to send a complete request header (from "
        "connecting or from the previous answer); then it is closed.",
    )
    max_skew_ms: int = Field(
        DEFAULT_MAX_SKEW_MS,
        ge=0,
        description="Reports of records dated more than this ahead of the wall clock are dropped.",
    )
    max_tracked_partitions: int = Field(
        10_000,
        ge=1,
        description="Bound on partitions with tracked activity; beyond it new ones are dropped.",
    )
    admin_timeout_s: float = Field(10.0, gt=0, description="Timeout of one admin request.")
    shutdown_timeout_s: float = Field(10.0, gt=0, description="Bound on a clean stop.")
    log_level: str = Field(
        "INFO",
        pattern=r"(?i)^(debug|info|warning|error|critical)$",
        description="debug, info, warning, error or critical (--log-level wins).",
    )
    log_format: LogFormat = Field(
        LogFormat.AUTO, description="json, console, or auto: JSON when stderr is not a terminal."
    )

    @field_validator("report_listen", mode="before")
    @classmethod
    def _optional_address(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str):
            parse_report_address(value, any_port=True)
        return value

    @field_validator("report_socket_mode", mode="before")
    @classmethod
    def _octal_mode(cls, value: object) -> object:
        """``"0660"`` or ``"660"`` (env, YAML strings) is octal, as chmod reads it."""
        return int(value, 8) if isinstance(value, str) else value

    @field_validator("report_allowed_uids", mode="before")
    @classmethod
    def _uid_list(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        if isinstance(value, int):
            return (value,)
        return value

    @model_validator(mode="after")
    def _report_listen_on_loopback(self) -> Self:
        address = self.report_listen and parse_report_address(self.report_listen, any_port=True)
        network = isinstance(address, UdpAddress) and not address.is_loopback
        if network and not self.report_listen_allow_network:
            raise ValueError(
                f"report_listen {self.report_listen!r} is not a loopback address: anyone "
                "who can reach it could forge activity reports. Use a Unix socket "
                "(unix:///var/run/progress-control/reports.sock), or set "
                "report_listen_allow_network=true "
                "(env PROGRESS_CONTROL_REPORT_LISTEN_ALLOW_NETWORK=true)"
            )
        if self.report_allowed_uids and not isinstance(address, UnixAddress):
            raise ValueError(
                "report_allowed_uids needs a unix:// report_listen: only a Unix socket tells "
                "who sent a report"
            )
        return self

    @property
    def metrics_source(self) -> str:
        """The ``source`` label of the sidecar's metrics: ``source_id`` when it is configured,
        else the host's name (the pod's in Kubernetes). Not the default ``source_id``
        (host:pid:random, new at every start), so a restarted sidecar continues its series."""
        return self.source_id if "source_id" in self.model_fields_set else socket.gethostname()

    def _signing_secret(self) -> bytes | None:
        secret = super()._signing_secret()
        mounted = self.kafka_secrets_dir / SIGNING_SECRET_FILE
        if secret is None and mounted.is_file():
            return read_secret_file(mounted, f"{SIGNING_SECRET_FILE} in kafka.secrets.dir")
        return secret

    @model_validator(mode="after")
    def _kafka_connection(self) -> Self:
        mounted = {}
        if self.kafka_secrets_dir.is_dir():
            for path in sorted(self.kafka_secrets_dir.iterdir()):
                if path.name == SIGNING_SECRET_FILE:
                    continue  # ours (see _signing_secret), not a Kafka property
                if path.is_file() and not path.name.startswith("."):
                    mounted[path.name] = path.read_text().strip()
        problems = client_property_problems(mounted)
        if problems:
            raise ValueError(f"kafka.secrets.dir {self.kafka_secrets_dir}: " + "; ".join(problems))
        self.kafka.update(mounted)
        if not self.kafka.get("bootstrap.servers"):
            raise ValueError(
                "kafka.bootstrap.servers is required "
                "(env PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = os.environ.get("PROGRESS_CONTROL_CONFIG_FILE")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

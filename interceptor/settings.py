"""Interceptor settings: the tick settings plus the producer-only ones (on/off, ticks or report
mode), from ``progress.control.*`` keys in the producer config or env variables.

Config-dict keys win over env variables, which win over defaults (see
:mod:`progress_control.ticks.settings`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from progress_control.ticks.activity_report import parse_report_address
from progress_control.ticks.settings import CONFIG_PREFIX, TickSettings

__all__ = ["AckRecording", "InterceptorSettings", "Mode", "split_config"]


class Mode(enum.StrEnum):
    """What the interceptor does with the acks it records."""

    TICKS = "ticks"
    """Send control records to idle partitions itself."""
    REPORT = "report"
    """Only ship acks to a sidecar in the pod (:mod:`interceptor.report`)."""


class AckRecording(enum.StrEnum):
    """How the producer's acks reach progress control (:mod:`interceptor.native`)."""

    AUTO = "auto"
    """Natively when the plugin loads, else in Python (logged once)."""
    NATIVE = "native"
    """Natively; a producer fails to start when the plugin is unavailable."""
    PYTHON = "python"
    """In Python: a wrapper around the delivery callbacks (one Python call per ack)."""


class InterceptorSettings(TickSettings):
    """Progress-control settings of one producer."""

    enabled: bool = Field(True, description="Turn progress control off without removing it.")
    mode: Mode = Field(Mode.TICKS, description="ticks: send control records; report: sidecar.")
    report_address: str = Field(
        "127.0.0.1:7071",
        description="Report mode: the sidecar's report socket, unix:///path/to/socket, or UDP "
        "host:port.",
    )
    report_interval_ms: int = Field(1_000, ge=10, description="Report mode: send period.")
    ack_recording: AckRecording = Field(
        AckRecording.AUTO,
        description="auto: a librdkafka interceptor plugin records acks in C when it loads, "
        "else Python callbacks do; native: the plugin or fail; python: always Python.",
    )

    @field_validator("report_address")
    @classmethod
    def _report_address(cls, value: str) -> str:
        parse_report_address(value)
        return value


def split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a producer config into (``progress.control.*`` keys, everything else)."""
    ours = {k: v for k, v in config.items() if k.startswith(CONFIG_PREFIX)}
    theirs = {k: v for k, v in config.items() if not k.startswith(CONFIG_PREFIX)}
    return ours, theirs

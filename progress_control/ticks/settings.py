"""Tick settings: ``progress.control.*`` keys in a producer config, or env variables; shared by
the interceptor and the sidecar.

Config-dict keys win over env variables, which win over defaults::

    progress.control.start.ms        PROGRESS_CONTROL_START_MS
    progress.control.backoff.ms      PROGRESS_CONTROL_BACKOFF_MS
    ...
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import NoDecode

from progress_control.protocol import DEFAULT_SENTINEL_KEY, TimestampMode
from progress_control.settings import (
    ConfigurationError,
    SigningSettings,
    check_environment,
    component_config,
    read_secret_file,
    shown_input,
)
from progress_control.ticks.schedule import TickSchedule
from progress_control.ticks.topic_filter import DEFAULT_INTERNAL_TOPICS, TopicFilter
from progress_control.trust import ControlRecordSource

__all__ = ["CONFIG_PREFIX", "ENV_PREFIX", "TickSettings", "read_secret_file"]

CONFIG_PREFIX = "progress.control."
ENV_PREFIX = "PROGRESS_CONTROL_"


def _default_source_id() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class TickSettings(SigningSettings):
    """When ticks are sent and what they look like; shared by the interceptor and the sidecar.
    Defaults send a tick each second from the first second of idleness for up to an hour: so a
    window closes within about a second of its end on ticks alone whatever its size (up to
    ``end.ms``), at one small record per idle partition per second. An exponential backoff or
    ``max.records`` trades that promptness for fewer ticks. Signed with ``signing.key.*``
    (:class:`~progress_control.settings.SigningSettings`, the rules every writer shares)."""

    model_config = component_config(ENV_PREFIX)

    start_ms: int = Field(1_000, ge=1, description="Idle time before the first tick.")
    end_ms: int | None = Field(
        3_600_000, ge=1, description="No tick after this much idle time (unset: only max.records)."
    )
    backoff_ms: int = Field(1_000, ge=1, description="Spacing after the first tick.")
    backoff_exponential: bool = Field(False, description="Multiply the spacing after each tick.")
    backoff_multiplier: float = Field(2.0, ge=1.0, le=100.0, description="Exponential factor.")
    max_records: int | None = Field(
        None, ge=1, description="Ticks per idle period (unset: until end.ms; one must be set)."
    )
    topics_include: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="Comma list of topic names or regexes (full match); empty: all topics."
    )
    topics_exclude: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="Comma list of names or regexes never ticked; wins over include."
    )
    key: bytes | None = Field(
        DEFAULT_SENTINEL_KEY, description="Control-record key; empty or null for a null key."
    )
    null_key_topics: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Comma list of topic names or regexes (full match) whose ticks have a null "
        "key: topics with Schema Registry-framed or other binary keys, whose readers' key "
        "deserializers would fail on the sentinel.",
    )
    timestamp_mode: TimestampMode = Field(
        TimestampMode.EXTRAPOLATED,
        description="extrapolated: the last data timestamp advanced by the time since its ack, "
        "capped at wall-clock now; wall-clock: wall-clock now.",
    )
    source_id: str = Field(
        default_factory=_default_source_id,
        min_length=1,
        max_length=255,
        description="This writer's id in its control records (default: host:pid:random).",
    )
    metrics_per_partition: bool = Field(
        False,
        description="Label the last-tick timestamp metric by partition too (one series per "
        "partition ticked); off: one per topic, its latest partition's.",
    )
    queue_max_messages: int = Field(
        10_000, ge=1, description="Local queue bound of the tick producer; full means skip."
    )
    topics_internal: Annotated[tuple[str, ...], NoDecode] = Field(
        DEFAULT_INTERNAL_TOPICS,
        description="Comma list of regexes (full match) of internal and system topics, never "
        "ticked; replaces the default list. Kafka's own __* topics are never ticked.",
    )

    @field_validator(
        "topics_include", "topics_exclude", "topics_internal", "null_key_topics", mode="before"
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @field_validator("topics_include", "topics_exclude", "topics_internal", "null_key_topics")
    @classmethod
    def _valid_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from None
        return value

    @field_validator("key", mode="before")
    @classmethod
    def _null_key(cls, value: Any) -> Any:
        if value is None or value in ("", b"", "null"):
            return None
        return value.encode("utf-8") if isinstance(value, str) else value

    @field_validator("max_records", "end_ms", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        # Env variables cannot be null: "" or "none" unsets an optional bound.
        if isinstance(value, str) and value.strip().lower() in {"", "none", "null"}:
            return None
        return value

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if self.max_records is None and self.end_ms is None:
            raise ValueError(
                "set progress.control.max.records (env PROGRESS_CONTROL_MAX_RECORDS) or "
                "progress.control.end.ms (env PROGRESS_CONTROL_END_MS): ticks must stop during "
                "a long idle"
            )
        if self.end_ms is not None and self.end_ms < self.start_ms:
            raise ValueError(
                "progress.control.end.ms (env PROGRESS_CONTROL_END_MS) must be >= "
                "progress.control.start.ms (env PROGRESS_CONTROL_START_MS)"
            )
        return self

    @classmethod
    def setting_name(cls, field: str) -> str:
        """``progress.control.<dotted field> (env PROGRESS_CONTROL_<FIELD>)``: the config-dict
        key and the env variable."""
        return f"{CONFIG_PREFIX}{field.replace('_', '.')} (env {ENV_PREFIX}{field.upper()})"

    def control_record_source(self) -> ControlRecordSource:
        """A source of this writer's control records: its source id and key, signed when it
        has a signing key."""
        return ControlRecordSource(
            self.source_id,
            key=self.key,
            signing_key=self.signing_key,
            null_key_topics=TopicFilter.matching_any(self.null_key_topics),
        )

    def topic_filter(self) -> TopicFilter:
        """Which topics get ticks: ``topics.include`` minus ``topics.exclude`` and internal
        topics (``topics.internal``, and always Kafka's own ``__*``)."""
        return TopicFilter(
            self.topics_include, (*self.topics_exclude, *self.topics_internal, r"__.*")
        )

    def tick_schedule(self) -> TickSchedule:
        """The schedule these settings describe."""
        return TickSchedule(
            start_ms=self.start_ms,
            backoff_ms=self.backoff_ms,
            exponential=self.backoff_exponential,
            multiplier=self.backoff_multiplier,
            max_records=self.max_records,
            end_ms=self.end_ms,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Settings from ``progress.control.*`` keys (others ignored) over env and defaults;
        :class:`ConfigurationError` for an invalid value or an unknown ``PROGRESS_CONTROL_*``
        variable (:func:`~progress_control.settings.check_environment`)."""
        check_environment(cls)
        values = {
            key[len(CONFIG_PREFIX) :].replace(".", "_"): value
            for key, value in config.items()
            if key.startswith(CONFIG_PREFIX)
        }
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else ""
                if field:
                    name = f"{CONFIG_PREFIX}{field.replace('_', '.')}"
                    where = f"{name} (env {ENV_PREFIX}{field.upper()})"
                else:
                    where = "progress.control settings"
                problems.append(f"  {where}: {error['msg']}{shown_input(cls, error)}")
            raise ConfigurationError(
                "invalid progress-control configuration:\n" + "\n".join(problems)
            ) from None

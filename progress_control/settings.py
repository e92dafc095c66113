"""Configuration conventions shared by every component.

Each component has its own settings class with an env prefix (``PROGRESS_CONTROL_<COMPONENT>_``),
nested values use ``__`` (``PROGRESS_CONTROL_SIDECAR_KAFKA__BOOTSTRAP_SERVERS``), and Kafka client
settings are carried as a plain ``dict`` passed to librdkafka untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from progress_control.trust import DEFAULT_MAX_SKEW_MS, TrustPolicy, allowed_sources, parse_keys

__all__ = [
    "ConfigurationError",
    "ControlTrustSettings",
    "KafkaProperties",
    "component_config",
    "default_cache_dir",
    "load_settings",
    "shown_input",
]

S = TypeVar("S", bound=BaseSettings)


def component_config(prefix: str) -> SettingsConfigDict:
    """The ``model_config`` every component's settings class starts from."""
    return SettingsConfigDict(
        env_prefix=prefix,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )


def _dotted_keys(value: Any) -> Any:
    # Env nesting cannot spell dots: PREFIX_KAFKA__BOOTSTRAP_SERVERS arrives as "bootstrap_servers".
    # Kafka property names are dotted and never use underscores, so map env-style keys back.
    if isinstance(value, dict):
        return {
            (key if "." in key else key.replace("_", ".")): str(item) for key, item in value.items()
        }
    return value


KafkaProperties = Annotated[dict[str, str], BeforeValidator(_dotted_keys)]
"""Kafka client (or broker) properties, passed through untouched apart from env-style keys."""


class ConfigurationError(ValueError):
    """Invalid configuration; the message names every offending setting."""


def shown_input(cls: type[BaseModel], error: ErrorDetails) -> str:
    """`` [got <value>]`` for a validation error of ``cls``, or nothing where the value may be a
    secret: a ``SecretStr`` setting's, or a whole-model error's (its input is every value)."""
    if not error["loc"]:
        return ""
    field = cls.model_fields.get(str(error["loc"][0]))
    if field is not None and (
        field.annotation is SecretStr or SecretStr in getattr(field.annotation, "__args__", ())
    ):
        return ""
    return f" [got {error.get('input')!r}]"


def load_settings(cls: type[S], **values: Any) -> S:
    """Build ``cls`` from ``values`` and the environment, failing fast with the settings' names
    (and the offending values, except those that may be secret: :func:`shown_input`)."""
    try:
        return cls(**values)
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"]) or "(settings)"
            env = f" (env {prefix}{name.upper().replace('.', '__')})" if prefix else ""
            problems.append(f"  {name}{env}: {error['msg']}{shown_input(cls, error)}")
        raise ConfigurationError(
            f"invalid {cls.__name__} configuration:\n" + "\n".join(problems)
        ) from None


class ControlTrustSettings(BaseSettings):
    """Which control records move a consumer's time (:mod:`progress_control.trust`), for the
    settings of every consumer we ship. Keys come from the environment or a file, never from a
    command line, where a secret would show in ``ps`` and shell history."""

    max_control_skew_ms: int = Field(
        DEFAULT_MAX_SKEW_MS,
        ge=0,
        description="Control records dated more than this ahead of the wall clock are skipped.",
    )
    control_verification_keys: SecretStr | None = Field(
        None,
        description="'id:secret,...': accept only control records signed by one of these keys "
        "(env or control_verification_keys_file; never pass secrets on a command line).",
    )
    control_verification_keys_file: Path | None = Field(
        None, description="A file holding control_verification_keys (e.g. a mounted Secret)."
    )
    control_allowed_sources: str | None = Field(
        None, description="Comma-separated source ids whose control records are accepted."
    )

    @field_validator("control_verification_keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_keys(value.get_secret_value())  # its ValueError never holds the secret
        return value

    @field_validator("control_verification_keys_file")
    @classmethod
    def _file_parses(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                text = value.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read {value}: {exc}") from None
            if not parse_keys(text.strip()):
                raise ValueError(f"{value} holds no keys")
        return value

    def trust_policy(self) -> TrustPolicy:
        """Which control records move time (see :mod:`progress_control.trust`)."""
        specs = []
        if self.control_verification_keys is not None:
            specs.append(self.control_verification_keys.get_secret_value())
        if self.control_verification_keys_file is not None:
            specs.append(self.control_verification_keys_file.read_text(encoding="utf-8").strip())
        return TrustPolicy(
            max_skew_ms=self.max_control_skew_ms,
            verification_keys=parse_keys(",".join(specs)),
            allowed_sources=allowed_sources(self.control_allowed_sources),
        )


def default_cache_dir() -> Path:
    """Where downloaded jars live: ``$PROGRESS_CONTROL_CACHE_DIR``, else the user's cache dir."""
    override = os.environ.get("PROGRESS_CONTROL_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-progress-control"

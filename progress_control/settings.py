"""Configuration conventions shared by every component.

Each component has its own settings class with an env prefix (``PROGRESS_CONTROL_<COMPONENT>_``),
nested values use ``__`` (``PROGRESS_CONTROL_SIDECAR_KAFKA__BOOTSTRAP_SERVERS``), and Kafka client
settings are carried as a plain ``dict`` passed to librdkafka untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "ConfigurationError",
    "KafkaProperties",
    "component_config",
    "default_cache_dir",
    "load_settings",
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


def load_settings(cls: type[S], **values: Any) -> S:
    """Build ``cls`` from ``values`` and the environment, failing fast with the settings' names."""
    try:
        return cls(**values)
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"]) or "(settings)"
            env = f" (env {prefix}{name.upper().replace('.', '__')})" if prefix else ""
            problems.append(f"  {name}{env}: {error['msg']} [got {error.get('input')!r}]")
        raise ConfigurationError(
            f"invalid {cls.__name__} configuration:\n" + "\n".join(problems)
        ) from None


def default_cache_dir() -> Path:
    """Where downloaded jars live: ``$PROGRESS_CONTROL_CACHE_DIR``, else the user's cache dir."""
    override = os.environ.get("PROGRESS_CONTROL_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-progress-control"

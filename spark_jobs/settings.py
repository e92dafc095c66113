"""Settings of the Spark jobs that are not command-line options: which control records move time.

Read from ``PROGRESS_CONTROL_SPARK_*`` env variables (or keyword arguments), never from the
command line, where a secret would show in ``ps`` and shell history:

- ``PROGRESS_CONTROL_SPARK_MAX_CONTROL_SKEW_MS`` (default 300000): control records dated more than
  this ahead of the wall clock are skipped;
- ``PROGRESS_CONTROL_SPARK_CONTROL_VERIFICATION_KEYS`` (``id:secret,...``) and/or
  ``PROGRESS_CONTROL_SPARK_CONTROL_VERIFICATION_KEYS_FILE`` (a file holding the same, e.g. a
  mounted Kubernetes Secret): when set, only control records signed by one of these keys move time;
- ``PROGRESS_CONTROL_SPARK_CONTROL_ALLOWED_SOURCES`` (comma list): when set, only control records
  from these source ids move time.

Invalid values fail at start-up with the setting's name (:func:`load_job_settings`); a secret is
never echoed in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings

from progress_control.settings import ConfigurationError, component_config
from progress_control.trust import DEFAULT_MAX_SKEW_MS, TrustPolicy, allowed_sources, parse_keys

__all__ = ["ENV_PREFIX", "SparkJobSettings", "load_job_settings"]

ENV_PREFIX = "PROGRESS_CONTROL_SPARK_"
_SECRET_FIELDS = frozenset({"control_verification_keys"})


class SparkJobSettings(BaseSettings):
    """Control-record trust settings of the streaming and batch jobs (see the module docstring)."""

    model_config = component_config(ENV_PREFIX)

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
            parse_keys(value.get_secret_value())  # raises ValueError without the secret
        return value

    @field_validator("control_verification_keys_file")
    @classmethod
    def _file_parses(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                text = value.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read {value}: {exc}") from None
            keys = parse_keys(text.strip())
            if not keys:
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


def load_job_settings(**values: Any) -> SparkJobSettings:
    """:class:`SparkJobSettings` from ``values`` and the environment.

    Raises :class:`progress_control.settings.ConfigurationError` naming every invalid setting and
    its env variable; the values of the key settings are never part of the message.
    """
    try:
        return SparkJobSettings(**values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"]) or "(settings)"
            env = f"{ENV_PREFIX}{name.upper()}"
            shown = "" if name in _SECRET_FIELDS else f" [got {error.get('input')!r}]"
            problems.append(f"  {name} (env {env}): {error['msg']}{shown}")
        raise ConfigurationError(
            "invalid Spark job configuration:\n" + "\n".join(problems)
        ) from None

"""Configuration conventions shared by every component.

Each component has its own settings class with an env prefix (``PROGRESS_CONTROL_<COMPONENT>_``),
nested values use ``__`` (``PROGRESS_CONTROL_RUNTIME_KAFKA__BOOTSTRAP_SERVERS``), and Kafka client
settings are carried as a plain ``dict`` passed to librdkafka untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from progress_control.env_names import unknown_variables
from progress_control.kafka_properties import KafkaProperties, is_secret_property, masked
from progress_control.trust import (
    DEFAULT_MAX_SKEW_MS,
    SigningKey,
    TrustPolicy,
    allowed_sources,
    parse_keys,
)

__all__ = [
    "ConfigurationError",
    "ControlTrustSettings",
    "KafkaProperties",
    "SigningSettings",
    "check_environment",
    "component_config",
    "default_cache_dir",
    "load_settings",
    "read_secret_file",
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
        # A ValidationError's text would echo every input, secrets included; load_settings
        # builds the message itself, showing only values that cannot be secret (shown_input).
        hide_input_in_errors=True,
    )


class ConfigurationError(ValueError):
    """Invalid configuration; the message names every offending setting."""


def shown_input(cls: type[BaseModel], error: ErrorDetails) -> str:
    """`` [got <value>]`` for a validation error of ``cls``, or nothing where the value may be a
    secret: a ``SecretStr`` setting's, a secret Kafka property's
    (:func:`~progress_control.kafka_properties.is_secret_property`), or a whole-model error's
    (its input is every value). A mapping shows with its secret values masked."""
    if not error["loc"]:
        return ""
    field = cls.model_fields.get(str(error["loc"][0]))
    if field is not None and (
        field.annotation is SecretStr or SecretStr in getattr(field.annotation, "__args__", ())
    ):
        return ""
    if any(isinstance(part, str) and is_secret_property(part) for part in error["loc"][1:]):
        return ""
    return f" [got {masked(error.get('input'))!r}]"


def check_environment(cls: type[BaseSettings]) -> None:
    """Fail on a ``PROGRESS_CONTROL_*`` variable no component reads (a typo would otherwise be
    ignored), naming the closest valid one (:mod:`progress_control.env_names`); ``cls``'s own
    fields count as known. Called wherever settings load from the environment."""
    problems = unknown_variables(os.environ, cls)
    if problems:
        raise ConfigurationError("\n".join(problems))


def load_settings(cls: type[S], **values: Any) -> S:
    """Build ``cls`` from ``values`` and the environment, failing fast with the settings' names
    (and the offending values, except those that may be secret: :func:`shown_input`), or on an
    unknown ``PROGRESS_CONTROL_*`` variable (:func:`check_environment`)."""
    check_environment(cls)
    try:
        return cls(**values)
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"])
            # A whole-model error names its settings itself; only a field has one env variable.
            env = f" (env {prefix}{name.upper().replace('.', '__')})" if prefix and name else ""
            name = name or "(settings)"
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


class SigningSettings(BaseSettings):
    """The key a writer signs its control records with (protocol v2, see
    :mod:`progress_control.trust`): one rule set for every writer we ship — the interceptor, the
    sidecar and the streams runtime — so signing works the same through every hop.

    ``signing_key_id`` needs a secret, from ``signing_key_secret`` or ``signing_key_file`` (one,
    not both), of at least 16 bytes of UTF-8; a secret needs an id. The file is read once, at
    construction, so a missing file or a short secret fails at start-up, not at the first tick.
    Error messages name each setting as the component spells it (:meth:`setting_name`) and
    never contain the secret. Secrets come from the environment, a config dict or a file, never
    from a command line, where they would show in ``ps`` and shell history.
    """

    signing_key_id: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Sign every control record this component writes (protocol v2) with this "
        "key id; the secret comes from the signing key secret or the signing key file. Readers "
        "verify with the same id and secret; unset: unsigned (v1) control records.",
    )
    signing_key_secret: SecretStr | None = Field(
        None,
        description="The signing secret (>= 16 bytes UTF-8), from the env or a config dict; "
        "never from a command line, never logged or shown.",
    )
    signing_key_file: Path | None = Field(
        None,
        description="A file holding the signing secret instead (e.g. a mounted Kubernetes "
        "Secret; surrounding whitespace stripped), read once at start-up.",
    )
    _signing_key: SigningKey | None = PrivateAttr(None)

    @classmethod
    def setting_name(cls, field: str) -> str:
        """How messages name the setting ``field``: ``field (env PREFIX_FIELD)``; components
        whose settings are spelt otherwise (the interceptor's dotted config keys) override it."""
        prefix = str(cls.model_config.get("env_prefix", ""))
        return f"{field} (env {prefix}{field.upper()})"

    @field_validator("signing_key_id", "signing_key_secret", "signing_key_file", mode="before")
    @classmethod
    def _unset_signing(cls, value: Any) -> Any:
        # Env variables cannot be null: "" (a chart's empty default) or "none" unsets them.
        if isinstance(value, str) and value.strip().lower() in {"", "none", "null"}:
            return None
        return value

    @model_validator(mode="after")
    def _signing(self) -> Self:
        # Read once, at construction: a missing file or a short secret fails here, naming the
        # setting, never at the first tick. Messages never include the secret.
        name = self.setting_name
        sources = f"{name('signing_key_secret')} or {name('signing_key_file')}"
        secret = self._signing_secret()
        if self.signing_key_id is None:
            if secret is not None:
                raise ValueError(f"{name('signing_key_id')} is required with a signing secret")
            return self
        if secret is None:
            raise ValueError(f"{name('signing_key_id')} is set: set {sources}")
        if len(secret) < 16:
            raise ValueError(f"{sources}: the signing secret must be at least 16 bytes")
        self._signing_key = SigningKey(self.signing_key_id, secret)
        return self

    def _signing_secret(self) -> bytes | None:
        """The secret from the settings, ``None`` when none is set; components with another
        place for it (the sidecar's secrets directory) extend this."""
        if self.signing_key_secret is not None and self.signing_key_file is not None:
            raise ValueError(
                f"set one of {self.setting_name('signing_key_secret')} and "
                f"{self.setting_name('signing_key_file')}, not both"
            )
        if self.signing_key_secret is not None:
            return self.signing_key_secret.get_secret_value().encode("utf-8")
        if self.signing_key_file is None:
            return None
        return read_secret_file(self.signing_key_file, self.setting_name("signing_key_file"))

    @property
    def signing_key(self) -> SigningKey | None:
        """The key every control record is signed with, ``None`` for unsigned (v1) records."""
        return self._signing_key


def read_secret_file(path: Path, setting: str) -> bytes:
    """A secret from a file (UTF-8, surrounding whitespace stripped: a Secret written with
    ``echo`` ends with a newline); ``ValueError`` naming ``setting``, never the content."""
    try:
        return path.read_text(encoding="utf-8").strip().encode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{setting}: cannot read {str(path)!r}: {exc.__class__.__name__}"
        ) from None


def default_cache_dir() -> Path:
    """Where downloaded jars live: ``$PROGRESS_CONTROL_CACHE_DIR``, else the user's cache dir."""
    override = os.environ.get("PROGRESS_CONTROL_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-progress-control"

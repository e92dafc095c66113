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

And what a data record looks like (:class:`~progress_control_apps.spark.input_schema.InputSchema`;
the command line's ``--user-field``, ``--time-field``, ... win over these):

- ``PROGRESS_CONTROL_SPARK_INPUT_USER_FIELD`` (default ``user``) or
  ``PROGRESS_CONTROL_SPARK_INPUT_USER_FROM_KEY=true``;
- ``PROGRESS_CONTROL_SPARK_INPUT_TIME_FIELD`` (default unset: the record timestamp);
- ``PROGRESS_CONTROL_SPARK_INPUT_PAGE_FIELD`` (default ``page``; empty: none);
- ``PROGRESS_CONTROL_SPARK_INPUT_INTEGER_FIELDS`` (default ``ts``; comma list, empty: none);
- ``PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT`` (``json``, ``avro`` or ``json-schema``),
  ``PROGRESS_CONTROL_SPARK_SCHEMA_REGISTRY_URL`` (the place for a URL holding credentials),
  ``PROGRESS_CONTROL_SPARK_INPUT_VALUE_SUBJECT`` (default ``<topic>-value``) and
  ``PROGRESS_CONTROL_SPARK_INPUT_ON_UNKNOWN_SCHEMA_ID`` (``error`` or ``fail``).

Invalid values fail at start-up with the setting's name (:func:`load_job_settings`); a secret is
never echoed in the message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from progress_control.settings import ControlTrustSettings, component_config, load_settings
from progress_control_apps.spark.input_schema import InputSchema

__all__ = ["ENV_PREFIX", "SparkJobSettings", "load_job_settings"]

ENV_PREFIX = "PROGRESS_CONTROL_SPARK_"


class SparkJobSettings(ControlTrustSettings):
    """Control-record trust and input-schema settings of the streaming, batch and reconcile jobs
    (see the module docstring)."""

    model_config = component_config(ENV_PREFIX)

    input_user_field: str = Field(
        "user",
        min_length=1,
        description="The JSON value field holding the user (a string).",
    )
    input_user_from_key: bool = Field(
        False, description="The record key (UTF-8) is the user, not input_user_field."
    )
    input_time_field: str | None = Field(
        None,
        description="The JSON value field holding the event time, epoch milliseconds as a JSON "
        "integer; unset or empty: the Kafka record timestamp.",
    )
    input_page_field: str | None = Field(
        "page",
        description="A JSON string field every event must carry (the page); empty: none.",
    )
    input_integer_fields: str = Field(
        "ts",
        description="Comma-separated JSON integer fields every event must carry, checked and "
        "otherwise unused; empty: none.",
    )

    input_value_format: Literal["json", "avro", "json-schema"] = Field(
        "json",
        description="How values are encoded: JSON text; Schema Registry-framed Avro (decoded "
        "with the writer schema their id names); Schema Registry-framed JSON text.",
    )
    schema_registry_url: SecretStr | None = Field(
        None,
        description="The Schema Registry (Confluent API) holding the value schemas; required for "
        "avro. Credentials go in the URL (https://user:secret@host), so set it here, not on a "
        "command line.",
    )
    input_value_subject: str | None = Field(
        None, description="The subject of the value schemas; unset: <topic>-value."
    )
    input_on_unknown_schema_id: Literal["error", "fail"] = Field(
        "error",
        description="A registry-framed value whose schema id the job did not fetch at start: an "
        "error row, or a failed query (restarted, the job fetches the schemas again).",
    )

    @field_validator(
        "input_user_field", "input_time_field", "input_page_field", "input_integer_fields"
    )
    @classmethod
    def _field_names(cls, value: str | None) -> str | None:
        for name in _names(value or ""):
            InputSchema(name)  # its ValueError says what is wrong with the name
        return value

    def input_schema(self) -> InputSchema:
        """What a data record looks like (:class:`InputSchema`), from these settings."""
        return InputSchema(
            user_field=None if self.input_user_from_key else self.input_user_field,
            time_field=self.input_time_field or None,
            page_field=self.input_page_field or None,
            integer_fields=_names(self.input_integer_fields),
            value_format=self.input_value_format,
            schema_registry_url=(
                None
                if self.schema_registry_url is None
                else self.schema_registry_url.get_secret_value() or None
            ),
            value_subject=self.input_value_subject or None,
            on_unknown_schema_id=self.input_on_unknown_schema_id,
        )


def _names(text: str) -> tuple[str, ...]:
    """A comma list of field names (spaces around each name dropped)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def load_job_settings(**values: Any) -> SparkJobSettings:
    """:class:`SparkJobSettings` from ``values`` and the environment.

    Raises :class:`progress_control.settings.ConfigurationError` naming every invalid setting and
    its env variable; the values of the key settings are never part of the message.
    """
    return load_settings(SparkJobSettings, **values)

"""Kafka client properties as settings carry them: a real ``dict`` passed to librdkafka untouched,
whose secret values never show in a ``repr``, a ``str``, a JSON dump or an error message.

Which properties are secret (:func:`is_secret_property`), by the name lower-cased, with ``_``
and ``-`` read as ``.`` (env-style keys, ``SASL_PASSWORD``):

- the name ends with ``password``, ``passwd``, ``passphrase``, ``secret``, ``token``,
  ``credentials``, ``key`` or ``.pem`` (``sasl.password``, ``ssl.key.password``,
  ``sasl.oauthbearer.client.secret``, ``ssl.key.pem``; certificates in ``*.pem`` too: masking a
  public one costs nothing, missing a private one would);
- or it contains ``jaas`` or ``user.info`` (``sasl.jaas.config``, ``basic.auth.user.info``);
- or it is a SASL mechanism's config string, ``sasl.<...>.config`` (``sasl.oauthbearer.config``).

Paths and URLs (``ssl.key.location``, ``sasl.oauthbearer.token.endpoint.url``) stay readable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = [
    "MASK",
    "SECRET_NAME_PATTERN",
    "KafkaProperties",
    "MaskedProperties",
    "is_secret_property",
    "masked",
]

MASK = "**********"
"""What a secret value shows as (as pydantic's ``SecretStr``)."""

SECRET_NAME_PATTERN = (
    r"(password|passwd|passphrase|secret|token|credentials|key|\.pem)$"  # noqa: S105 - names
    r"|jaas|user\.?info|^sasl\..+\.config$"
)
"""The rule of :func:`is_secret_property`, on the name lower-cased with ``_`` and ``-`` read as
``.`` (the Helm chart's credential check uses it as it is)."""
_SECRET_NAME = re.compile(SECRET_NAME_PATTERN)


def is_secret_property(name: str) -> bool:
    """Whether the Kafka property ``name`` holds a secret (the rule in the module docstring)."""
    return bool(_SECRET_NAME.search(re.sub(r"[_-]", ".", name.lower())))


def masked(value: Any) -> Any:
    """``value`` with the values of secret keys replaced by :data:`MASK`, in mappings at any
    depth (a plain ``dict`` for display only; other values unchanged)."""
    if isinstance(value, Mapping):
        return {
            key: MASK if isinstance(key, str) and is_secret_property(key) else masked(item)
            for key, item in value.items()
        }
    return value


def _dotted_keys(value: Any) -> Any:
    # Env nesting cannot spell dots: PREFIX_KAFKA__BOOTSTRAP_SERVERS arrives as "bootstrap_servers".
    # Kafka property names are dotted and never use underscores, so map env-style keys back.
    if isinstance(value, Mapping):
        return {
            (key if "." in key else key.replace("_", ".")): str(item) for key, item in value.items()
        }
    return value


def _serialize(value: dict[str, str], info: core_schema.SerializationInfo) -> Any:
    # JSON is for showing and shipping elsewhere: masked, as pydantic masks a SecretStr. A Python
    # dump keeps the dict itself (real values, masked repr), so settings rebuilt from it work.
    return masked(value) if info.mode_is_json() else value


class MaskedProperties(dict[str, str]):
    """A real ``dict`` of Kafka properties whose ``repr``/``str`` mask secret values:
    ``{**properties}`` and ``Producer(properties)`` see every value."""

    def __repr__(self) -> str:
        return repr(masked(self))

    __str__ = __repr__


class _KafkaPropertiesSchema:
    """Validates a mapping into :class:`MaskedProperties` (env-style keys dotted)."""

    def __get_pydantic_core_schema__(
        self, _source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            _dotted_keys,
            core_schema.no_info_after_validator_function(MaskedProperties, handler(dict[str, str])),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _serialize, info_arg=True
            ),
        )


KafkaProperties = Annotated[dict[str, str], _KafkaPropertiesSchema()]
"""The type of a settings field of Kafka client (or broker) properties: passed through untouched
apart from env-style keys (``bootstrap_servers`` is ``bootstrap.servers``), held as a
:class:`MaskedProperties`, so secret values show masked in ``repr``/``str`` and JSON dumps."""

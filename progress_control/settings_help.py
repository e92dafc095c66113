"""A settings class as ``--help`` text: every field's env variable, default and description, from
the class itself, so the help cannot fall behind the settings."""

from __future__ import annotations

import enum
import textwrap
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

__all__ = ["settings_help"]

_WIDTH = 100


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "empty" if field.default_factory in {dict, list, tuple} else "computed at start"
    value: Any = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    if isinstance(value, tuple):
        value = ",".join(str(item) for item in value)
    return str(value) or "empty"


def _is_dict(field: FieldInfo) -> bool:
    return field.annotation is dict or getattr(field.annotation, "__origin__", None) is dict


def settings_help(cls: type[BaseSettings], title: str) -> str:
    """``title``, then one entry per field of ``cls``: its env variable (``<PREFIX><FIELD>``;
    ``<PREFIX><FIELD>__<KEY>`` for a dict field's entries), default and description. For an
    argparse epilog with ``RawDescriptionHelpFormatter``."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    lines = [title]
    for name, field in cls.model_fields.items():
        env = f"{prefix}{name.upper()}"
        if _is_dict(field):
            env = f"{env}__<KEY>"
        lines.append(f"  {env}  (default: {_default(field)})")
        if field.description:
            lines.extend(
                textwrap.wrap(
                    field.description,
                    _WIDTH,
                    initial_indent="      ",
                    subsequent_indent="      ",
                )
            )
    return "\n".join(lines)

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

from typing import Any

from progress_control.settings import ControlTrustSettings, component_config, load_settings

__all__ = ["ENV_PREFIX", "SparkJobSettings", "load_job_settings"]

ENV_PREFIX = "PROGRESS_CONTROL_SPARK_"


class SparkJobSettings(ControlTrustSettings):
    """Control-record trust settings of the streaming and batch jobs (see the module docstring)."""

    model_config = component_config(ENV_PREFIX)


def load_job_settings(**values: Any) -> SparkJobSettings:
    """:class:`SparkJobSettings` from ``values`` and the environment.

    Raises :class:`progress_control.settings.ConfigurationError` naming every invalid setting and
    its env variable; the values of the key settings are never part of the message.
    """
    return load_settings(SparkJobSettings, **values)

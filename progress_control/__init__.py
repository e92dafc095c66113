"""kafka-progress-control: stream time that keeps moving when data stops.

The control-record protocol lives here; the embedded broker, jar fetch and shared configuration are
in submodules.
"""

from progress_control.protocol import (
    CONTROL_HEADER,
    DEFAULT_SENTINEL_KEY,
    PROTOCOL_VERSION,
    ControlMarker,
    ControlRecord,
    MalformedControlHeaderError,
    TimestampMode,
    extrapolated_timestamp_ms,
    is_control_record,
    parse_control_headers,
)

__version__ = "0.1.0"
"""The distribution's version (``pyproject.toml`` reads it from here)."""

__all__ = [
    "CONTROL_HEADER",
    "DEFAULT_SENTINEL_KEY",
    "PROTOCOL_VERSION",
    "ControlMarker",
    "ControlRecord",
    "MalformedControlHeaderError",
    "TimestampMode",
    "__version__",
    "extrapolated_timestamp_ms",
    "is_control_record",
    "parse_control_headers",
]

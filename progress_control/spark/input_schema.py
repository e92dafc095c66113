"""What a data record of the events topic must look like: :class:`InputSchema`.

The jobs read click events: a JSON object value, a user, and an event time. The schema says
where each comes from; :func:`progress_control.spark.source.parse_records` checks every record
against it in Spark SQL expressions and sends a record that does not fit to the errors output,
with a reason naming the field (``missing field 'uid'``).

The default is the shape the jobs always read, the one the demo's runtime forwards to its events
topic: value ``{"user": <string>, "page": <string>, "ts": <integer>}`` (other fields ignored),
event time the Kafka record timestamp. ``ts`` is checked to be an integer but not used.

This module imports no Spark, so command lines and settings can build a schema cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_INPUT_SCHEMA", "MAX_EPOCH_MS", "InputSchema"]

MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the latest instant a Spark timestamp holds: a time field beyond it
(or negative) is an error, not an overflow."""


@dataclass(frozen=True, slots=True)
class InputSchema:
    """Where a data record's user and event time come from, and which fields it must carry.

    The value is always a JSON object. ``None`` turns a field off:

    - ``user_field``: the value field holding the user, a JSON string; ``None``: the record key
      (UTF-8, not null) is the user.
    - ``time_field``: the value field holding the event time, epoch milliseconds as a JSON integer
      (``1714557600000``; not a string, not a fraction, not an exponent, 0 to
      :data:`MAX_EPOCH_MS`); ``None``: the Kafka record timestamp is the event time.
    - ``page_field``: a value field every record must carry as a JSON string (kept as the
      ``page`` column of :func:`~progress_control.spark.source.parse_records`); ``None``: none.
    - ``integer_fields``: value fields every record must carry as JSON integers, checked and
      otherwise unused (default ``("ts",)``, as the jobs always checked the click's own time).

    Control records move the watermark by their Kafka record timestamp whatever the schema, so a
    ``time_field`` must hold the time the record was stamped with (what the producer passed as
    its timestamp, as the demo's ``ts`` is); an event time earlier than its record's timestamp
    can arrive after a tick moved the watermark past it, and be dropped as late.
    """

    user_field: str | None = "user"
    time_field: str | None = None
    page_field: str | None = "page"
    integer_fields: tuple[str, ...] = ("ts",)

    def __post_init__(self) -> None:
        if isinstance(self.integer_fields, str):
            raise TypeError("integer_fields is a tuple of field names, not a string")
        object.__setattr__(self, "integer_fields", tuple(self.integer_fields))
        named = [
            ("user_field", self.user_field),
            ("time_field", self.time_field),
            ("page_field", self.page_field),
            *(("integer_fields", name) for name in self.integer_fields),
        ]
        for setting, name in named:
            if name is None:
                continue
            if not isinstance(name, str) or not name:
                raise ValueError(f"{setting}: a field name is a non-empty string, got {name!r}")
            if "'" in name and '"' in name:
                raise ValueError(f"{setting}: a field name holds ' or \", not both: {name!r}")

    @property
    def user_from_key(self) -> bool:
        """Whether the record key is the user."""
        return self.user_field is None

    @property
    def time_from_record(self) -> bool:
        """Whether the Kafka record timestamp is the event time."""
        return self.time_field is None

    def describe(self) -> str:
        """One line for logs and ``--help``-style summaries, e.g. ``user: value field 'user';
        event time: record timestamp; also required: page (string), ts (integer)``."""
        user = "record key" if self.user_field is None else f"value field {self.user_field!r}"
        time = (
            "record timestamp"
            if self.time_field is None
            else f"value field {self.time_field!r} (epoch ms)"
        )
        required = [] if self.page_field is None else [f"{self.page_field} (string)"]
        required += [f"{name} (integer)" for name in self.integer_fields]
        also = f"; also required: {', '.join(required)}" if required else ""
        return f"user: {user}; event time: {time}{also}"


DEFAULT_INPUT_SCHEMA = InputSchema()
"""What the jobs read unless told otherwise (see the module docstring)."""
